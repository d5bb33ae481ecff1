package schemacopy

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestArgs(t *testing.T) {
	got := Args("host=p dbname=d", PreData, []string{"s1", `we"ird`}, []Name{{"s1", "v.*"}}, []Name{{"s1", "t"}})
	want := []string{"--schema-only", "--section=pre-data", "--format=plain", "--no-owner", "--no-privileges", "--no-publications",
		"--no-subscriptions", "--no-tablespaces", "--no-security-labels", `--schema="s1"`, `--schema="we""ird"`,
		`--table="s1"."t"`, `--exclude-table="s1"."v.*"`, "--dbname=host=p dbname=d"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Args:\n got %q\nwant %q", got, want)
	}
}

// choosePre and choosePost are pg_dump's two sections for the tables
// s1.t and s1.b of schema s1, beside s1.a (excluded: its sequence stays).
var (
	choosePre = Script{Preamble: "SET x = 0;", Entries: []Entry{
		{Name: "public", Type: "SCHEMA", SQL: "CREATE SCHEMA public;"},
		{Name: "SCHEMA public", Type: "COMMENT", SQL: "COMMENT ON SCHEMA public IS 'x';"},
		{Name: "s1", Type: "SCHEMA", SQL: "CREATE SCHEMA s1;"},
		{Name: "SCHEMA s1", Type: "COMMENT", SQL: "COMMENT ON SCHEMA s1 IS 'y';"},
		{Name: "mood", Type: "TYPE", Schema: "s1", SQL: "CREATE TYPE s1.mood AS ENUM ('a');"},
		{Name: "TYPE mood", Type: "COMMENT", Schema: "s1", SQL: "COMMENT ON TYPE s1.mood IS 'x';"},
		{Name: "Fn(integer, s1.mood)", Type: "FUNCTION", Schema: "s1", SQL: `CREATE FUNCTION s1."Fn"(x integer, y s1.mood) ...;`},
		{Name: "a_id_seq", Type: "SEQUENCE", Schema: "s1", SQL: "CREATE SEQUENCE s1.a_id_seq;"},
		{Name: "t", Type: "TABLE", Schema: "s1", SQL: "CREATE TABLE s1.t ();"},
		{Name: "empty", Type: "TABLE", Schema: "s1"},
		{Name: "b", Type: "TABLE", Schema: "s1", SQL: "CREATE TABLE s1.b ();"},
		{Name: "COLUMN b.m", Type: "COMMENT", Schema: "s1", SQL: "COMMENT ON COLUMN s1.b.m IS 'y';"},
		{Name: "b_id_seq", Type: "SEQUENCE", Schema: "s1", SQL: "ALTER TABLE s1.b ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY;"},
		{Name: "b_k_seq", Type: "SEQUENCE", Schema: "s1", SQL: "CREATE SEQUENCE s1.b_k_seq;"},
		{Name: "b_k_seq", Type: "SEQUENCE OWNED BY", Schema: "s1", SQL: "ALTER SEQUENCE s1.b_k_seq OWNED BY s1.b.k;"},
		{Name: "free", Type: "SEQUENCE", Schema: "s1", SQL: "CREATE SEQUENCE s1.free;"},
		{Name: "b k", Type: "DEFAULT", Schema: "s1", SQL: "ALTER TABLE ONLY s1.b ALTER COLUMN k SET DEFAULT nextval('s1.b_k_seq');"},
		{Name: "a id", Type: "DEFAULT", Schema: "s1", SQL: "ALTER TABLE ONLY s1.a ALTER COLUMN id SET DEFAULT nextval('s1.a_id_seq');"},
	}}
	choosePost = Script{Entries: []Entry{
		{Name: "t t_pkey", Type: "CONSTRAINT", Schema: "s1", SQL: "ALTER TABLE s1.t ADD CONSTRAINT t_pkey PRIMARY KEY (id);"},
		{Name: "t_v", Type: "INDEX", Schema: "s1", SQL: "CREATE INDEX t_v ON s1.t (v);"},
		{Name: "Odd Table k", Type: "CONSTRAINT", Schema: "s1", SQL: `ALTER TABLE s1."Odd Table" ADD CONSTRAINT k UNIQUE (v);`},
		{Name: "stray", Type: "INDEX", Schema: "s1", SQL: "CREATE INDEX stray ON s1.u (v);"},
		{Name: "t t_u_fkey", Type: "FK CONSTRAINT", Schema: "s1", SQL: "ALTER TABLE s1.t ADD CONSTRAINT t_u_fkey FOREIGN KEY (u) REFERENCES s1.u;"},
		{Name: "t trg", Type: "TRIGGER", Schema: "s1", SQL: "CREATE TRIGGER trg ...;"},
	}}
	choosePub = Publisher{
		Owners:    Owners{OwnerKey("s1", "t t_pkey"): {"s1", "t"}, OwnerKey("s1", "t_v"): {"s1", "t"}, OwnerKey("s1", "Odd Table k"): {"s1", "Odd Table"}},
		Sequences: map[Name]Name{{"s1", "a_id_seq"}: {"s1", "a"}, {"s1", "b_id_seq"}: {"s1", "b"}, {"s1", "b_k_seq"}: {"s1", "b"}},
	}
)

func TestChoose(t *testing.T) {
	pre, post := choosePre.Entries, choosePost.Entries
	// Every entry of the tables made, and the unowned sequence.
	ofTables := []Entry{pre[8], pre[10], pre[11], pre[12], pre[13], pre[14], pre[15], pre[16]}
	firstNow := append([]Entry{pre[2], pre[3], pre[4], pre[5], pre[6]}, ofTables...)
	partialNow := slices.DeleteFunc(slices.Clone(ofTables), func(e Entry) bool { return e.Name == "free" })
	onlyPublic := map[Object]bool{{Kind: KindSchema, Name: "public"}: true}
	partial := map[Object]bool{{Kind: KindSchema, Name: "public"}: true, {Kind: KindSchema, Name: "s1"}: true,
		{Kind: KindType, Schema: "s1", Name: "mood"}: true, {Kind: KindFunction, Schema: "s1", Name: "Fn(integer, s1.mood)"}: true,
		{Kind: KindRelation, Schema: "s1", Name: "a_id_seq"}: true, {Kind: KindRelation, Schema: "s1", Name: "free"}: true}
	made := []Name{{"s1", "t"}, {"s1", "b"}}
	indexes := []Deferred{{Table: `"s1"."t"`, Name: "t_pkey", SQL: post[0].SQL, Ord: 0}, {Table: `"s1"."t"`, Name: "t_v", SQL: post[1].SQL, Ord: 1},
		{Table: `"s1"."Odd Table"`, Name: "k", SQL: post[2].SQL, Ord: 0}}
	for _, tc := range []struct {
		name     string
		have     map[Object]bool
		copyData bool
		want     Plan
	}{
		{"first start, copy_data = on", onlyPublic, true, Plan{Preamble: "SET x = 0;", Now: firstNow, Indexes: indexes, After: post[3:]}},
		{"first start, copy_data = off", onlyPublic, false, Plan{Preamble: "SET x = 0;", Now: append(slices.Clone(firstNow), post...)}},
		{"the target has the schema, the type, the function and the sequences", partial, true,
			Plan{Preamble: "SET x = 0;", Now: partialNow, Indexes: indexes, After: post[3:]}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Choose(choosePre, choosePost, tc.have, choosePub, made, tc.copyData); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Choose:\n got %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

func TestObjectOf(t *testing.T) {
	for _, tc := range []struct {
		entry Entry
		want  Object
		ok    bool
	}{
		{Entry{Name: "s1", Type: "SCHEMA", Schema: "-"}, Object{Kind: KindSchema, Name: "s1"}, true},
		{Entry{Name: "SCHEMA s1", Type: "COMMENT", Schema: "-"}, Object{Kind: KindSchema, Name: "s1"}, true},
		{Entry{Name: "mood", Type: "TYPE", Schema: "s1"}, Object{Kind: KindType, Schema: "s1", Name: "mood"}, true},
		{Entry{Name: "positive", Type: "DOMAIN", Schema: "s2"}, Object{Kind: KindType, Schema: "s2", Name: "positive"}, true},
		{Entry{Name: "Fn(integer, s1.mood)", Type: "FUNCTION", Schema: "s1"}, Object{Kind: KindFunction, Schema: "s1", Name: "Fn(integer, s1.mood)"}, true},
		{Entry{Name: "FUNCTION trg()", Type: "COMMENT", Schema: "s1"}, Object{Kind: KindFunction, Schema: "s1", Name: "trg()"}, true},
		{Entry{Name: "p(integer)", Type: "PROCEDURE", Schema: "my schema"}, Object{Kind: KindFunction, Schema: "my schema", Name: "p(integer)"}, true},
		{Entry{Name: "pct(double precision ORDER BY integer)", Type: "AGGREGATE", Schema: "s1"}, Object{Kind: KindFunction, Schema: "s1", Name: "pct(double precision ORDER BY integer)"}, true},
		{Entry{Name: "free", Type: "SEQUENCE", Schema: "s1"}, Object{Kind: KindRelation, Schema: "s1", Name: "free"}, true},
		{Entry{Name: "COLUMN b.m", Type: "COMMENT", Schema: "s1"}, Object{Kind: KindRelation, Schema: "s1", Name: "b"}, true},
		{Entry{Name: "MATERIALIZED VIEW mv", Type: "COMMENT", Schema: "s1"}, Object{Kind: KindRelation, Schema: "s1", Name: "mv"}, true},
		{Entry{Name: "coll", Type: "COLLATION", Schema: "s1"}, Object{Kind: KindCollation, Schema: "s1", Name: "coll"}, true},
		{Entry{Name: "cfg", Type: "TEXT SEARCH CONFIGURATION", Schema: "s1"}, Object{Kind: KindTSConfig, Schema: "s1", Name: "cfg"}, true},
		{Entry{Name: "b_k_seq", Type: "SEQUENCE OWNED BY", Schema: "s1"}, Object{}, false},
		{Entry{Name: "b k", Type: "DEFAULT", Schema: "s1"}, Object{}, false},
		{Entry{Name: "INDEX b_a", Type: "COMMENT", Schema: "s1"}, Object{}, false},
		{Entry{Name: "b t", Type: "TRIGGER", Schema: "s1"}, Object{}, false},
	} {
		if got, ok := ObjectOf(tc.entry); got != tc.want || ok != tc.ok {
			t.Errorf("ObjectOf(%+v) = %+v, %v; want %+v, %v", tc.entry, got, ok, tc.want, tc.ok)
		}
	}
	got := Objects(Script{Entries: []Entry{{Name: "s1", Type: "SCHEMA"}, {Name: "SCHEMA s1", Type: "COMMENT"}, {Name: "b t", Type: "TRIGGER"}}})
	if want := []Object{{Kind: KindSchema, Name: "s1"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("Objects = %+v; want %+v (once each, asked objects only)", got, want)
	}
}

func TestConnection(t *testing.T) {
	for _, tc := range []struct {
		name, dsn, dbname string
		env               []string
	}{
		{"keyword/value", "host=p port=5433 user=repl password=s3cret dbname=d", "host=p port=5433 user=repl dbname=d", []string{"PGPASSWORD=s3cret"}},
		{"quoted, with spaces and escapes", `host=p password = 'it\'s a \\ x' dbname='my db'`, `host=p dbname='my db'`, []string{`PGPASSWORD=it's a \ x`}},
		{"no password", "host=p dbname=d sslmode=disable", "host=p dbname=d sslmode=disable", nil},
		{"URI", "postgres://repl:s3cret@p:5433/d?sslmode=disable", "postgres://repl@p:5433/d?sslmode=disable", []string{"PGPASSWORD=s3cret"}},
		{"URI, password parameter", "postgresql://repl@p/d?password=s3cret&sslmode=disable", "postgresql://repl@p/d?sslmode=disable", []string{"PGPASSWORD=s3cret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PGPASSFILE", "/nonexistent")
			dbname, env, err := Connection(tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			if dbname != tc.dbname || !reflect.DeepEqual(env, tc.env) {
				t.Fatalf("Connection(%q) = %q, %q; want %q, %q", tc.dsn, dbname, env, tc.dbname, tc.env)
			}
			if args := Args(dbname, PreData, nil, nil, nil); strings.Contains(strings.Join(args, " "), "s3cret") {
				t.Fatalf("pg_dump's arguments hold the password: %q", args)
			}
		})
	}
	if _, _, err := Connection("host=p password='open"); err == nil {
		t.Error("an unterminated quoted value was read without an error")
	}
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want int
		err  bool
	}{
		{"pg_dump (PostgreSQL) 18.6 (Debian 18.6-3)\n", 18, false},
		{"pg_dump (PostgreSQL) 9.6.24", 9, false},
		{"pg_dump (PostgreSQL) 19devel", 19, false},
		{"psql (PostgreSQL) 18.1", 0, true},
		{"", 0, true},
	} {
		got, err := ParseVersion(tc.out)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("ParseVersion(%q) = %d, %v; want %d, error %v", tc.out, got, err, tc.want, tc.err)
		}
	}
}

func TestCandidatesAndPick(t *testing.T) {
	got := Candidates("/usr/bin/pg_dump", []string{"/usr/lib/postgresql/15/bin/pg_dump", "/usr/lib/postgresql/18/bin/pg_dump", "/usr/lib/postgresql/9.6/bin/pg_dump"})
	want := []string{"/usr/bin/pg_dump", "/usr/lib/postgresql/18/bin/pg_dump", "/usr/lib/postgresql/15/bin/pg_dump", "/usr/lib/postgresql/9.6/bin/pg_dump"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Candidates:\n got %q\nwant %q", got, want)
	}
	tried := []Found{{Path: "/usr/bin/pg_dump", Version: 15}, {Path: "/broken", Err: errors.New("exec format error")}, {Path: "/18", Version: 18}, {Path: "/19", Version: 19}}
	for _, tc := range []struct {
		need int
		want string
	}{{15, "/usr/bin/pg_dump"}, {16, "/18"}, {18, "/18"}, {19, "/19"}, {20, ""}} {
		if got, ok := Pick(tried, tc.need); got != tc.want || ok != (tc.want != "") {
			t.Errorf("Pick(need %d) = %q, %v; want %q", tc.need, got, ok, tc.want)
		}
	}
}

func TestMissing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		tried []Found
		set   bool
		want  string
	}{
		{"none", nil, false, "schema = copy needs pg_dump of version 18 or newer (the publisher's), and none on PATH or in /usr/lib/postgresql/*/bin: install postgresql-client-18 or set pg_dump = /path/to/pg_dump of version 18 or newer"},
		{"too old", []Found{{Path: "/usr/bin/pg_dump", Version: 15}}, false, "and found /usr/bin/pg_dump (version 15): install postgresql-client-18"},
		{"setting", []Found{{Path: "/opt/pg_dump", Err: errors.New("no such file")}}, true, "and pg_dump = /opt/pg_dump (no such file): install"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Missing(tc.tried, 18, tc.set).Error(); !strings.Contains(got, tc.want) {
				t.Fatalf("Missing: %s\nwant it to hold %s", got, tc.want)
			}
		})
	}
}
