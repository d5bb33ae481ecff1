package tablesync

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

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
	if err := deferIndexes(ctx, dst, cfg, idx, true); err != nil || len(idx.deferred) != 0 || indexes() != all {
		t.Fatalf("deferIndexes of a table keeping its rows: %v, deferred %v, indexes %s; want none deferred, %s", err, idx.deferred, indexes(), all)
	}
	if err := deferIndexes(ctx, dst, cfg, idx, false); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ALTER TABLE idx ADD CONSTRAINT idx_pk PRIMARY KEY (id)",
		"CREATE INDEX idx_other ON public.idx USING btree (other)",
		"CREATE UNIQUE INDEX idx_other_code ON public.idx USING btree (other, code)",
	}
	if !slices.Equal(idx.deferred, want) {
		t.Errorf("deferred:\n%s\nwant:\n%s", strings.Join(idx.deferred, "\n"), strings.Join(want, "\n"))
	}
	if got := indexes(); got != "idx_code idx_during_excl" {
		t.Errorf("indexes left on the table: %s, want idx_code (a foreign key's) and idx_during_excl (exclusion)", got)
	}
	// An interrupted copy's: the saved statements, nothing dropped again.
	again := &tableJob{Table: idx.Table}
	if err := deferIndexes(ctx, dst, cfg, again, false); err != nil || !slices.Equal(again.deferred, want) {
		t.Errorf("deferIndexes again: %v, %v; want the saved %v", err, again.deferred, want)
	}
	if err := finish(ctx, dst, cfg, again); err != nil {
		t.Fatal(err)
	}
	var saved int
	if err := dst.QueryRow(ctx, `SELECT count(*) FROM parapply.deferred_index`).Scan(&saved); err != nil || indexes() != all || saved != 0 {
		t.Errorf("after finish: indexes %s, %d saved (%v); want %s, none saved", indexes(), saved, err, all)
	}
}
