package schemacopy

import (
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		name, dump string
		want       Script
	}{
		{name: "empty", dump: "", want: Script{}},
		{name: "preamble only", dump: "--\n-- PostgreSQL database dump\n--\n\nSET statement_timeout = 0;\n",
			want: Script{Preamble: "--\n-- PostgreSQL database dump\n--\n\nSET statement_timeout = 0;"}},
		{name: "entries and meta-commands", dump: `--
-- PostgreSQL database dump
--

\restrict Ab12Cd

SET statement_timeout = 0;
SELECT pg_catalog.set_config('search_path', '', false);

--
-- Name: s1; Type: SCHEMA; Schema: -; Owner: -
--

CREATE SCHEMA s1;


--
-- Name: mood; Type: TYPE; Schema: s1; Owner: -
--

CREATE TYPE s1.mood AS ENUM (
    'sad',
    'ok'
);


--
-- Name: t t_pkey; Type: CONSTRAINT; Schema: s1; Owner: -
--

ALTER TABLE ONLY s1.t
    ADD CONSTRAINT t_pkey PRIMARY KEY (id);


--
-- PostgreSQL database dump complete
--

\unrestrict Ab12Cd
`, want: Script{Preamble: "--\n-- PostgreSQL database dump\n--\n\n\nSET statement_timeout = 0;\nSELECT pg_catalog.set_config('search_path', '', false);",
			Entries: []Entry{
				{Name: "s1", Type: "SCHEMA", Schema: "-", Owner: "-", SQL: "CREATE SCHEMA s1;"},
				{Name: "mood", Type: "TYPE", Schema: "s1", Owner: "-", SQL: "CREATE TYPE s1.mood AS ENUM (\n    'sad',\n    'ok'\n);"},
				{Name: "t t_pkey", Type: "CONSTRAINT", Schema: "s1", Owner: "-", SQL: "ALTER TABLE ONLY s1.t\n    ADD CONSTRAINT t_pkey PRIMARY KEY (id);\n\n\n--\n-- PostgreSQL database dump complete\n--"},
			}}},
		{name: "tablespace and odd names", dump: "--\n-- Name: a; Type: b; Type: TABLE; Schema: s; Owner: o; Tablespace: \n--\n\nCREATE TABLE s.\"a; Type: b\" ();\n",
			want: Script{Entries: []Entry{{Name: "a; Type: b", Type: "TABLE", Schema: "s", Owner: "o", SQL: "CREATE TABLE s.\"a; Type: b\" ();"}}}},
		{name: "a header line without its opening dashes is SQL", dump: "-- Name: x; Type: TABLE; Schema: s; Owner: o\nSELECT 1;\n",
			want: Script{Preamble: "-- Name: x; Type: TABLE; Schema: s; Owner: o\nSELECT 1;"}},
		{name: "a meta-command lookalike inside SQL stays", dump: "--\n-- Name: f; Type: FUNCTION; Schema: s; Owner: -\n--\n\nCREATE FUNCTION s.f() RETURNS text AS $$\n\\restricted\n$$;\n",
			want: Script{Entries: []Entry{{Name: "f", Type: "FUNCTION", Schema: "s", Owner: "-", SQL: "CREATE FUNCTION s.f() RETURNS text AS $$\n\\restricted\n$$;"}}}},
		{name: "CRLF", dump: "--\r\n-- Name: s1; Type: SCHEMA; Schema: -; Owner: -\r\n--\r\n\r\nCREATE SCHEMA s1;\r\n",
			want: Script{Entries: []Entry{{Name: "s1", Type: "SCHEMA", Schema: "-", Owner: "-", SQL: "CREATE SCHEMA s1;"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Split(tc.dump); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("Split:\n got %#v\nwant %#v", got, tc.want)
			}
		})
	}
}

// FuzzSplit: Split never panics, keeps every line that is neither a
// comment of an entry's header nor a meta-command, and finds as many
// entries as the script has headers opened by "--".
func FuzzSplit(f *testing.F) {
	f.Add("--\n-- Name: s1; Type: SCHEMA; Schema: -; Owner: -\n--\n\nCREATE SCHEMA s1;\n")
	f.Add("\\restrict x\n--\n-- Name: t; Type: TABLE; Schema: s; Owner: -\n--\nCREATE TABLE s.t ();\n\\unrestrict x\n")
	f.Add("--\n--\n-- Name: ; Type: ; Schema: ; Owner: \n")
	f.Fuzz(func(t *testing.T, dump string) {
		s := Split(dump)
		var sql strings.Builder
		sql.WriteString(s.Preamble)
		for _, e := range s.Entries {
			if strings.Contains(e.SQL, "\n\\restrict ") || strings.HasPrefix(e.SQL, "\\restrict ") {
				t.Fatalf("entry %q keeps a meta-command: %q", e.Name, e.SQL)
			}
			sql.WriteString(e.SQL)
		}
		for _, line := range strings.Split(strings.ReplaceAll(dump, "\r\n", "\n"), "\n") {
			l := strings.TrimSpace(line)
			if l == "" || l == "--" || metaCommand(line) || header.MatchString(line) {
				continue
			}
			if !strings.Contains(sql.String(), l) {
				t.Fatalf("line %q lost", line)
			}
		}
	})
}

func TestSessionSettings(t *testing.T) {
	preamble := "SET statement_timeout = 0;\nSET transaction_timeout = 0;\nSET client_encoding = 'UTF8';\n-- a comment\n\nSELECT pg_catalog.set_config('search_path', '', false);\nSET check_function_bodies = false;\nset Row_Security TO off;"
	for _, tc := range []struct {
		name  string
		known []string
		want  []string
	}{
		{"a target with every parameter", []string{"statement_timeout", "transaction_timeout", "client_encoding", "check_function_bodies", "row_security"},
			[]string{"SET statement_timeout = 0;", "SET transaction_timeout = 0;", "SET client_encoding = 'UTF8';", "SELECT pg_catalog.set_config('search_path', '', false);", "SET check_function_bodies = false;", "set Row_Security TO off;"}},
		{"a 15 target: no transaction_timeout", []string{"statement_timeout", "client_encoding", "check_function_bodies", "row_security"},
			[]string{"SET statement_timeout = 0;", "SET client_encoding = 'UTF8';", "SELECT pg_catalog.set_config('search_path', '', false);", "SET check_function_bodies = false;", "set Row_Security TO off;"}},
		{"nothing known: only what is no SET", nil,
			[]string{"SELECT pg_catalog.set_config('search_path', '', false);"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			known := map[string]bool{}
			for _, k := range tc.known {
				known[k] = true
			}
			if got := SessionSettings(preamble, known); !slices.Equal(got, tc.want) {
				t.Errorf("SessionSettings = %q, want %q", got, tc.want)
			}
		})
	}
}
