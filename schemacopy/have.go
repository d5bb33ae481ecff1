package schemacopy

import "strings"

// Object is a named object a dump entry makes, as the target is asked
// whether it has it already: by kind and, within its schema, name (for a
// function, its signature as pg_dump names it: "name(argument types)",
// the types as format_type writes them with an empty search_path).
type Object struct {
	Kind, Schema, Name string
}

// The kinds of Object, one a catalog the target is asked in.
const (
	KindSchema    = "schema"
	KindRelation  = "relation"
	KindType      = "type"
	KindFunction  = "function"
	KindCollation = "collation"
	KindTSConfig  = "text search configuration"
	KindTSDict    = "text search dictionary"
)

// kindOf maps pg_dump's entry types (and the object words of its COMMENT
// entries' names) to the catalog asked.
var kindOf = map[string]string{
	"SCHEMA": KindSchema,
	"TABLE":  KindRelation, "SEQUENCE": KindRelation, "VIEW": KindRelation, "MATERIALIZED VIEW": KindRelation, "FOREIGN TABLE": KindRelation,
	"TYPE": KindType, "DOMAIN": KindType,
	"FUNCTION": KindFunction, "PROCEDURE": KindFunction, "AGGREGATE": KindFunction,
	"COLLATION":                 KindCollation,
	"TEXT SEARCH CONFIGURATION": KindTSConfig,
	"TEXT SEARCH DICTIONARY":    KindTSDict,
}

// commentWords are the object words a COMMENT entry's name starts with,
// longest first so that "MATERIALIZED VIEW" is not read as "VIEW".
var commentWords = []string{"TEXT SEARCH CONFIGURATION", "TEXT SEARCH DICTIONARY", "MATERIALIZED VIEW", "FOREIGN TABLE",
	"PROCEDURE", "AGGREGATE", "FUNCTION", "COLLATION", "SEQUENCE", "SCHEMA", "DOMAIN", "COLUMN", "TABLE", "TYPE", "VIEW"}

// ObjectOf is the object an entry makes, or comments on (a column's
// comment is on its table), and whether it is one the target is asked
// about; entries of other types always run.
func ObjectOf(e Entry) (Object, bool) {
	typ, name := e.Type, e.Name
	if typ == "COMMENT" {
		typ = ""
		for _, w := range commentWords {
			if rest, ok := strings.CutPrefix(e.Name, w+" "); ok {
				typ, name = w, rest
				break
			}
		}
		if typ == "COLUMN" {
			i := strings.LastIndexByte(name, '.')
			if i < 0 {
				return Object{}, false
			}
			typ, name = "TABLE", name[:i]
		}
	}
	kind, ok := kindOf[typ]
	switch {
	case !ok:
		return Object{}, false
	case kind == KindSchema:
		return Object{Kind: kind, Name: name}, true
	}
	return Object{Kind: kind, Schema: e.Schema, Name: name}, true
}

// Objects lists, once each, the objects of the scripts' entries the
// target is asked about.
func Objects(scripts ...Script) []Object {
	seen := map[Object]bool{}
	var out []Object
	for _, s := range scripts {
		for _, e := range s.Entries {
			if o, ok := ObjectOf(e); ok && !seen[o] {
				seen[o] = true
				out = append(out, o)
			}
		}
	}
	return out
}

// hasQuery answers, for each object ($1 kinds, $2 schemas, $3 names), in
// order, whether the target has it: one round trip for the whole dump.
// It runs with the empty search_path pg_dump names argument types under
// (every type but pg_catalog's qualified), and reads catalogs alone: no
// name is parsed, so none fails it.
const hasQuery = `SELECT coalesce(pg_catalog.array_agg(CASE o.k
	WHEN '` + KindSchema + `' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = o.n)
	WHEN '` + KindRelation + `' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = o.s AND c.relname = o.n)
	WHEN '` + KindType + `' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_type t JOIN pg_catalog.pg_namespace s ON s.oid = t.typnamespace WHERE s.nspname = o.s AND t.typname = o.n)
	WHEN '` + KindFunction + `' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace s ON s.oid = p.pronamespace
		WHERE s.nspname = o.s AND p.proname::text || '(' || pg_catalog.oidvectortypes(p.proargtypes) || ')' = o.n)
	WHEN '` + KindCollation + `' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_collation c JOIN pg_catalog.pg_namespace s ON s.oid = c.collnamespace WHERE s.nspname = o.s AND c.collname = o.n)
	WHEN '` + KindTSConfig + `' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_ts_config c JOIN pg_catalog.pg_namespace s ON s.oid = c.cfgnamespace WHERE s.nspname = o.s AND c.cfgname = o.n)
	WHEN '` + KindTSDict + `' THEN EXISTS (SELECT 1 FROM pg_catalog.pg_ts_dict d JOIN pg_catalog.pg_namespace s ON s.oid = d.dictnamespace WHERE s.nspname = o.s AND d.dictname = o.n)
	END ORDER BY o.i), '{}')
	FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[]), pg_catalog.unnest($3::text[])) WITH ORDINALITY o(k, s, n, i)`
