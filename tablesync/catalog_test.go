package tablesync

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/targetdb"
)

// TestPlanFromCatalogs: what plan reads of both catalogs for a table's
// copy (its size, ONLY for a plain table, the columns and format: text
// for a type without binary functions, as aclitem), and
// which indexes deferIndexes drops and saves (not one another table's
// foreign key needs, nor an exclusion constraint), picked up again by a
// second copy and rebuilt by finish.
func TestPlanFromCatalogs(t *testing.T) {
	ctx, srv := pgtest.ForTest(t, "tablesync-plan", 3*time.Minute)
	admin := pgtest.Connect(ctx, t, srv.DSN("postgres"))
	both := `CREATE TYPE mood AS ENUM ('a', 'b');
		CREATE TABLE plain (id int PRIMARY KEY, name text, g int GENERATED ALWAYS AS (id * 2) STORED);
		CREATE TABLE typed (id int PRIMARY KEY, m mood, tags mood[]);
		CREATE TABLE acl (id int PRIMARY KEY, a aclitem);
		CREATE TABLE acls (id int PRIMARY KEY, a aclitem[]);
		CREATE TABLE queries (id int PRIMARY KEY, q tsquery, v tsvector, o oidvector);
		CREATE TABLE named (id int PRIMARY KEY, r regclass);
		CREATE TABLE nameds (id int PRIMARY KEY, r regtype[]);
		CREATE TABLE parted (id int, k int) PARTITION BY RANGE (id);
		CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (1000);
		CREATE TABLE parted_2 PARTITION OF parted FOR VALUES FROM (1000) TO (2000);`
	for db, ddl := range map[string]string{
		"src": both + `CREATE TABLE widened (id int PRIMARY KEY);
			CREATE TABLE gen (id int PRIMARY KEY, g int GENERATED ALWAYS AS (id * 2) STORED);
			INSERT INTO plain (id, name) SELECT i, 'n' || i FROM generate_series(1, 300) i;
			INSERT INTO parted SELECT i, i FROM generate_series(0, 1999) i;
			ANALYZE;`,
		"dst": both + `CREATE TABLE widened (id bigint PRIMARY KEY);
			CREATE TABLE gen (id int PRIMARY KEY, g int);
			CREATE TABLE idx (id int, code text, other text, during tsrange, CONSTRAINT idx_pk PRIMARY KEY (id), CONSTRAINT idx_code UNIQUE (code), EXCLUDE USING gist (during WITH &&));
			CREATE INDEX idx_other ON idx (other);
			CREATE UNIQUE INDEX idx_other_code ON idx (other, code);
			CREATE TABLE ref (code text REFERENCES idx (code));`,
	} {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
			t.Fatal(err)
		}
		if _, err := pgtest.Connect(ctx, t, srv.DSN(db)).Exec(ctx, ddl); err != nil {
			t.Fatalf("%s: %v", db, err)
		}
	}
	src, dst := pgtest.Connect(ctx, t, srv.DSN("src")), pgtest.Connect(ctx, t, srv.DSN("dst"))

	tests := []struct {
		table        Table
		cols, format string
		only         bool
		rows         int64
		pagesAtLeast int64
		wantErr      string
	}{
		{Table{Schema: "public", Name: "plain"}, `"id", "name"`, "binary", true, 300, 1, ""},
		{Table{Schema: "public", Name: "plain", Columns: []string{"id", "g"}}, "", "", false, 0, 0, `column "g" of published table "public"."plain" is generated on the target`},
		{Table{Schema: "public", Name: "gen"}, `"id"`, "binary", true, 0, 0, ""},
		{Table{Schema: "public", Name: "gen", Columns: []string{"id", "g"}}, `"id", "g"`, "binary", true, 0, 0, ""},
		{Table{Schema: "public", Name: "typed"}, `"id", "m", "tags"`, "text", true, 0, 0, ""},
		{Table{Schema: "public", Name: "parted"}, `"id", "k"`, "binary", false, 2000, 2, ""},
		{Table{Schema: "public", Name: "widened"}, `"id"`, "text", true, 0, 0, ""},
		// Types without binary send and receive functions, alone and as an
		// array's elements; types with them (an empty tsquery, which its
		// receive function refuses, is met only while copying).
		{Table{Schema: "public", Name: "acl"}, `"a", "id"`, "text", true, 0, 0, ""},
		{Table{Schema: "public", Name: "acls"}, `"a", "id"`, "text", true, 0, 0, ""},
		{Table{Schema: "public", Name: "queries"}, `"id", "o", "q", "v"`, "binary", true, 0, 0, ""},
		// OID aliases: their binary form is an OID, which names another
		// object on the other server.
		{Table{Schema: "public", Name: "named"}, `"id", "r"`, "text", true, 0, 0, ""},
		{Table{Schema: "public", Name: "nameds"}, `"id", "r"`, "text", true, 0, 0, ""},
	}
	for _, tt := range tests {
		j, err := plan(ctx, src, dst, tt.table)
		if !errorAsWanted(t, "plan "+tt.table.QualifiedName(), err, tt.wantErr) {
			continue
		}
		if j.targetCols != tt.cols || j.sourceSel != tt.cols || j.format != tt.format || j.only != tt.only || j.estRows != tt.rows || j.pages < tt.pagesAtLeast {
			t.Errorf("plan %s %v: columns %s (select %s), %s, only %v, %d rows, %d pages; want %s, %s, only %v, %d rows, at least %d pages",
				tt.table.QualifiedName(), tt.table.Columns, j.targetCols, j.sourceSel, j.format, j.only, j.estRows, j.pages, tt.cols, tt.format, tt.only, tt.rows, tt.pagesAtLeast)
		}
	}

	// Deferred indexes.
	if err := targetdb.Migrate(ctx, dst); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadState(ctx, dst, "s"); err != nil {
		t.Fatal(err)
	}
	indexes := func() string {
		var s string
		if err := dst.QueryRow(ctx, `SELECT string_agg(indexrelid::regclass::text, ' ' ORDER BY indexrelid::regclass::text) FROM pg_index WHERE indrelid = 'idx'::regclass`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	all := indexes()
	cfg := Config{Slot: "s", DeferIndexes: true, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	idx := &tableJob{Table: Table{Schema: "public", Name: "idx"}}
	if may, err := deferIndexes(ctx, dst, cfg, idx, true); err != nil || !may || len(idx.deferred) != 0 || indexes() != all {
		t.Fatalf("deferIndexes of a table keeping its rows: %v, may %v, deferred %v, indexes %s; want none deferred, %s", err, may, idx.deferred, indexes(), all)
	}
	if may, err := deferIndexes(ctx, dst, cfg, idx, false); err != nil || !may {
		t.Fatalf("deferIndexes of an empty table the role owns: %v, may %v; want it may", err, may)
	}
	want := []string{
		"ALTER TABLE idx ADD CONSTRAINT idx_pk PRIMARY KEY (id)",
		"CREATE INDEX idx_other ON public.idx USING btree (other)",
		"CREATE UNIQUE INDEX idx_other_code ON public.idx USING btree (other, code)",
	}
	if got := statements(idx.deferred); !slices.Equal(got, want) {
		t.Errorf("deferred:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := indexes(); got != "idx_code idx_during_excl" {
		t.Errorf("indexes left on the table: %s, want idx_code (a foreign key's) and idx_during_excl (exclusion)", got)
	}
	saved := func() string {
		var s string
		if err := dst.QueryRow(ctx, `SELECT coalesce(string_agg(recreate, '; ' ORDER BY ord), '') FROM parapply.deferred_index`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// An interrupted copy's: the saved statements, nothing dropped again;
	// its index phase interrupted after the first batch (the primary key's
	// index built, not attached; the other two built) leaves saved just
	// the attaching, which the next copy runs.
	again := &tableJob{Table: idx.Table}
	if _, err := deferIndexes(ctx, dst, cfg, again, false); err != nil || !slices.Equal(statements(again.deferred), want) {
		t.Errorf("deferIndexes again: %v, %v; want the saved %v", err, statements(again.deferred), want)
	}
	q := newQueue(nil)
	for _, s := range q.rowsIn(again) {
		if _, err := build(ctx, dst, cfg, q, s); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := saved(), "ALTER TABLE idx ADD CONSTRAINT idx_pk PRIMARY KEY USING INDEX idx_pk"; got != want {
		t.Errorf("saved after the first batch: %s, want %s", got, want)
	}
	third := &tableJob{Table: idx.Table}
	if _, err := deferIndexes(ctx, dst, cfg, third, false); err != nil {
		t.Fatal(err)
	}
	runPhase(t, ctx, dst, cfg, third)
	if indexes() != all || saved() != "" {
		t.Errorf("after the index phase: indexes %s, saved %q; want %s, none saved", indexes(), saved(), all)
	}
	var pk bool
	if err := dst.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'idx_pk' AND contype = 'p')`).Scan(&pk); err != nil || !pk {
		t.Errorf("idx_pk is no primary key after the index phase (%v)", err)
	}
}

// statements are the deferred statements' SQL, in order.
func statements(ds []deferred) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.sql)
	}
	return out
}

// runPhase runs table j's index phase on one connection, step by step, as
// a worker takes them, and checks it ends with the table done.
func runPhase(t *testing.T, ctx context.Context, dst *pgx.Conn, cfg Config, j *tableJob) {
	t.Helper()
	q := newQueue(nil)
	ready := q.rowsIn(j)
	for len(ready) > 0 {
		s := ready[0]
		next, err := build(ctx, dst, cfg, q, s)
		if err != nil {
			t.Fatal(err)
		}
		ready = append(ready[1:], next...)
	}
	if !j.done.Load() {
		t.Errorf("%s not done after its index phase", j.QualifiedName())
	}
}
