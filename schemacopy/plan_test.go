package schemacopy

import (
	"errors"
	"reflect"
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

func TestChoose(t *testing.T) {
	pre := Script{Preamble: "SET x = 0;", Entries: []Entry{
		{Name: "public", Type: "SCHEMA", SQL: "CREATE SCHEMA public;"},
		{Name: "SCHEMA public", Type: "COMMENT", SQL: "COMMENT ON SCHEMA public IS 'x';"},
		{Name: "s1", Type: "SCHEMA", SQL: "CREATE SCHEMA s1;"},
		{Name: "SCHEMA s1", Type: "COMMENT", SQL: "COMMENT ON SCHEMA s1 IS 'y';"},
		{Name: "t", Type: "TABLE", Schema: "s1", SQL: "CREATE TABLE s1.t ();"},
		{Name: "empty", Type: "TABLE", Schema: "s1"},
	}}
	post := Script{Entries: []Entry{
		{Name: "t t_pkey", Type: "CONSTRAINT", Schema: "s1", SQL: "ALTER TABLE s1.t ADD CONSTRAINT t_pkey PRIMARY KEY (id);"},
		{Name: "t_v", Type: "INDEX", Schema: "s1", SQL: "CREATE INDEX t_v ON s1.t (v);"},
		{Name: "Odd Table k", Type: "CONSTRAINT", Schema: "s1", SQL: `ALTER TABLE s1."Odd Table" ADD CONSTRAINT k UNIQUE (v);`},
		{Name: "stray", Type: "INDEX", Schema: "s1", SQL: "CREATE INDEX stray ON s1.u (v);"},
		{Name: "t t_u_fkey", Type: "FK CONSTRAINT", Schema: "s1", SQL: "ALTER TABLE s1.t ADD CONSTRAINT t_u_fkey FOREIGN KEY (u) REFERENCES s1.u;"},
		{Name: "t trg", Type: "TRIGGER", Schema: "s1", SQL: "CREATE TRIGGER trg ...;"},
	}}
	owners := Owners{
		OwnerKey("s1", "t t_pkey"): {"s1", "t"}, OwnerKey("s1", "t_v"): {"s1", "t"}, OwnerKey("s1", "Odd Table k"): {"s1", "Odd Table"},
	}
	has := func(s string) bool { return s == "public" }
	now := []Entry{pre.Entries[2], pre.Entries[3], pre.Entries[4]}
	for _, tc := range []struct {
		name     string
		copyData bool
		want     Plan
	}{
		{"copy_data = on", true, Plan{Preamble: "SET x = 0;", Now: now,
			Indexes: []Deferred{{Table: `"s1"."t"`, Name: "t_pkey", SQL: post.Entries[0].SQL, Ord: 0}, {Table: `"s1"."t"`, Name: "t_v", SQL: post.Entries[1].SQL, Ord: 1},
				{Table: `"s1"."Odd Table"`, Name: "k", SQL: post.Entries[2].SQL, Ord: 0}},
			After: post.Entries[3:]}},
		{"copy_data = off", false, Plan{Preamble: "SET x = 0;", Now: append(now, post.Entries...)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Choose(pre, post, has, owners, tc.copyData); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Choose:\n got %#v\nwant %#v", got, tc.want)
			}
		})
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
