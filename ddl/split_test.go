package ddl

import (
	"slices"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"one", "ALTER TABLE t ADD c int", []string{"ALTER TABLE t ADD c int"}},
		{"trailing semicolon", "ALTER TABLE t ADD c int;  ", []string{"ALTER TABLE t ADD c int"}},
		{"two", "ALTER TABLE t ADD a int; ALTER TABLE t ADD b int;", []string{"ALTER TABLE t ADD a int", "ALTER TABLE t ADD b int"}},
		{"semicolon in a string", "COMMENT ON TABLE t IS 'a;b'; DROP TABLE u", []string{"COMMENT ON TABLE t IS 'a;b'", "DROP TABLE u"}},
		{"doubled quote", "COMMENT ON TABLE t IS 'it''s; here'; SELECT 1", []string{"COMMENT ON TABLE t IS 'it''s; here'", "SELECT 1"}},
		{"escape string", `COMMENT ON TABLE t IS E'a\';b'; SELECT 1`, []string{`COMMENT ON TABLE t IS E'a\';b'`, "SELECT 1"}},
		{"quoted identifier", `ALTER TABLE "we;ird" ADD c int; SELECT 1`, []string{`ALTER TABLE "we;ird" ADD c int`, "SELECT 1"}},
		{"dollar quotes", "DO $$ BEGIN PERFORM 1; END $$; DO $x$ BEGIN PERFORM '$$;'; END $x$", []string{"DO $$ BEGIN PERFORM 1; END $$", "DO $x$ BEGIN PERFORM '$$;'; END $x$"}},
		{"line comment", "-- a; b\nALTER TABLE t ADD c int; -- c;\n", []string{"-- a; b\nALTER TABLE t ADD c int", "-- c;"}},
		{"block comment nested", "/* a /* b; */ c; */ DROP TABLE t; SELECT 1", []string{"/* a /* b; */ c; */ DROP TABLE t", "SELECT 1"}},
		{"begin atomic", "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END; SELECT 3",
			[]string{"CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN ATOMIC SELECT CASE WHEN true THEN 1 END; SELECT 2; END", "SELECT 3"}},
		{"positional parameter is no dollar quote", "SELECT $1; SELECT 2", []string{"SELECT $1", "SELECT 2"}},
		{"unterminated string", "COMMENT ON TABLE t IS 'a;", []string{"COMMENT ON TABLE t IS 'a;"}},
		{"empty", " ; ;", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Split(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("Split(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestStatements(t *testing.T) {
	tests := []struct {
		name    string
		sql     string
		want    []string
		wantErr string
	}{
		{"alone", "ALTER TABLE t ADD c int", []string{"ALTER TABLE t ADD c int"}, ""},
		{"row changes and transaction control dropped",
			"BEGIN; ALTER TABLE t ADD c int; UPDATE t SET c = 1; INSERT INTO t VALUES (1); SET x = 1; COMMIT",
			[]string{"ALTER TABLE t ADD c int"}, ""},
		{"comment before", "/* migration 12 */ -- up\nCREATE INDEX i ON t (c)", []string{"/* migration 12 */ -- up\nCREATE INDEX i ON t (c)"}, ""},
		{"roles and grants are not forwarded",
			"CREATE ROLE r; GRANT SELECT ON t TO r; ALTER TABLE t OWNER TO r; CREATE PUBLICATION p; DROP DATABASE d; ALTER SYSTEM SET x = 1",
			[]string{"ALTER TABLE t OWNER TO r"}, ""},
		{"do block", "DO $$ BEGIN EXECUTE 'ALTER TABLE t ADD c int'; END $$", []string{"DO $$ BEGIN EXECUTE 'ALTER TABLE t ADD c int'; END $$"}, ""},
		{"lower case", "alter table t add c int", []string{"alter table t add c int"}, ""},
		{"inside a function", "SELECT migrate()", nil, "parapply.replicate_ddl"},
		{"call", "CALL migrate()", nil, "inside a function or procedure"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Message{SQL: tt.sql, Tag: "ALTER TABLE"}.Statements()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Statements() error = %v, want one with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("Statements() = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestConcurrently(t *testing.T) {
	for s, want := range map[string]bool{
		"CREATE INDEX CONCURRENTLY i ON t (c)":              true,
		"create unique index concurrently i on t (c)":       true,
		"-- x\nDROP INDEX CONCURRENTLY i":                   true,
		"REINDEX INDEX CONCURRENTLY i":                      true,
		"REINDEX (VERBOSE) TABLE CONCURRENTLY t":            true,
		"CREATE INDEX i ON t (c)":                           false,
		"CREATE INDEX concurrently_named ON t (c)":          false,
		"ALTER TABLE t DETACH PARTITION p CONCURRENTLY":     true,
		"ALTER TABLE t DETACH PARTITION p":                  false,
		"COMMENT ON INDEX i IS 'CREATE INDEX CONCURRENTLY'": false,
	} {
		if got := Concurrently(s); got != want {
			t.Errorf("Concurrently(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestParse(t *testing.T) {
	m, err := Parse([]byte(`{"sql":"ALTER TABLE t ADD c int","search_path":["app","public"],"role":"u","tag":"ALTER TABLE","objects":[{"type":"table","identity":"app.t"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := m.SetSearchPath(), `SET LOCAL search_path TO "app", "public"`; got != want {
		t.Errorf("SetSearchPath() = %q, want %q", got, want)
	}
	if got := (Message{}).SetSearchPath(); got != "SET LOCAL search_path TO ''" {
		t.Errorf("empty path: %q", got)
	}
	for _, bad := range []string{`not json`, `{"sql":"  "}`, `{}`} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q) took it", bad)
		}
	}
	drop := Message{Tag: "DROP INDEX", Objects: []Object{{"index", "public.i"}, {"table", "public.t"}}}
	if got := drop.DroppedIndexes(); !slices.Equal(got, []string{"public.i"}) {
		t.Errorf("DroppedIndexes() = %q", got)
	}
	create := Message{Tag: "CREATE TABLE", Objects: []Object{{"table", "public.t"}, {"index", "public.t_pkey"}}}
	if got := create.CreatedTables(); !slices.Equal(got, []string{"public.t"}) {
		t.Errorf("CreatedTables() = %q", got)
	}
}

func FuzzSplit(f *testing.F) {
	for _, s := range []string{"ALTER TABLE t ADD c int; SELECT 'a;b'", "DO $$ ; $$; /* ; */", "E'\\'';", `"a""b";`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, st := range Split(s) {
			if st == "" || st != strings.TrimSpace(st) {
				t.Fatalf("Split(%q) gave %q", s, st)
			}
			if !strings.Contains(s, st) {
				t.Fatalf("Split(%q) gave %q, not part of it", s, st)
			}
		}
	})
}
