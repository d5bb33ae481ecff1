package apply

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
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
