// Package schemacopy brings the definitions of published tables from the
// publisher to the target (schema = copy): it finds a pg_dump new enough
// for the publisher, builds its arguments, splits its plain output into
// entries and chooses what runs before the initial copy (pre-data), what
// the copy builds after a table's rows are in (its indexes and
// constraints, through parapply.deferred_index) and what runs after the
// copy (foreign keys, triggers, rules, policies). Everything here but the
// running of pg_dump (dump.go) is pure.
package schemacopy

import (
	"regexp"
	"strings"
)

// Entry is one object of a pg_dump plain-format script, as pg_dump's
// "-- Name: X; Type: T; Schema: S; Owner: O" comment names it, with the
// SQL that follows the comment.
type Entry struct {
	Name, Type, Schema, Owner string
	SQL                       string
}

// Script is a pg_dump plain-format script split: the session settings
// before the first entry (Preamble), then the entries in pg_dump's order,
// which is one that meets every dependency.
type Script struct {
	Preamble string
	Entries  []Entry
}

// header matches pg_dump's comment line that opens an entry; the name is
// greedy so that a name holding "; Type: " still parses (types never do).
var header = regexp.MustCompile(`^-- (?:Data for )?Name: (.*); Type: (.*?); Schema: (.*?); Owner: (.*?)(?:; Tablespace: .*)?$`)

// metaCommand tells psql's meta-commands pg_dump writes (\restrict and
// \unrestrict since 15.14, 16.10, 17.6 and 18, \connect): not SQL, the
// server refuses them.
func metaCommand(line string) bool {
	for _, m := range []string{`\restrict`, `\unrestrict`, `\connect`} {
		if line == m || strings.HasPrefix(line, m+" ") {
			return true
		}
	}
	return false
}

// Split splits a pg_dump plain-format script into its entries. An entry
// starts at a "--" line directly followed by its header line; the comment
// lines are not part of its SQL, and neither are psql meta-commands.
func Split(dump string) Script {
	var s Script
	lines := strings.Split(strings.ReplaceAll(dump, "\r\n", "\n"), "\n")
	var body []string
	var cur *Entry
	flush := func() {
		text := strings.TrimSpace(strings.Join(body, "\n"))
		if cur == nil {
			s.Preamble = text
		} else {
			cur.SQL = text
			s.Entries = append(s.Entries, *cur)
		}
		body = body[:0]
	}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if metaCommand(line) {
			continue
		}
		m := header.FindStringSubmatch(line)
		if m == nil || len(body) == 0 || body[len(body)-1] != "--" {
			body = append(body, line)
			continue
		}
		body = body[:len(body)-1] // the "--" that opens the comment
		flush()
		cur = &Entry{Name: m[1], Type: m[2], Schema: m[3], Owner: m[4]}
		if i+1 < len(lines) && lines[i+1] == "--" {
			i++ // the "--" that closes it
		}
	}
	flush()
	return s
}

// setLine matches a preamble's SET of a server parameter.
var setLine = regexp.MustCompile(`(?i)^SET\s+([a-z_][a-z0-9_.]*)\s*(?:=|\s+TO\s)`)

// SessionSettings are the preamble's statements a target whose
// parameters are known (lower-case names, from pg_settings) takes: a
// newer pg_dump than the target sets parameters the target lacks
// (transaction_timeout, from PostgreSQL 17, on a 15 or 16 target), which
// are left out; every other statement is kept, in order.
func SessionSettings(preamble string, known map[string]bool) []string {
	var out []string
	for _, line := range strings.Split(preamble, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "--") {
			continue
		}
		if m := setLine.FindStringSubmatch(line); len(m) > 1 && !known[strings.ToLower(m[1])] {
			continue
		}
		out = append(out, line)
	}
	return out
}
