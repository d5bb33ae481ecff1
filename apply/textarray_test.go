package apply

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/parapply/parapply"
)

func TestEncodeTextArray(t *testing.T) {
	tests := [][][]byte{
		{},
		{[]byte("a")},
		{[]byte("1"), nil, []byte{}, []byte("with \"quotes\", {braces} and \\ backslash"), []byte("ünïcode")},
		{nil, nil},
	}
	m := pgtype.NewMap()
	for _, vals := range tests {
		var got []*string
		if err := m.Scan(pgtype.TextArrayOID, pgtype.BinaryFormatCode, encodeTextArray(vals), &got); err != nil {
			t.Fatalf("%q: %v", vals, err)
		}
		if len(got) != len(vals) {
			t.Fatalf("%q: decoded %d elements", vals, len(got))
		}
		for i, v := range vals {
			switch {
			case v == nil && got[i] != nil:
				t.Errorf("%q: element %d is %q, want NULL", vals, i, *got[i])
			case v != nil && (got[i] == nil || *got[i] != string(v)):
				t.Errorf("%q: element %d is %v, want %q", vals, i, got[i], v)
			}
		}
	}
}

// TestEncodeParam: values of the binary types, in the text form the
// publisher sends, encode to arrays that pgx decodes to the same values
// (extremes, infinities, NaN, negative zero, NULL); text the type cannot
// read is refused with the column named; other types stay text.
func TestEncodeParam(t *testing.T) {
	rel := &parapply.Relation{Columns: []parapply.Column{{Name: "b"}, {Name: "s"}, {Name: "i"}, {Name: "l"}, {Name: "r"}, {Name: "d"}, {Name: "t"}}}
	tab := &Table{Rel: rel, Name: "public.x", elem: []uint32{pgtype.BoolOID, pgtype.Int2OID, pgtype.Int4OID, pgtype.Int8OID, pgtype.Float4OID, pgtype.Float8OID, 0}}
	tests := []struct {
		col  int
		vals []string // "NULL" for NULL
		want string   // pgx's decoding, as fmt prints []any
		bad  bool
	}{
		{0, []string{"t", "f", "NULL"}, "[true false <nil>]", false},
		{1, []string{"-32768", "32767", "0", "NULL"}, "[-32768 32767 0 <nil>]", false},
		{2, []string{"-2147483648", "2147483647", "7"}, "[-2147483648 2147483647 7]", false},
		{3, []string{"-9223372036854775808", "9223372036854775807", "NULL", "1"}, "[-9223372036854775808 9223372036854775807 <nil> 1]", false},
		{4, []string{"3.4028235e+38", "1e-45", "-0", "Infinity", "-Infinity", "0.1"}, "[3.4028235e+38 1e-45 -0 +Inf -Inf 0.1]", false},
		{5, []string{"1.7976931348623157e+308", "5e-324", "-0", "NaN", "0.1", "-Infinity"}, "[1.7976931348623157e+308 5e-324 -0 NaN 0.1 -Inf]", false},
		{6, []string{"any text", "NULL"}, "[any text <nil>]", false},
		{2, []string{"1", "2147483648"}, "", true},
		{0, []string{"true"}, "", true},
		{5, []string{"1,5"}, "", true},
	}
	m := pgtype.NewMap()
	for _, tt := range tests {
		vals := make([][]byte, len(tt.vals))
		for i, v := range tt.vals {
			if v != "NULL" {
				vals[i] = []byte(v)
			}
		}
		b, err := tab.encodeParam(nil, tt.col, vals)
		if tt.bad {
			if err == nil || !strings.Contains(err.Error(), "column "+parapply.QuoteIdent(rel.Columns[tt.col].Name)+" of public.x") {
				t.Errorf("%s %q: error %v, want one naming the column", tab.paramType(tt.col), tt.vals, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s %q: %v", tab.paramType(tt.col), tt.vals, err)
		}
		oid := uint32(pgtype.TextArrayOID)
		if e := tab.elem[tt.col]; e != 0 {
			oid = binaryTypes[e].array
		}
		var got []any
		if err := m.Scan(oid, pgtype.BinaryFormatCode, b, &got); err != nil {
			t.Fatalf("%s %q: decoding: %v", tab.paramType(tt.col), tt.vals, err)
		}
		var shown []string
		for _, g := range got {
			switch v := g.(type) {
			case float32:
				shown = append(shown, strconv.FormatFloat(float64(v), 'g', -1, 32))
			case float64:
				shown = append(shown, strconv.FormatFloat(v, 'g', -1, 64))
			default:
				shown = append(shown, fmt.Sprint(v))
			}
		}
		if s := "[" + strings.Join(shown, " ") + "]"; s != tt.want {
			t.Errorf("%s %q: decoded %s, want %s", tab.paramType(tt.col), tt.vals, s, tt.want)
		}
	}
}

// TestParseInt: parseInt agrees with strconv.ParseInt, value and error
// kind, at every size, on the edges and on malformed text.
func TestParseInt(t *testing.T) {
	inputs := []string{"0", "-0", "+7", "-1", "32767", "32768", "-32768", "-32769", "2147483647", "2147483648", "-2147483648", "-2147483649",
		"9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809", "99999999999999999999", "", "-", "+", "1a", " 1", "1.0"}
	for _, bits := range []int{16, 32, 64} {
		for _, in := range inputs {
			want, werr := strconv.ParseInt(in, 10, bits)
			got, err := parseInt([]byte(in), bits)
			if (werr == nil) != (err == nil) || werr == nil && got != want {
				t.Errorf("parseInt(%q, %d) = %d, %v; strconv says %d, %v", in, bits, got, err, want, werr)
			}
			if werr != nil && err != nil && !errors.Is(werr, err) {
				t.Errorf("parseInt(%q, %d): error %v, strconv's %v", in, bits, err, werr)
			}
		}
	}
}
