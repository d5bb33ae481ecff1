package apply

import (
	"slices"
	"testing"
	"time"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/pgtest"
)

// TestRefreshIfDue: the catalog fingerprint changes with each change of
// the target that a table's description is read from (and with no other),
// and RefreshIfDue then reads the description again: the new one is used,
// and a DBA is told when it differs.
func TestRefreshIfDue(t *testing.T) {
	ctx, srv := pgtest.ForTest(t, "apply-reread", 2*time.Minute)
	a, err := Open(ctx, Config{DSN: srv.DSN("postgres")})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	var warned []string
	a.Warn = func(m string) { warned = append(warned, m) }
	conn := pgtest.Connect(ctx, t, srv.DSN("postgres"))
	if _, err := conn.Exec(ctx, `CREATE TABLE r (id int PRIMARY KEY, v int, note text);
		CREATE TABLE other (id int PRIMARY KEY);
		CREATE FUNCTION nothing() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$`); err != nil {
		t.Fatal(err)
	}
	rel := &parapply.Relation{ID: 1, Namespace: "public", Name: "r", ReplicaIdentity: 'd',
		Columns: []parapply.Column{{Name: "id", TypeOID: 23, TypeMod: -1, Key: true}, {Name: "v", TypeOID: 23, TypeMod: -1}, {Name: "note", TypeOID: 25, TypeMod: -1}}}
	if err := a.Relation(ctx, rel); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		sql  string
		// sum: the fingerprint changes; differs: the description does,
		// and then has holds; unreadable: the description cannot be
		// read again (said once, the old one kept).
		sum, differs bool
		has          func(*Table) bool
		unreadable   bool
	}{
		{"rows written", `INSERT INTO r SELECT g, g FROM generate_series(1, 100) g; ANALYZE r`, false, false, nil, false},
		{"another table's trigger", `CREATE TRIGGER n BEFORE UPDATE ON other FOR EACH ROW EXECUTE FUNCTION nothing();
			ALTER TABLE other ENABLE REPLICA TRIGGER n`, false, false, nil, false},
		{"an ordinary trigger", `CREATE TRIGGER n BEFORE UPDATE ON r FOR EACH ROW EXECUTE FUNCTION nothing()`, true, false, nil, false},
		{"the trigger enabled for replicated changes", `ALTER TABLE r ENABLE REPLICA TRIGGER n`, true, true,
			func(t *Table) bool { return t.Triggers && t.suppresses('U') && !t.suppresses('D') }, false},
		{"a unique index", `CREATE UNIQUE INDEX r_v ON r (v)`, true, true,
			func(t *Table) bool {
				return t.ExtraUnique && len(t.Uniques) == 1 && slices.Equal(t.Uniques[0].Cols, []int{1})
			}, false},
		{"a column with a default", `ALTER TABLE r ADD COLUMN extra text NOT NULL DEFAULT 'x'`, true, false, nil, false},
		{"a check constraint", `ALTER TABLE r ADD CONSTRAINT v_positive CHECK (v > 0)`, true, false, nil, false},
		{"row security", `ALTER TABLE r ENABLE ROW LEVEL SECURITY`, true, true, func(t *Table) bool { return t.NoCopy }, false},
		{"the trigger disabled", `ALTER TABLE r DISABLE TRIGGER n`, true, true, func(t *Table) bool { return !t.Triggers && !t.suppresses('U') }, false},
		{"a published column renamed", `ALTER TABLE r RENAME COLUMN note TO remark`, true, false, nil, true},
		{"nothing", ``, false, false, nil, false},
	}
	for _, s := range steps {
		before := a.tables[rel.ID]
		sum := before.catalogSum
		if s.sql != "" {
			if _, err := conn.Exec(ctx, s.sql); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
		}
		warned = nil
		a.reread.next = time.Time{}
		if err := a.RefreshIfDue(ctx); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		after := a.tables[rel.ID]
		if s.unreadable && after != before {
			t.Errorf("%s: the description was replaced, want the old one kept", s.name)
		}
		if got := after.catalogSum != sum; got != s.sum {
			t.Errorf("%s: fingerprint changed %v, want %v", s.name, got, s.sum)
		}
		if got := !sameDescription(before, after); got != s.differs {
			t.Errorf("%s: description changed %v, want %v", s.name, got, s.differs)
		}
		if s.has != nil && !s.has(after) {
			t.Errorf("%s: the description read again does not say so: %+v", s.name, describing(after))
		}
		if got := len(warned); got != map[bool]int{true: 1}[s.differs || s.unreadable] {
			t.Errorf("%s: %d warnings %q, want one only for a changed description", s.name, got, warned)
		}
		if after.tally != before.tally {
			t.Errorf("%s: the description read again counts in another tally", s.name)
		}
	}
	// Not due: nothing is read.
	if _, err := conn.Exec(ctx, `ALTER TABLE r ENABLE REPLICA TRIGGER n`); err != nil {
		t.Fatal(err)
	}
	before := a.tables[rel.ID]
	if err := a.RefreshIfDue(ctx); err != nil {
		t.Fatal(err)
	}
	if a.tables[rel.ID] != before {
		t.Error("RefreshIfDue read the table again before it was due")
	}
}

// TestSwap: the runs of a round trip are bound to the descriptions the
// group read again, the others left as they are.
func TestSwap(t *testing.T) {
	rel1, rel2 := &parapply.Relation{ID: 1}, &parapply.Relation{ID: 2}
	old1, new1, t2 := &Table{Rel: rel1}, &Table{Rel: rel1, before: tgUpdate}, &Table{Rel: rel2}
	r1 := &run{table: old1, kind: 'U', rows: 2, params: [][][]byte{{[]byte("1"), []byte("2")}}}
	r2 := &run{table: t2, kind: 'D', rows: 1}
	ops := []op{{sql: "BEGIN"}, {sql: "u", run: r1, table: old1}, {sql: "d", run: r2, table: t2}}
	var r rereader
	if got := r.swap(slices.Clone(ops)); !slices.EqualFunc(got, ops, func(a, b op) bool { return a.run == b.run && a.table == b.table }) {
		t.Fatal("swap changed ops with nothing read again")
	}
	r.fresh = map[uint32]*Table{1: new1}
	got := r.swap(slices.Clone(ops))
	if got[1].run == r1 || got[1].run.table != new1 || got[1].table != new1 || got[1].run.rows != 2 || len(got[1].run.params[0]) != 2 {
		t.Errorf("the update run was not bound to the description read again: %+v", got[1])
	}
	if r1.table != old1 {
		t.Error("swap changed the builder's run")
	}
	if got[2].run != r2 || got[0].run != nil {
		t.Error("swap changed runs of other tables")
	}
	r.beginGroup()
	if r.current(old1) != old1 {
		t.Error("a new group still uses what the last one read again")
	}
}
