package schemacopy

import (
	"strings"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/enum"
)

// Mode is the schema setting: where the published tables' definitions
// come from.
type Mode string

// The values of Mode.
const (
	// Target: the target has the tables (made by hand), as before.
	Target Mode = "target"
	// Copy: parapply brings the definitions of the published tables
	// the target lacks over from the publisher with pg_dump.
	Copy Mode = "copy"
)

// Modes lists schema's values, for the setting's parser and help text.
var Modes = []Mode{Target, Copy}

// Name is a schema-qualified relation name, unquoted.
type Name struct{ Schema, Name string }

// pattern quotes a name for pg_dump's -n, -t and -T: inside double quotes
// the pattern characters (*, ?, .) are taken literally.
func pattern(parts ...string) string {
	q := make([]string, len(parts))
	for i, p := range parts {
		q[i] = `"` + strings.ReplaceAll(p, `"`, `""`) + `"`
	}
	return strings.Join(q, ".")
}

// The sections of a dump, run at different times.
const (
	PreData  = "pre-data"
	PostData = "post-data"
)

// Args is pg_dump's argument list for one section (PreData or PostData) of
// the schemas holding published tables: definitions only, plain format,
// without what belongs to the publisher's roles and servers (owners,
// grants, publications, subscriptions, tablespaces, security labels), and
// without every relation of those schemas that is neither published nor a
// sequence (exclude): a view over an unpublished table would fail.
// Tables, when set, narrows the dump to those tables (-t). dbname is the
// connection string without its password (see Connection).
func Args(dbname, section string, schemas []string, exclude, tables []Name) []string {
	args := []string{"--schema-only", "--section=" + section, "--format=plain",
		"--no-owner", "--no-privileges", "--no-publications", "--no-subscriptions", "--no-tablespaces", "--no-security-labels"}
	for _, s := range schemas {
		args = append(args, "--schema="+pattern(s))
	}
	for _, t := range tables {
		args = append(args, "--table="+pattern(t.Schema, t.Name))
	}
	for _, x := range exclude {
		args = append(args, "--exclude-table="+pattern(x.Schema, x.Name))
	}
	return append(args, "--dbname="+dbname)
}

// Deferred is an index or constraint (primary key, unique, exclusion) of a
// copied table, kept in parapply.deferred_index until the copy of the
// table's rows is done: built then, from sorted rows, at a fraction of
// the cost of keeping it up to date during the copy.
type Deferred struct {
	// Table is the table's name as the copy keys it (quoted, qualified).
	Table, Name, SQL string
	// Ord is its place among the table's deferred statements.
	Ord int
}

// Plan is what a schema copy runs on the target, and when.
type Plan struct {
	// Preamble is the pre-data script's session settings.
	Preamble string
	// Now runs in one transaction, with the bookkeeping: the pre-data
	// (schemas, types, sequences, functions, tables) and, with
	// copy_data = off, everything else as well.
	Now []Entry
	// Indexes are built by the copy once each table's rows are in.
	Indexes []Deferred
	// After run once the copy is done, before the stream starts, each in
	// the transaction that deletes it from parapply's list (foreign keys,
	// triggers, rules, policies, comments on them, the rest of post-data).
	After []Entry
}

// Owners names, for each post-data entry that is an index or constraint
// of a published table, the table: by OwnerKey(schema, pg_dump's name).
type Owners map[string]Name

// OwnerKey keys Owners: the entry's schema and its name as pg_dump's
// header writes it (an index's name; "table constraint" for a
// constraint).
func OwnerKey(schema, name string) string { return schema + "\x00" + name }

// Choose makes the plan from the two sections' scripts for the tables to
// make (made): entries whose object the target has already (have, from
// TargetHas: schemas, types, domains, functions, unowned sequences, and
// comments on them) are dropped, and so are the sequences owned by
// tables not made (pub.Sequences), their OWNED BY and the column defaults
// of tables not made. With copyData, an INDEX or CONSTRAINT entry of a
// made table goes to the table's deferred indexes, and every other
// post-data entry runs after the copy; without it, everything runs now.
func Choose(pre, post Script, have map[Object]bool, pub Publisher, made []Name, copyData bool) Plan {
	p := Plan{Preamble: pre.Preamble}
	mine := map[Name]bool{}
	for _, t := range made {
		mine[t] = true
	}
	for _, e := range pre.Entries {
		if keep(e, have, pub.Sequences, mine) {
			p.Now = append(p.Now, e)
		}
	}
	ord := map[string]int{}
	for _, e := range post.Entries {
		switch {
		case !keep(e, have, pub.Sequences, mine):
		case !copyData:
			p.Now = append(p.Now, e)
		case e.Type == "INDEX" || e.Type == "CONSTRAINT":
			t, ok := pub.Owners[OwnerKey(e.Schema, e.Name)]
			if !ok {
				p.After = append(p.After, e)
				continue
			}
			table := parapply.QuoteIdent(t.Schema) + "." + parapply.QuoteIdent(t.Name)
			name := e.Name
			if e.Type == "CONSTRAINT" {
				name = strings.TrimPrefix(name, t.Name+" ")
			}
			p.Indexes = append(p.Indexes, Deferred{Table: table, Name: name, SQL: e.SQL, Ord: ord[table]})
			ord[table]++
		default:
			p.After = append(p.After, e)
		}
	}
	return p
}

// keep tells whether an entry runs on the target: it has SQL, makes (or
// comments on) nothing the target has, and is no sequence, OWNED BY or
// column default of a table not made. A sequence a made table owns always
// runs: one of its name on the target already fails the copy, naming it,
// rather than leaving the table without its default or identity.
func keep(e Entry, have map[Object]bool, seqs map[Name]Name, made map[Name]bool) bool {
	if e.SQL == "" {
		return false
	}
	switch e.Type {
	case "SEQUENCE", "SEQUENCE OWNED BY":
		if owner, ok := seqs[Name{e.Schema, e.Name}]; ok {
			return made[owner]
		}
	case "DEFAULT":
		for t := range made {
			if t.Schema == e.Schema && strings.HasPrefix(e.Name, t.Name+" ") {
				return true
			}
		}
		return false
	}
	o, ok := ObjectOf(e)
	return !ok || !have[o]
}

// ParseMode reads the schema setting, naming it and its values when s is
// none of them.
func ParseMode(s string) (Mode, error) { return enum.Parse("schema", s, Modes) }
