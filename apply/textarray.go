package apply

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/parapply/parapply"
)

// A run's values travel as one array parameter per column, already in
// PostgreSQL's binary array format (encoding them here in one tight pass,
// instead of through pgx's reflective array encoder, was the applier's
// largest CPU cost for wide rows). When the stream carries binary tuple
// data (Config.BinaryValues), each value's bytes go into an array of the
// column's own type as they came: nothing is parsed, here or on the
// target. Otherwise most are text arrays of the publisher's text form, cast
// to the column's type on the target, so that every type with a text input
// function (enums, domains, composites, ranges, arrays) works the same
// way; a column whose type is one of a few fixed-size built-in types, the
// same on both sides, travels as an array of that type instead, its text
// parsed here: the target then reads each value as it is, where a cast
// from text copies and parses it (for an update of an integer key and a
// float, a tenth of the statement's time).

// rawArray is an array parameter already in PostgreSQL's binary format.
type rawArray []byte

// binaryTypes are the types whose columns travel as arrays of their own
// type in a text stream, by OID, with their names and sizes in binary.
var binaryTypes = map[uint32]struct {
	name  string
	size  int
	array uint32
}{
	pgtype.BoolOID:   {"bool", 1, pgtype.BoolArrayOID},
	pgtype.Int2OID:   {"int2", 2, pgtype.Int2ArrayOID},
	pgtype.Int4OID:   {"int4", 4, pgtype.Int4ArrayOID},
	pgtype.Int8OID:   {"int8", 8, pgtype.Int8ArrayOID},
	pgtype.Float4OID: {"float4", 4, pgtype.Float4ArrayOID},
	pgtype.Float8OID: {"float8", 8, pgtype.Float8ArrayOID},
}

// paramType is the element type of the array parameter of published column
// c: "text", or the column's own type.
func (t *Table) paramType(c int) string {
	switch {
	case c < 0 || c >= len(t.elem) || t.elem[c] == 0:
		return "text"
	case t.binaryValues:
		return t.Types[c]
	}
	return binaryTypes[t.elem[c]].name
}

// textOf is the SQL for the publisher's text form of x, a value of column c
// as its parameter holds it.
func (t *Table) textOf(x string, c int) string {
	switch {
	case t.paramType(c) == "text":
		return x
	case t.elem[c] == pgtype.BoolOID:
		return "CASE " + x + " WHEN true THEN 't' WHEN false THEN 'f' END" // not true/false
	}
	return x + "::text"
}

// encodeParam encodes the values of published column c (nil for NULL) as
// the array parameter paramType names, in memory from ar (nil: allocated).
func (t *Table) encodeParam(ar *arena, c int, vals [][]byte) (rawArray, error) {
	if c < 0 || c >= len(t.elem) || t.elem[c] == 0 {
		return valueArray(ar, vals, pgtype.TextOID), nil
	}
	oid := t.elem[c]
	if t.binaryValues {
		return valueArray(ar, vals, oid), nil
	}
	size := binaryTypes[oid].size
	b := arrayHeader(ar, vals, oid, 20+len(vals)*(4+size))
	for _, v := range vals {
		if v == nil {
			b = binary.BigEndian.AppendUint32(b, 0xFFFFFFFF)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(size))
		var err error
		if b, err = appendBinary(b, oid, size, v); err != nil {
			// The publisher's column has the target's type: its text
			// form is always valid.
			return nil, fmt.Errorf("column %s of %s: %q is not a valid %s value: %w", parapply.QuoteIdent(t.Rel.Columns[c].Name), t.Name, v, binaryTypes[oid].name, err)
		}
	}
	return b, nil
}

// appendBinary appends the binary form (size bytes) of v, the text form
// of a value of type oid. Integers and booleans are read in place, with no
// copy of the text: this runs for every value of such a column.
func appendBinary(b []byte, oid uint32, size int, v []byte) ([]byte, error) {
	switch oid {
	case pgtype.BoolOID:
		switch {
		case len(v) == 1 && v[0] == 't':
			return append(b, 1), nil
		case len(v) == 1 && v[0] == 'f':
			return append(b, 0), nil
		}
		return b, strconv.ErrSyntax
	case pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID:
		n, err := parseInt(v, size*8)
		switch size {
		case 2:
			return binary.BigEndian.AppendUint16(b, uint16(n)), err
		case 4:
			return binary.BigEndian.AppendUint32(b, uint32(n)), err
		}
		return binary.BigEndian.AppendUint64(b, uint64(n)), err
	case pgtype.Float4OID:
		// PostgreSQL writes the shortest text that reads back as the
		// same value; Go reads Infinity, -Infinity and NaN too.
		f, err := strconv.ParseFloat(string(v), 32)
		return binary.BigEndian.AppendUint32(b, math.Float32bits(float32(f))), err
	case pgtype.Float8OID:
		f, err := strconv.ParseFloat(string(v), 64)
		return binary.BigEndian.AppendUint64(b, math.Float64bits(f)), err
	}
	return b, fmt.Errorf("no binary form for type %d", oid)
}

// parseInt reads a decimal integer of the given bit size, as
// strconv.ParseInt does, from bytes.
func parseInt(v []byte, bits int) (int64, error) {
	i, neg := 0, false
	if len(v) > 0 && (v[0] == '-' || v[0] == '+') {
		i, neg = 1, v[0] == '-'
	}
	if i == len(v) {
		return 0, strconv.ErrSyntax
	}
	limit := uint64(1) << (bits - 1) // the magnitude of the smallest value
	var u uint64
	for ; i < len(v); i++ {
		d := v[i] - '0'
		if d > 9 {
			return 0, strconv.ErrSyntax
		}
		if u > limit/10 {
			return 0, strconv.ErrRange
		}
		if u = u*10 + uint64(d); u > limit {
			return 0, strconv.ErrRange
		}
	}
	if neg {
		return -int64(u), nil
	}
	if u == limit {
		return 0, strconv.ErrRange
	}
	return int64(u), nil
}

// arrayHeader starts a one-dimensional array of vals' length with elements
// of type elem, with room for size bytes, in memory from ar.
func arrayHeader(ar *arena, vals [][]byte, elem uint32, size int) []byte {
	hasNull := uint32(0)
	for _, v := range vals {
		if v == nil {
			hasNull = 1
			break
		}
	}
	b := ar.get(size)
	b = binary.BigEndian.AppendUint32(b, 1) // dimensions
	b = binary.BigEndian.AppendUint32(b, hasNull)
	b = binary.BigEndian.AppendUint32(b, elem)
	b = binary.BigEndian.AppendUint32(b, uint32(len(vals)))
	return binary.BigEndian.AppendUint32(b, 1) // lower bound
}

// encodeTextArray encodes vals (nil for NULL) as a one-dimensional text[].
func encodeTextArray(vals [][]byte) rawArray { return valueArray(nil, vals, pgtype.TextOID) }

// valueArray encodes vals, each a value of type elem in its binary form
// (text's is the text), as a one-dimensional array, in memory from ar.
func valueArray(ar *arena, vals [][]byte, elem uint32) rawArray {
	size := 20
	for _, v := range vals {
		size += 4 + len(v)
	}
	b := arrayHeader(ar, vals, elem, size)
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
