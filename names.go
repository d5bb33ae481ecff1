package parapply

import "strings"

// Ident quotes an identifier as PostgreSQL's quote_ident does: only where
// it must (a character other than a lower case letter, a digit or an
// underscore, a leading digit, or a key word that cannot stand unquoted),
// so that a name reads in a message, a fix's SQL or a metric label as a
// DBA writes it and as regclass prints it.
func Ident(s string) string {
	if !plainIdent(s) || quotedKeywords[s] {
		return QuoteIdent(s)
	}
	return s
}

// TableName is schema.table as PostgreSQL's regclass prints it under an
// empty search_path: each part quoted only where it must be. It is the one
// form of a table's name in parapply's metrics and messages.
func TableName(schema, name string) string { return Ident(schema) + "." + Ident(name) }

// AlterDefaultPrivileges is the statement that grants privileges (SELECT;
// SELECT, UPDATE) on the objects (TABLES, SEQUENCES) owner creates in
// schema from now on to grantee: the GRANT on the objects there now does
// not reach those created later, in a copy that runs for days or as tables
// join a publication.
func AlterDefaultPrivileges(owner, schema, privileges, objects, grantee string) string {
	return "ALTER DEFAULT PRIVILEGES FOR ROLE " + Ident(owner) + " IN SCHEMA " + Ident(schema) + " GRANT " + privileges + " ON " + objects + " TO " + Ident(grantee) + ";"
}

func plainIdent(s string) bool {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] == '_') {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// quotedKeywords are the key words quote_ident quotes: PostgreSQL's
// reserved key words, and those that may name a column or a type but not
// stand unquoted for any object (its kwlist.h, categories other than
// unreserved).
var quotedKeywords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`
	all analyse analyze and any array as asc asymmetric both case cast check collate column constraint create
	current_catalog current_date current_role current_time current_timestamp current_user default deferrable desc
	distinct do else end except false fetch for foreign from grant group having in initially intersect into lateral
	leading limit localtime localtimestamp not null offset on only or order placing primary references returning
	select session_user some symmetric system_user table then to trailing true union unique user using variadic when
	where window with
	authorization binary collation concurrently cross current_schema freeze full ilike inner is isnull join left like
	natural notnull outer overlaps right similar tablesample verbose
	between bigint bit boolean char character coalesce dec decimal exists extract float greatest grouping inout int
	integer interval json json_array json_arrayagg json_exists json_object json_objectagg json_query json_scalar
	json_serialize json_table json_value least merge_action national nchar none normalize nullif numeric out overlay
	position precision real row setof smallint substring time timestamp treat trim values varchar xmlattributes
	xmlconcat xmlelement xmlexists xmlforest xmlnamespaces xmlparse xmlpi xmlroot xmlserialize xmltable`) {
		m[w] = true
	}
	return m
}()
