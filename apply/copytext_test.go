package apply

import (
	"testing"

	"github.com/parapply/parapply"
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
