package apply

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/pgtest"
)

func TestEncodeCopyText(t *testing.T) {
	col := func(vs ...string) [][]byte {
		out := make([][]byte, len(vs))
		for i, v := range vs {
			if v != "<null>" {
				out[i] = []byte(v)
			}
		}
		return out
	}
	tests := []struct {
		name   string
		params [][][]byte
		want   string
	}{
		{"plain", [][][]byte{col("1", "2"), col("a", "b")}, "1\ta\n2\tb\n"},
		{"null and empty", [][][]byte{col("<null>", "")}, "\\N\n\n"},
		{"literal backslash N is not NULL", [][][]byte{col(`\N`)}, `\\N` + "\n"},
		{"separators escaped", [][][]byte{col("a\tb\nc\rd")}, `a\tb\nc\rd` + "\n"},
		{"backslashes doubled", [][][]byte{col(`x\y\\`)}, `x\\y\\\\` + "\n"},
		{"escape at both ends", [][][]byte{col("\tmid\n")}, `\tmid\n` + "\n"},
		{"multibyte untouched", [][][]byte{col("é\t€")}, `é\t€` + "\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, size := len(tc.params[0]), 0
			for _, p := range tc.params {
				for _, v := range p {
					size += len(v)
				}
			}
			if got := string(encodeCopyText(tc.params, rows, size)); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestCopySQL(t *testing.T) {
	tab := &Table{
		Rel:   &parapply.Relation{Columns: []parapply.Column{{Name: "id"}, {Name: "odd \"name\""}, {Name: "gen"}}},
		Name:  `"s"."t"`,
		Types: []string{"integer", "text", ""},
	}
	want := `COPY "s"."t" ("id", "odd ""name""") FROM STDIN`
	if got := CopySQL(tab, []int{0, 1}); got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// TestEncodeCopyBinary loads rows written by encodeCopyBinary into a real
// server with the COPY CopySQL gives a table whose values arrive in
// binary, and reads them back: integers, text with separators, bytes with
// NUL, empty values and NULLs.
func TestEncodeCopyBinary(t *testing.T) {
	ctx, srv := pgtest.ForTest(t, "apply-copy-binary", 2*time.Minute)
	conn, err := pgconn.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE TABLE cb (a int4, b text, c bytea)").ReadAll(); err != nil {
		t.Fatal(err)
	}
	tab := &Table{
		Rel:          &parapply.Relation{Columns: []parapply.Column{{Name: "a"}, {Name: "b"}, {Name: "c"}}},
		Name:         `"public"."cb"`,
		Types:        []string{"integer", "text", "bytea"},
		binaryValues: true,
	}
	sql := CopySQL(tab, []int{0, 1, 2})
	if want := `COPY "public"."cb" ("a", "b", "c") FROM STDIN WITH (FORMAT binary)`; sql != want {
		t.Fatalf("CopySQL: %s, want %s", sql, want)
	}
	i4 := func(n int32) []byte { return binary.BigEndian.AppendUint32(nil, uint32(n)) }
	params := [][][]byte{
		{i4(1), i4(-2), nil, i4(2147483647)},
		{[]byte("tab\tnew\nline \\N"), []byte(""), []byte("x"), nil},
		{[]byte{0, 1, 0xff}, []byte{}, nil, []byte("\\")},
	}
	size := 0
	for _, p := range params {
		for _, v := range p {
			size += len(v)
		}
	}
	data := tab.encodeCopy(params, 4, size)
	if _, err := conn.CopyFrom(ctx, bytes.NewReader(data), sql); err != nil {
		t.Fatal(err)
	}
	res, err := conn.Exec(ctx, `SELECT string_agg(concat_ws('|', coalesce(a::text, 'null'), coalesce(b, 'null'), coalesce(encode(c, 'hex'), 'null')), ',' ORDER BY a NULLS LAST) FROM cb`).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := "-2||,1|tab\tnew\nline \\N|0001ff,2147483647|null|5c,null|x|null"
	if got := string(res[0].Rows[0][0]); got != want {
		t.Errorf("rows %q, want %q", got, want)
	}
}
