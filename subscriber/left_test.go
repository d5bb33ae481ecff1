package subscriber

import "testing"

// TestCameBack: a table listed at two reads left and came back in between
// only when every row that published it was replaced and its row filter
// and column list stayed as they were.
func TestCameBack(t *testing.T) {
	base := listedTable{filter: "(id > 10)", columns: "id,v", rows: []string{"n7", "r100"}}
	for _, c := range []struct {
		name string
		cur  listedTable
		want bool
	}{
		{"same rows", base, false},
		{"one row kept", listedTable{filter: base.filter, columns: base.columns, rows: []string{"n7", "r200"}}, false},
		{"every row replaced", listedTable{filter: base.filter, columns: base.columns, rows: []string{"r200"}}, true},
		{"replaced with another row filter (SET TABLE)", listedTable{filter: "(id > 20)", columns: base.columns, rows: []string{"r200"}}, false},
		{"replaced with another column list (SET TABLE)", listedTable{filter: base.filter, columns: "id", rows: []string{"r200"}}, false},
		{"no row now (FOR ALL TABLES)", listedTable{filter: base.filter, columns: base.columns}, false},
	} {
		if got := cameBack(base, c.cur); got != c.want {
			t.Errorf("%s: cameBack = %v, want %v", c.name, got, c.want)
		}
	}
	if cameBack(listedTable{}, listedTable{rows: []string{"r1"}}) {
		t.Errorf("a table no row published before (FOR ALL TABLES) came back")
	}
}
