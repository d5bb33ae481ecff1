package apply

import (
	"encoding/binary"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// textArray is a text[] parameter already in PostgreSQL's binary array
// format. Statements carry every column of a run as one text array; encoding
// them here in one tight pass, instead of through pgx's reflective array
// encoder, was the applier's largest CPU cost for wide rows.
type textArray []byte

// encodeTextArray encodes vals (nil for NULL) as a one-dimensional text[].
func encodeTextArray(vals [][]byte) textArray {
	size, hasNull := 20, uint32(0)
	for _, v := range vals {
		size += 4 + len(v)
		if v == nil {
			hasNull = 1
		}
	}
	b := make([]byte, 0, size)
	b = binary.BigEndian.AppendUint32(b, 1) // dimensions
	b = binary.BigEndian.AppendUint32(b, hasNull)
	b = binary.BigEndian.AppendUint32(b, pgtype.TextOID)
	b = binary.BigEndian.AppendUint32(b, uint32(len(vals)))
	b = binary.BigEndian.AppendUint32(b, 1) // lower bound
	for _, v := range vals {
		if v == nil {
			b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

// textArrayCodec is pgx's text[] codec, taught to send a textArray as it is.
type textArrayCodec struct{ pgtype.Codec }

func (c textArrayCodec) PlanEncode(m *pgtype.Map, oid uint32, format int16, value any) pgtype.EncodePlan {
	if _, ok := value.(textArray); ok && format == pgtype.BinaryFormatCode {
		return rawPlan{}
	}
	return c.Codec.PlanEncode(m, oid, format, value)
}

type rawPlan struct{}

func (rawPlan) Encode(value any, buf []byte) ([]byte, error) {
	return append(buf, value.(textArray)...), nil
}

// registerTextArray makes conn send textArray parameters unchanged.
func registerTextArray(conn *pgx.Conn) {
	m := conn.TypeMap()
	if t, ok := m.TypeForOID(pgtype.TextArrayOID); ok {
		m.RegisterType(&pgtype.Type{Name: t.Name, OID: t.OID, Codec: textArrayCodec{t.Codec}})
	}
}
