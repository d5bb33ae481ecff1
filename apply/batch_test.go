package apply

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/parapply/parapply"
)

// The batcher's rules, without a database: changes go to the batcher, its
// runs are closed, and the statements they would become (first word, table,
// each parameter as an array) are compared with what the rules say.

// testTables prepares hand-built tables as LoadTable would, by relation id.
func testTables(tables ...*Table) map[uint32]*Table {
	m := map[uint32]*Table{}
	for _, t := range tables {
		t.deriveSkips()
		m[t.Rel.ID] = t
	}
	return m
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

func (c tc) add(b *batcher, tables map[uint32]*Table) error {
	t := tables[c.rel]
	var err error
	switch c.kind {
	case 'I':
		b.insert(t, tuple(c.new))
	case 'U':
		_, err = b.update(t, 0, nil, tuple(c.new))
	case 'K':
		_, err = b.update(t, 'K', tuple(c.old), tuple(c.new))
	case 'O':
		_, err = b.update(t, 'O', tuple(c.old), tuple(c.new))
	case 'D':
		_, err = b.delete(t, tuple(c.old))
	default:
		err = fmt.Errorf("unknown kind %c", c.kind)
	}
	return err
}

// statements feeds changes to b and returns the statements of the runs
// it closes, in the order it closes them, the last ones closed at the end.
func statements(t *testing.T, b *batcher, tables map[uint32]*Table, changes []tc) []string {
	t.Helper()
	var got []string
	for i, ch := range changes {
		if err := ch.add(b, tables); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		for _, r := range b.take() {
			got = append(got, describe(r))
		}
	}
	b.closeAll()
	for _, r := range b.take() {
		got = append(got, describe(r))
	}
	return got
}

// describe names a closed run as the statement it becomes: its first word,
// its table and its parameters as array literals.
func describe(r *run) string {
	desc := strings.Fields(r.sql)[0] + " " + r.table.Rel.Name
	for _, p := range r.params {
		vals := make([]string, len(p))
		for i, v := range p {
			if v == nil {
				vals[i] = "NULL"
			} else {
				vals[i] = string(v)
			}
		}
		desc += " {" + strings.Join(vals, ",") + "}"
	}
	return desc
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
			desc += " " + arrayText(t, arg.(rawArray))
		}
		out = append(out, desc)
	}
	return out
}

func TestBatcherRules(t *testing.T) {
	tables := testTables(simpleTable(), compositeTable(), generatedTable(), triggerTable(), wideTable(), fullTable(), extraUniqueTable(), emptyTable(), placesTable())
	tests := []struct {
		name      string
		changes   []tc
		want      []string
		collapsed int64
		batchRows int
	}{
		{"inserts of one table and shape are one statement",
			[]tc{{'I', 1, nil, []string{"1", "1.5"}}, {'I', 1, nil, []string{"2", "-"}}},
			[]string{"INSERT simple {1,2} {1.5,NULL}"}, 0, 0},
		{"a change of kind closes the run",
			[]tc{{'I', 1, nil, []string{"1", "1"}}, {'U', 1, nil, []string{"2", "2"}}, {'I', 1, nil, []string{"3", "3"}}},
			[]string{"INSERT simple {1} {1}", "UPDATE simple {2} {2}", "INSERT simple {3} {3}"}, 0, 0},
		{"interleaved tables keep one run each, in the order opened",
			[]tc{{'U', 1, nil, []string{"1", "1"}}, {'U', 2, nil, []string{"7", "a", "x"}}, {'U', 1, nil, []string{"2", "2"}}, {'U', 2, nil, []string{"7", "b", "y"}}},
			[]string{"UPDATE simple {1,2} {1,2}", `UPDATE Composite {7,7} {a,b} {x,y}`}, 0, 0},
		{"a table with a trigger never shares the open runs",
			[]tc{{'U', 1, nil, []string{"1", "1"}}, {'U', 9, nil, []string{"5", "5"}}, {'U', 1, nil, []string{"2", "2"}}},
			[]string{"UPDATE simple {1} {1}", "UPDATE audited {5} {5}", "UPDATE simple {2} {2}"}, 0, 0},
		{"an unchanged TOASTed value leaves its column out, and changes the shape",
			[]tc{{'U', 5, nil, []string{"1", "x", "~"}}, {'U', 5, nil, []string{"2", "y", "z"}}, {'U', 5, nil, []string{"3", "~", "w"}}, {'U', 5, nil, []string{"4", "v", "~"}}},
			[]string{"UPDATE wide {1} {x}", "UPDATE wide {2} {y} {z}", "UPDATE wide {3} {w}", "UPDATE wide {4} {v}"}, 0, 0},
		{"an update that sets nothing (only unchanged values) is dropped",
			[]tc{{'U', 5, nil, []string{"1", "~", "~"}}, {'U', 5, nil, []string{"2", "y", "z"}}},
			[]string{"UPDATE wide {2} {y} {z}"}, 0, 0},
		{"repeated updates of a row collapse into the last",
			[]tc{{'U', 1, nil, []string{"1", "1"}}, {'U', 1, nil, []string{"2", "2"}}, {'U', 1, nil, []string{"1", "3"}}},
			[]string{"UPDATE simple {1,2} {3,2}"}, 1, 0},
		{"no collapse across shapes",
			[]tc{{'U', 5, nil, []string{"1", "x", "y"}}, {'U', 5, nil, []string{"1", "~", "z"}}},
			[]string{"UPDATE wide {1} {x} {y}", "UPDATE wide {1} {z}"}, 0, 0},
		{"a key change starts a new statement for the next change of either key",
			[]tc{{'K', 1, []string{"1", "-"}, []string{"10", "1"}}, {'U', 1, nil, []string{"10", "2"}}, {'U', 1, nil, []string{"3", "3"}}},
			[]string{"UPDATE simple {1} {10} {1}", "UPDATE simple {10,3} {2,3}"}, 0, 0},
		{"no collapse into a key change",
			[]tc{{'K', 1, []string{"1", "-"}, []string{"10", "1"}}, {'K', 1, []string{"1", "-"}, []string{"11", "1"}}},
			[]string{"UPDATE simple {1} {10} {1}", "UPDATE simple {1} {11} {1}"}, 0, 0},
		{"a delete of a row the run changed starts a new statement",
			[]tc{{'D', 1, []string{"1", "-"}, nil}, {'D', 1, []string{"2", "-"}, nil}, {'I', 1, nil, []string{"1", "9"}}, {'D', 1, []string{"1", "-"}, nil}},
			[]string{"DELETE simple {1,2}", "INSERT simple {1} {9}", "DELETE simple {1}"}, 0, 0},
		{"generated columns are never sent",
			[]tc{{'I', 4, nil, []string{"1", "2", "-", "3.5"}}, {'U', 4, nil, []string{"1", "5", "-", "3.5"}}},
			[]string{"INSERT orders {1} {2} {3.5}", "UPDATE orders {1} {5} {3.5}"}, 0, 0},
		{"a full run closes, and the next row starts another",
			[]tc{{'I', 1, nil, []string{"1", "1"}}, {'I', 1, nil, []string{"2", "2"}}, {'I', 1, nil, []string{"3", "3"}}},
			[]string{"INSERT simple {1,2} {1,2}", "INSERT simple {3} {3}"}, 0, 2},
		{"a closed run's keys are forgotten: the next run (reusing its index) collapses only its own",
			[]tc{{'U', 1, nil, []string{"1", "1"}}, {'U', 1, nil, []string{"2", "2"}}, {'U', 1, nil, []string{"3", "7"}}, {'U', 1, nil, []string{"1", "8"}}, {'U', 1, nil, []string{"4", "1"}}, {'U', 1, nil, []string{"4", "2"}}},
			[]string{"UPDATE simple {1,2} {1,2}", "UPDATE simple {3,1} {7,8}", "UPDATE simple {4} {2}"}, 1, 2},
		{"no collapse into an update of a table with a trigger",
			[]tc{{'U', 9, nil, []string{"1", "1"}}, {'U', 9, nil, []string{"1", "2"}}},
			[]string{"UPDATE audited {1} {1}", "UPDATE audited {1} {2}"}, 0, 0},
		{"no collapse on a table with unique indexes beyond the key",
			[]tc{{'U', 12, nil, []string{"1", "a"}}, {'U', 12, nil, []string{"1", "b"}}},
			[]string{"UPDATE uniq {1} {a}", "UPDATE uniq {1} {b}"}, 0, 0},
		{"REPLICA IDENTITY FULL: the next change of a row, named by its new image, starts a new statement",
			[]tc{{'O', 3, []string{"1", "{}", "t0"}, []string{"1", "{}", "t1"}}, {'O', 3, []string{"2", "{}", "t0"}, []string{"2", "{}", "t1"}}, {'O', 3, []string{"1", "{}", "t1"}, []string{"1", "{}", "t2"}}},
			[]string{"UPDATE docs {1,2} {{},{}} {t0,t0} {1,2} {{},{}} {t1,t1}", "UPDATE docs {1} {{}} {t1} {1} {{}} {t2}"}, 0, 0},
		{"REPLICA IDENTITY FULL: an update keeping a TOASTed value closes its run",
			[]tc{{'O', 3, []string{"1", "{}", "t0"}, []string{"1", "~", "t1"}}, {'O', 3, []string{"2", "{}", "t0"}, []string{"2", "~", "t1"}}},
			[]string{"UPDATE docs {1} {{}} {t0} {1} {t1}", "UPDATE docs {2} {{}} {t0} {2} {t1}"}, 0, 0},
		{"REPLICA IDENTITY FULL deletes are one statement",
			[]tc{{'D', 3, []string{"1", "{}", "t0"}, nil}, {'D', 3, []string{"2", "-", "t0"}, nil}},
			[]string{"DELETE docs {1,2} {{},NULL} {t0,t0}"}, 0, 0},
		{"REPLICA IDENTITY FULL: a NULL old value of a type without equality is matched, as by the built-in",
			[]tc{{'D', 14, []string{"1", "-", "a"}, nil}},
			[]string{"DELETE places {1} {NULL} {a}"}, 0, 0},
		{"rows of a table with no columns are counted by one NULL each",
			[]tc{{'I', 13, nil, []string{}}, {'I', 13, nil, []string{}}, {'D', 13, []string{}, nil}},
			[]string{"INSERT nocols {NULL,NULL}", "DELETE nocols {NULL}"}, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var collapsed atomic.Int64
			rows := tt.batchRows
			if rows == 0 {
				rows = 1000
			}
			b := newBatcher(rows, &collapsed)
			got := statements(t, b, tables, tt.changes)
			if !slices.Equal(got, tt.want) {
				t.Errorf("statements\n got  %q\n want %q", got, tt.want)
			}
			if n := collapsed.Load(); n != tt.collapsed {
				t.Errorf("%d updates collapsed, want %d", n, tt.collapsed)
			}
			if n := b.bytes(); n != 0 {
				t.Errorf("%d bytes left in the batcher after every run was taken", n)
			}
		})
	}
}

// extraUniqueTable: a key and a text column under a unique index of its
// own, so that updates run under a savepoint with a row-by-row fallback.
func extraUniqueTable() *Table {
	rel := &parapply.Relation{ID: 12, Namespace: "public", Name: "uniq", ReplicaIdentity: parapply.IdentityDefault,
		Columns: []parapply.Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true}, {Name: "code", TypeOID: 25, TypeMod: -1}}}
	return &Table{Rel: rel, Name: rel.QualifiedName(), Types: []string{"integer", "text"}, Key: []int{0}, ExtraUnique: true}
}

// emptyTable: no columns at all (REPLICA IDENTITY FULL, as PostgreSQL
// requires for deletes to be published).
func emptyTable() *Table {
	rel := &parapply.Relation{ID: 13, Namespace: "public", Name: "nocols", ReplicaIdentity: parapply.IdentityFull}
	return &Table{Rel: rel, Name: rel.QualifiedName(), Full: true}
}

func TestBatcherFallbackAndForget(t *testing.T) {
	tables := testTables(simpleTable(), extraUniqueTable())
	var collapsed atomic.Int64
	b := newBatcher(1000, &collapsed)
	if _, err := b.update(tables[12], 0, nil, tuple([]string{"1", "a"})); err != nil {
		t.Fatal(err)
	}
	if !b.cur.fallback {
		t.Errorf("an update of a table with unique indexes beyond its key must run with the row-by-row fallback")
	}
	b.insert(tables[1], tuple([]string{"1", "1"}))
	// A new description of simple closes its run (and only its run) and
	// drops its statements.
	b.forget(1)
	got := b.take()
	if len(got) != 1 || got[0].table.Rel.ID != 1 {
		t.Fatalf("forget(1) closed %d runs, want simple's alone", len(got))
	}
	for k := range b.sql {
		if k[3] == 1 && k[0] == 0 {
			t.Errorf("statement of simple kept after forget")
		}
	}
	if len(b.runs) != 1 || b.runs[0].table.Rel.ID != 12 {
		t.Errorf("uniq's run should stay open")
	}
	b.reset()
	if b.bytes() != 0 || b.cur != nil || len(b.runs) != 0 {
		t.Errorf("reset left runs behind")
	}
}

func TestBatcherRefuses(t *testing.T) {
	tables := testTables(simpleTable(), fullTable())
	noKey := simpleTable()
	noKey.Rel = &parapply.Relation{ID: 14, Namespace: "public", Name: "nokey", Columns: noKey.Rel.Columns}
	noKey.Name, noKey.Key = noKey.Rel.QualifiedName(), nil
	tables[14] = noKey
	ident := simpleTable()
	ident.Rel = &parapply.Relation{ID: 15, Namespace: "public", Name: "ident", Columns: ident.Rel.Columns}
	ident.Name, ident.AlwaysIdentity = ident.Rel.QualifiedName(), []int{1}
	tables[15] = ident
	var collapsed atomic.Int64
	b := newBatcher(1000, &collapsed)
	for _, tt := range []struct {
		c    tc
		want string
	}{
		{tc{'U', 3, nil, []string{"1", "{}", "t"}}, "came without its old row"},
		{tc{'U', 14, nil, []string{"1", "1"}}, "no replica identity key"},
		{tc{'D', 14, []string{"1", "-"}, nil}, "no replica identity key"},
		{tc{'K', 15, []string{"1", "5"}, []string{"1", "6"}}, "GENERATED ALWAYS AS IDENTITY"},
	} {
		err := tt.c.add(b, tables)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%c on %s: error %v, want one saying %q", tt.c.kind, tables[tt.c.rel].Name, err, tt.want)
		}
	}
	if len(b.runs) != 0 || len(b.ready) != 0 {
		t.Errorf("a refused change left a run behind")
	}
}

// The applier queues what the batcher closes, each parameter a text array
// in binary format, under one BEGIN.
func TestApplierQueuesRuns(t *testing.T) {
	ctx := context.Background()
	a := newApplier(Config{BatchRows: 2, PipelineBytes: 1 << 30}, nil)
	a.tables = testTables(simpleTable())
	a.Begin(Txn{XID: 1})
	for i, v := range []string{"1", "2", "3"} {
		if err := a.Insert(ctx, 1, tuple([]string{v, "-"})); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	if got := queued(t, a); !slices.Equal(got, []string{"INSERT simple {1,2} {NULL,NULL}"}) {
		t.Errorf("after three inserts with batch_rows 2: queued %q", got)
	}
	if err := a.Update(ctx, 1, 0, nil, tuple([]string{"3", "9"})); err != nil {
		t.Fatal(err)
	}
	if err := a.flushRuns(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"INSERT simple {1,2} {NULL,NULL}", "INSERT simple {3} {NULL}", "UPDATE simple {3} {9}"}
	if got := queued(t, a); !slices.Equal(got, want) {
		t.Errorf("queued\n got  %q\n want %q", got, want)
	}
	if a.ops[0].sql != "BEGIN" {
		t.Errorf("first op %q, want BEGIN", a.ops[0].sql)
	}
}

// TestFullRefusesIncomparable checks that an update or delete under
// REPLICA IDENTITY FULL whose old value in a column without an equality
// operator is not NULL stops with the built-in's message, naming the
// column and the fix.
func TestFullRefusesIncomparable(t *testing.T) {
	tables := testTables(placesTable())
	for _, ch := range []tc{
		{'D', 14, []string{"1", "(1,2)", "a"}, nil},
		{'O', 14, []string{"1", "(1,2)", "a"}, []string{"1", "(1,2)", "b"}},
	} {
		b := newBatcher(1000, new(atomic.Int64))
		err := ch.add(b, tables)
		if err == nil || !errors.Is(err, ErrSchema) || !strings.Contains(err.Error(), "could not identify an equality operator for type point") || !strings.Contains(err.Error(), `column "at"`) {
			t.Errorf("change %c: got %v, want the refusal naming column at and type point", ch.kind, err)
		}
	}
}
