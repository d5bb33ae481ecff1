package apply

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/parapply/parapply"
)

// The batcher's rules, driven without a database: changes go through the
// applier's Insert/Update/Delete, the open runs become queued statements
// (flushRuns), and what was queued is compared with what the rules say.

func newBatcher(tables ...*Table) *Applier {
	a := &Applier{cfg: Config{BatchRows: 1000, PipelineBytes: 1 << 30}, tables: map[uint32]*Table{}, sql: map[string]string{},
		Warn: func(string) {}, tallies: NewTallies()}
	for _, t := range tables {
		t.keyAndIdentity = append(slices.Clone(t.Key), t.AlwaysIdentity...)
		a.tables[t.Rel.ID] = t
	}
	return a
}

// triggerTable is simpleTable under another name, with a target trigger.
func triggerTable() *Table {
	t := simpleTable()
	rel := *t.Rel
	rel.ID, rel.Name = 9, "audited"
	t.Rel, t.Name, t.Triggers = &rel, rel.QualifiedName(), true
	return t
}

// A change in the tests' shorthand: kind I, U (key unchanged), K (key
// changed: old key, then new row), D; table id; values ("~" is an unchanged
// TOASTed value, "-" NULL).
type tc struct {
	kind byte
	rel  uint32
	old  []string
	new  []string
}

func tuple(vals []string) parapply.Tuple {
	if vals == nil {
		return nil
	}
	t := make(parapply.Tuple, len(vals))
	for i, v := range vals {
		switch v {
		case "~":
			t[i] = parapply.Value{Kind: parapply.ValueUnchanged}
		case "-":
			t[i] = parapply.Value{Kind: parapply.ValueNull}
		default:
			t[i] = parapply.Value{Kind: parapply.ValueText, Data: []byte(v)}
		}
	}
	return t
}

func (c tc) apply(ctx context.Context, a *Applier) error {
	switch c.kind {
	case 'I':
		return a.Insert(ctx, c.rel, tuple(c.new))
	case 'U':
		return a.Update(ctx, c.rel, 0, nil, tuple(c.new))
	case 'K':
		return a.Update(ctx, c.rel, 'K', tuple(c.old), tuple(c.new))
	case 'D':
		return a.Delete(ctx, c.rel, 'K', tuple(c.old))
	}
	return fmt.Errorf("unknown kind %c", c.kind)
}

// wideTable: a key and two text columns, either of which may arrive as an
// unchanged TOASTed value.
func wideTable() *Table {
	rel := &parapply.Relation{ID: 5, Namespace: "public", Name: "wide", ReplicaIdentity: parapply.IdentityDefault,
		Columns: []parapply.Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true}, {Name: "a", TypeOID: 25, TypeMod: -1}, {Name: "b", TypeOID: 25, TypeMod: -1}}}
	return &Table{Rel: rel, Name: rel.QualifiedName(), Types: []string{"integer", "text", "text"}, Key: []int{0}}
}

// arrayText reads a parameter as the applier encodes it (a one-dimensional
// array in PostgreSQL's binary format) and writes it as an array literal.
func arrayText(t *testing.T, b []byte) string {
	t.Helper()
	u32 := func() uint32 {
		if len(b) < 4 {
			t.Fatalf("array parameter cut short")
		}
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		b = b[4:]
		return v
	}
	ndim := u32()
	u32() // has nulls
	u32() // element type
	if ndim == 0 {
		return "{}"
	}
	n := u32()
	u32() // lower bound
	var vals []string
	for range n {
		l := u32()
		if l == 0xffffffff {
			vals = append(vals, "NULL")
			continue
		}
		vals = append(vals, string(b[:l]))
		b = b[l:]
	}
	return "{" + strings.Join(vals, ",") + "}"
}

// queued describes each statement queued: its first words and table, and
// its parameters as array literals.
func queued(t *testing.T, a *Applier) []string {
	var out []string
	for _, o := range a.ops {
		if o.table == nil {
			continue // BEGIN and the like
		}
		f := strings.Fields(o.sql)
		desc := f[0] + " " + o.table.Rel.Name
		for _, arg := range o.args {
			desc += " " + arrayText(t, arg.(textArray))
		}
		out = append(out, desc)
	}
	return out
}

func TestBatcherRules(t *testing.T) {
	s, c, g, trig, w := simpleTable(), compositeTable(), generatedTable(), triggerTable(), wideTable()
	tests := []struct {
		name      string
		changes   []tc
		want      []string
		collapsed int64
	}{
		{"inserts of one table and shape are one statement",
			[]tc{{'I', 1, nil, []string{"1", "1.5"}}, {'I', 1, nil, []string{"2", "-"}}},
			[]string{"INSERT simple {1,2} {1.5,NULL}"}, 0},
		{"a change of kind closes the run",
			[]tc{{'I', 1, nil, []string{"1", "1"}}, {'U', 1, nil, []string{"2", "2"}}, {'I', 1, nil, []string{"3", "3"}}},
			[]string{"INSERT simple {1} {1}", "UPDATE simple {2} {2}", "INSERT simple {3} {3}"}, 0},
		{"interleaved tables keep one run each, in the order opened",
			[]tc{{'U', 1, nil, []string{"1", "1"}}, {'U', 2, nil, []string{"7", "a", "x"}}, {'U', 1, nil, []string{"2", "2"}}, {'U', 2, nil, []string{"7", "b", "y"}}},
			[]string{"UPDATE simple {1,2} {1,2}", `UPDATE Composite {7,7} {a,b} {x,y}`}, 0},
		{"a table with a trigger never shares the open runs",
			[]tc{{'U', 1, nil, []string{"1", "1"}}, {'U', 9, nil, []string{"5", "5"}}, {'U', 1, nil, []string{"2", "2"}}},
			[]string{"UPDATE simple {1} {1}", "UPDATE audited {5} {5}", "UPDATE simple {2} {2}"}, 0},
		{"an unchanged TOASTed value leaves its column out, and changes the shape",
			[]tc{{'U', 5, nil, []string{"1", "x", "~"}}, {'U', 5, nil, []string{"2", "y", "z"}}, {'U', 5, nil, []string{"3", "~", "w"}}, {'U', 5, nil, []string{"4", "v", "~"}}},
			[]string{"UPDATE wide {1} {x}", "UPDATE wide {2} {y} {z}", "UPDATE wide {3} {w}", "UPDATE wide {4} {v}"}, 0},
		{"an update that sets nothing (only unchanged values) is dropped",
			[]tc{{'U', 5, nil, []string{"1", "~", "~"}}, {'U', 5, nil, []string{"2", "y", "z"}}},
			[]string{"UPDATE wide {2} {y} {z}"}, 0},
		{"repeated updates of a row collapse into the last",
			[]tc{{'U', 1, nil, []string{"1", "1"}}, {'U', 1, nil, []string{"2", "2"}}, {'U', 1, nil, []string{"1", "3"}}},
			[]string{"UPDATE simple {1,2} {3,2}"}, 1},
		{"no collapse across shapes",
			[]tc{{'U', 5, nil, []string{"1", "x", "y"}}, {'U', 5, nil, []string{"1", "~", "z"}}},
			[]string{"UPDATE wide {1} {x} {y}", "UPDATE wide {1} {z}"}, 0},
		{"a key change starts a new statement for the next change of either key",
			[]tc{{'K', 1, []string{"1", "-"}, []string{"10", "1"}}, {'U', 1, nil, []string{"10", "2"}}, {'U', 1, nil, []string{"3", "3"}}},
			[]string{"UPDATE simple {1} {10} {1}", "UPDATE simple {10,3} {2,3}"}, 0},
		{"no collapse into a key change",
			[]tc{{'K', 1, []string{"1", "-"}, []string{"10", "1"}}, {'K', 1, []string{"1", "-"}, []string{"11", "1"}}},
			[]string{"UPDATE simple {1} {10} {1}", "UPDATE simple {1} {11} {1}"}, 0},
		{"a delete of a row the run changed starts a new statement",
			[]tc{{'D', 1, []string{"1", "-"}, nil}, {'D', 1, []string{"2", "-"}, nil}, {'I', 1, nil, []string{"1", "9"}}, {'D', 1, []string{"1", "-"}, nil}},
			[]string{"DELETE simple {1,2}", "INSERT simple {1} {9}", "DELETE simple {1}"}, 0},
		{"generated columns are never sent",
			[]tc{{'I', 4, nil, []string{"1", "2", "-", "3.5"}}, {'U', 4, nil, []string{"1", "5", "-", "3.5"}}},
			[]string{"INSERT orders {1} {2} {3.5}", "UPDATE orders {1} {5} {3.5}"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			a := newBatcher(s, c, g, trig, w)
			a.Begin(Txn{XID: 1})
			for i, ch := range tt.changes {
				if err := ch.apply(ctx, a); err != nil {
					t.Fatalf("change %d: %v", i, err)
				}
			}
			if err := a.flushRuns(ctx); err != nil {
				t.Fatal(err)
			}
			got := queued(t, a)
			if !slices.Equal(got, tt.want) {
				t.Errorf("statements\n got  %q\n want %q", got, tt.want)
			}
			if n := a.Stats.Collapsed.Load(); n != tt.collapsed {
				t.Errorf("%d updates collapsed, want %d", n, tt.collapsed)
			}
		})
	}
}
