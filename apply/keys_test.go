package apply

import (
	"testing"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/schedule"
)

// TestRowKeysUnique: two changes share a scheduling key exactly when they
// touch the same row or take the same value of a unique index; values an
// index cannot conflict on (NULL, unless NULLS NOT DISTINCT; an unchanged
// TOASTed value, the row's own) carry no key.
func TestRowKeysUnique(t *testing.T) {
	v := func(s string) parapply.Value { return parapply.Value{Kind: parapply.ValueText, Data: []byte(s)} }
	null := parapply.Value{Kind: parapply.ValueNull}
	same := parapply.Value{Kind: parapply.ValueUnchanged}
	row := func(id, email, code parapply.Value) parapply.Tuple { return parapply.Tuple{id, email, code} }
	keyOnly := func(id string) parapply.Tuple { return row(v(id), null, null) }

	table := func(mod func(*Table)) *Applier {
		rel := &parapply.Relation{ID: 1, Namespace: "public", Name: "acct", ReplicaIdentity: 'd',
			Columns: []parapply.Column{{Name: "id", Key: true}, {Name: "email"}, {Name: "code"}}}
		tb := &Table{Rel: rel, Name: rel.QualifiedName(), Key: []int{0}, ExtraUnique: true,
			Uniques: []UniqueIndex{{Name: "acct_email_key", Cols: []int{1}}, {Name: "acct_code_key", Cols: []int{2}, NullsEqual: true}}}
		if mod != nil {
			mod(tb)
		}
		return &Applier{tables: map[uint32]*Table{1: tb}}
	}
	type change struct{ old, new parapply.Tuple }
	tests := []struct {
		name   string
		mod    func(*Table)
		a, b   change
		shared bool
	}{
		{"same email", nil, change{nil, row(v("1"), v("x@"), null)}, change{nil, row(v("2"), v("x@"), null)}, true},
		{"different values", nil, change{nil, row(v("1"), v("x@"), v("c1"))}, change{nil, row(v("2"), v("y@"), v("c2"))}, false},
		{"same value, different indexes", nil, change{nil, row(v("1"), v("z"), null)}, change{nil, row(v("2"), null, v("z"))}, false},
		{"NULLs are distinct", nil, change{nil, row(v("1"), null, v("c1"))}, change{nil, row(v("2"), null, v("c2"))}, false},
		{"NULLS NOT DISTINCT", nil, change{nil, row(v("1"), v("a"), null)}, change{nil, row(v("2"), v("b"), null)}, true},
		{"unchanged TOAST takes nothing", nil, change{nil, row(v("1"), same, v("c1"))}, change{nil, row(v("2"), same, v("c2"))}, false},
		{"same row", nil, change{nil, row(v("1"), v("a"), v("c1"))}, change{keyOnly("1"), nil}, true},
		{"old key against new", nil, change{keyOnly("1"), row(v("9"), v("a"), v("c1"))}, change{nil, row(v("1"), v("b"), v("c2"))}, true},
		{"delete frees no key", nil, change{keyOnly("1"), nil}, change{nil, row(v("2"), v("a"), v("c2"))}, false},
		{"update takes the new value", nil, change{nil, row(v("1"), v("new"), v("c1"))}, change{nil, row(v("2"), v("new"), v("c2"))}, true},
		{"whole table", func(tb *Table) { tb.WholeTable = true }, change{nil, row(v("1"), v("a"), v("c1"))}, change{nil, row(v("2"), v("b"), v("c2"))}, true},
		{"no unique index", func(tb *Table) { tb.Uniques, tb.ExtraUnique = nil, false }, change{nil, row(v("1"), v("a"), null)}, change{nil, row(v("2"), v("a"), null)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := table(tt.mod)
			ka, barrier, err := a.RowKeys(1, nil, tt.a.old, tt.a.new)
			if err != nil || barrier {
				t.Fatalf("RowKeys: %v, barrier %v", err, barrier)
			}
			kb, _, err := a.RowKeys(1, nil, tt.b.old, tt.b.new)
			if err != nil {
				t.Fatal(err)
			}
			shared := false
			seen := map[schedule.Key]bool{}
			for _, k := range ka {
				seen[k] = true
			}
			for _, k := range kb {
				shared = shared || seen[k]
			}
			if shared != tt.shared {
				t.Errorf("share a key = %v, want %v (keys %v and %v)", shared, tt.shared, ka, kb)
			}
		})
	}

	t.Run("trigger is a barrier", func(t *testing.T) {
		a := table(func(tb *Table) { tb.Triggers = true })
		if _, barrier, _ := a.RowKeys(1, nil, nil, row(v("1"), v("a"), null)); !barrier {
			t.Error("a change to a table with a target trigger is not a barrier")
		}
	})
	t.Run("wrong width", func(t *testing.T) {
		if _, _, err := table(nil).RowKeys(1, nil, nil, parapply.Tuple{v("1")}); err == nil {
			t.Error("a tuple narrower than its relation gave no error")
		}
	})
}
