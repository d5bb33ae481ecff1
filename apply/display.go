package apply

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/parapply/parapply"
)

// A binary stream's values are applied as they came, but some reach
// people: the conflict log's rows of a skipped transaction and a few
// errors show them. text renders such a value in PostgreSQL's text form
// for the types met most; any other shows its bytes in hex, marked so.

// text is value v of published column c in text form (ok false for NULL
// or an unchanged TOASTed value).
func (t *Table) text(c int, v parapply.Value) (s string, ok bool) {
	switch v.Kind {
	case parapply.ValueText:
		return string(v.Data), true
	case parapply.ValueBinary:
		var oid uint32
		if c >= 0 && c < len(t.elem) {
			oid = t.elem[c]
		}
		return binaryText(oid, v.Data), true
	}
	return "", false
}

// binaryText renders b, a value of type oid in binary form, as PostgreSQL
// would in text (timestamps with time zone in UTC).
func binaryText(oid uint32, b []byte) string {
	if s, ok := decodeBinary(oid, b); ok {
		return s
	}
	return fmt.Sprintf(`(binary, type %d) \x%s`, oid, hex.EncodeToString(b))
}

// postgresEpoch is 2000-01-01, where PostgreSQL counts dates and times
// from.
var postgresEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

func decodeBinary(oid uint32, b []byte) (string, bool) {
	fixed := func(n int) bool { return len(b) == n }
	switch oid {
	case pgtype.TextOID, pgtype.VarcharOID, pgtype.BPCharOID, pgtype.NameOID, pgtype.JSONOID, pgtype.XMLOID:
		return string(b), true
	case pgtype.JSONBOID:
		if len(b) > 0 && b[0] == 1 {
			return string(b[1:]), true
		}
	case pgtype.BoolOID:
		if fixed(1) {
			return map[bool]string{true: "t", false: "f"}[b[0] != 0], true
		}
	case pgtype.Int2OID:
		if fixed(2) {
			return strconv.Itoa(int(int16(binary.BigEndian.Uint16(b)))), true
		}
	case pgtype.Int4OID:
		if fixed(4) {
			return strconv.Itoa(int(int32(binary.BigEndian.Uint32(b)))), true
		}
	case pgtype.OIDOID:
		if fixed(4) {
			return strconv.FormatUint(uint64(binary.BigEndian.Uint32(b)), 10), true
		}
	case pgtype.Int8OID:
		if fixed(8) {
			return strconv.FormatInt(int64(binary.BigEndian.Uint64(b)), 10), true
		}
	case pgtype.Float4OID:
		if fixed(4) {
			return floatText(float64(math.Float32frombits(binary.BigEndian.Uint32(b))), 32), true
		}
	case pgtype.Float8OID:
		if fixed(8) {
			return floatText(math.Float64frombits(binary.BigEndian.Uint64(b)), 64), true
		}
	case pgtype.ByteaOID:
		return `\x` + hex.EncodeToString(b), true
	case pgtype.UUIDOID:
		if fixed(16) {
			h := hex.EncodeToString(b)
			return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], true
		}
	case pgtype.DateOID:
		if fixed(4) {
			return dateText(int32(binary.BigEndian.Uint32(b))), true
		}
	case pgtype.TimestampOID, pgtype.TimestamptzOID:
		if fixed(8) {
			return timestampText(int64(binary.BigEndian.Uint64(b)), oid == pgtype.TimestamptzOID), true
		}
	case pgtype.NumericOID:
		return numericText(b)
	}
	return "", false
}

// dateText writes d, days from postgresEpoch, as PostgreSQL does.
func dateText(d int32) string {
	switch d {
	case math.MaxInt32:
		return "infinity"
	case math.MinInt32:
		return "-infinity"
	}
	return postgresEpoch.AddDate(0, 0, int(d)).Format("2006-01-02")
}

// timestampText writes us, microseconds from postgresEpoch, as PostgreSQL
// does; withZone for a timestamptz, in UTC.
func timestampText(us int64, withZone bool) string {
	switch us {
	case math.MaxInt64:
		return "infinity"
	case math.MinInt64:
		return "-infinity"
	}
	ts := postgresEpoch.Add(time.Duration(us/1e6)*time.Second + time.Duration(us%1e6)*time.Microsecond)
	s := ts.Format("2006-01-02 15:04:05.999999")
	if withZone {
		s += "+00"
	}
	return s
}

// floatText writes f as PostgreSQL does (shortest exact form; Infinity,
// -Infinity, NaN).
func floatText(f float64, bits int) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	// Shortest digits, in exponent form outside [1e-4, 1e15) (float4:
	// 1e6), as float8out and float4out write them.
	limit := 1e15
	if bits == 32 {
		limit = 1e6
	}
	if a := math.Abs(f); a != 0 && (a < 1e-4 || a >= limit) {
		return strconv.FormatFloat(f, 'e', -1, bits)
	}
	return strconv.FormatFloat(f, 'f', -1, bits)
}

// numericText decodes numeric's binary form: ndigits, weight, sign, dscale,
// then base-10000 digits.
func numericText(b []byte) (string, bool) {
	if len(b) < 8 {
		return "", false
	}
	n := int(binary.BigEndian.Uint16(b))
	weight := int(int16(binary.BigEndian.Uint16(b[2:])))
	sign := binary.BigEndian.Uint16(b[4:])
	dscale := int(binary.BigEndian.Uint16(b[6:]))
	switch sign {
	case 0xC000:
		return "NaN", true
	case 0xD000:
		return "Infinity", true
	case 0xF000:
		return "-Infinity", true
	}
	if len(b) != 8+2*n || (sign != 0 && sign != 0x4000) {
		return "", false
	}
	// The value is digits * 10000^(weight-n+1).
	v := new(big.Int)
	for i := range n {
		v.Mul(v, big.NewInt(10000))
		v.Add(v, big.NewInt(int64(binary.BigEndian.Uint16(b[8+2*i:]))))
	}
	exp := 4 * (weight - n + 1) // power of ten of the last digit
	digits := v.String()
	if v.Sign() == 0 {
		digits, exp = "0", 0
	}
	// Shift to dscale digits after the point.
	if exp >= 0 {
		digits += strings.Repeat("0", exp)
	}
	frac := 0
	if exp < 0 {
		frac = -exp
	}
	for frac < dscale {
		digits += "0"
		frac++
	}
	for frac > dscale && strings.HasSuffix(digits, "0") {
		digits = digits[:len(digits)-1]
		frac--
	}
	if len(digits) <= frac {
		digits = strings.Repeat("0", frac-len(digits)+1) + digits
	}
	s := digits
	if frac > 0 {
		s = digits[:len(digits)-frac] + "." + digits[len(digits)-frac:]
	}
	if sign == 0x4000 {
		s = "-" + s
	}
	return s, true
}
