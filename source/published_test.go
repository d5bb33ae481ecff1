package source

import (
	"reflect"
	"strings"
	"testing"
)

// row builds a pg_publication_tables row as publishedTables reads it: NULL
// is given as "<nil>".
func pubRow(fields ...string) [][]byte {
	out := make([][]byte, len(fields))
	for i, f := range fields {
		if f != "<nil>" {
			out[i] = []byte(f)
		}
	}
	return out
}

func TestCombinePublished(t *testing.T) {
	for _, c := range []struct {
		name    string
		version int
		rows    [][][]byte
		want    []PublishedTable
		err     string
	}{
		{"a root published via root and its partition as itself: the partition is left out", 180000, [][][]byte{
			pubRow("public", "tab2", "a,b", "<nil>", "t", "100", "{}"),
			pubRow("public", "tab2_1", "a,b", "<nil>", "f", "101", "{100}"),
		}, []PublishedTable{{Schema: "public", Name: "tab2", Columns: []string{"a", "b"}}}, ""},
		{"a sub-partition under an intermediate listed parent", 150000, [][][]byte{
			pubRow("public", "mid", "", "<nil>", "t", "200", "{199}"),
			pubRow("public", "leaf", "", "<nil>", "f", "201", "{200,199}"),
		}, []PublishedTable{{Schema: "public", Name: "mid"}}, ""},
		{"no publication via root: partitions stay", 180000, [][][]byte{
			pubRow("public", "p1", "", "<nil>", "f", "101", "{100}"),
			pubRow("public", "parent", "", "<nil>", "f", "100", "{}"),
		}, []PublishedTable{{Schema: "public", Name: "p1"}, {Schema: "public", Name: "parent"}}, ""},
		{"row filters OR-ed; one without a filter passes all", 180000, [][][]byte{
			pubRow("public", "t", "", "(a > 1)", "f", "1", "{}"),
			pubRow("public", "t", "", "(a < 0)", "f", "1", "{}"),
			pubRow("public", "u", "", "(a > 1)", "f", "2", "{}"),
			pubRow("public", "u", "", "<nil>", "f", "2", "{}"),
		}, []PublishedTable{{Schema: "public", Name: "t", RowFilter: "((a > 1)) OR ((a < 0))"}, {Schema: "public", Name: "u"}}, ""},
		{"different column lists on 16+: refused", 160000, [][][]byte{
			pubRow("public", "t", "a,b", "<nil>", "f", "1", "{}"),
			pubRow("public", "t", "a,c", "<nil>", "f", "1", "{}"),
		}, nil, "different column lists"},
		{"different column lists on 15: their union", 150000, [][][]byte{
			pubRow("public", "t", "a,b", "<nil>", "f", "1", "{}"),
			pubRow("public", "t", "a,c", "<nil>", "f", "1", "{}"),
		}, []PublishedTable{{Schema: "public", Name: "t", Columns: []string{"a", "b", "c"}}}, ""},
		{"a table with no columns", 180000, [][][]byte{
			pubRow("public", "empty", "", "<nil>", "f", "1", "{}"),
		}, []PublishedTable{{Schema: "public", Name: "empty"}}, ""},
	} {
		got, err := combinePublished(c.rows, c.version)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one saying %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}
