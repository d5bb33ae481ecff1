package preflight

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/subscriber"
)

// The target's checks of ddl = apply: the role that applies runs the
// publisher's schema changes, and PostgreSQL lets only a table's owner
// (or a member of the owning role) ALTER it or index it, and only a role
// with CREATE on a schema create a table or an index in it.
const (
	checkDDLOwner  = "owner of published tables (ddl = apply)"
	checkDDLCreate = "CREATE on published schemas (ddl = apply)"
	checkDDLTypes  = "owner of published columns' types (ddl = apply)"
)

// checkDDLTarget: with ddl = apply, the role owns every published table
// on the target, and the partitions and partitioned tables of its tree
// (pg_has_role ... USAGE: a member of the owning role counts), and may
// create in each of their schemas. Tables missing on the
// target are the published tables check's.
func checkDDLTarget(ctx context.Context, conn *pgx.Conn, cfg subscriber.Config, pub published, role string, rep *Report) {
	if cfg.DDL != subscriber.DDLApply || len(pub.tables) == 0 {
		return
	}
	schemas, names := make([]string, len(pub.tables)), make([]string, len(pub.tables))
	for i, t := range pub.tables {
		schemas[i], names[i] = t.Schema, t.Name
	}
	// A partitioned table's ALTER TABLE recurses to its partitions, each
	// of which needs its owner too: the partition trees of the published
	// tables, up and down, are checked.
	rows, err := conn.Query(ctx, `WITH pub AS (
			SELECT c.oid FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) t(s, r)
			JOIN pg_catalog.pg_namespace n ON n.nspname = t.s
			JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.r
		), rel AS (
			SELECT pub.oid AS relid FROM pub
			UNION SELECT pt.relid FROM pub, pg_catalog.pg_partition_tree(pub.oid) pt
			UNION SELECT pa.relid FROM pub, pg_catalog.pg_partition_ancestors(pub.oid) pa
		)
		SELECT n.nspname::text, c.relname::text, pg_catalog.pg_get_userbyid(c.relowner)::text, r.rolsuper,
			pg_catalog.pg_has_role(c.relowner, 'USAGE'), pg_catalog.has_schema_privilege(n.oid, 'CREATE')
		FROM rel JOIN pg_catalog.pg_class c ON c.oid = rel.relid AND c.relkind IN ('r', 'p')
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_catalog.pg_roles r ON r.oid = c.relowner
		ORDER BY 1, 2`, schemas, names)
	if err != nil {
		rep.add(sideTarget, checkDDLOwner, "", broken("", "reading the published tables' owners", err))
		return
	}
	var owned, create []Problem
	var counted, lacking []string
	n := 0
	for rows.Next() {
		var schema, table, owner string
		var ownerSuper, owns, creates bool
		if err := rows.Scan(&schema, &table, &owner, &ownerSuper, &owns, &creates); err != nil {
			rows.Close()
			rep.add(sideTarget, checkDDLOwner, "", broken("", "reading the published tables' owners", err))
			return
		}
		n++
		if !owns {
			fix := "ALTER TABLE " + quoteName(schema, table) + " OWNER TO " + ident(role) + ";"
			if !ownerSuper {
				fix += " (or make " + role + " a member of its owner: GRANT " + ident(owner) + " TO " + ident(role) + ";)"
			}
			owned = append(owned, fail(quoteName(schema, table), "owned by role "+owner+": ddl = apply runs the publisher's ALTER TABLE, CREATE INDEX and the like on it, which only its owner may, and role "+role+" is not a member of "+owner, fix))
		}
		if !slices.Contains(counted, schema) {
			counted = append(counted, schema)
			if !creates {
				lacking = append(lacking, schema)
			}
		}
	}
	if err := rows.Err(); err != nil {
		rep.add(sideTarget, checkDDLOwner, "", broken("", "reading the published tables' owners", err))
		return
	}
	if n == 0 {
		return // none on the target yet: the published tables check says so
	}
	for _, s := range lacking {
		create = append(create, fail(s, "role "+role+" may not create in this schema: ddl = apply runs the publisher's CREATE TABLE and CREATE INDEX there", "GRANT CREATE ON SCHEMA "+ident(s)+" TO "+ident(role)+";"))
	}
	rep.add(sideTarget, checkDDLOwner, fmt.Sprintf("%d tables; ALTER TABLE and CREATE INDEX need their owner", n), owned...)
	rep.add(sideTarget, checkDDLCreate, "schema "+strings.Join(counted, ", ")+"; CREATE TABLE and CREATE INDEX need CREATE there", create...)
	checkDDLTypesOwned(ctx, conn, schemas, names, role, rep)
}

// checkDDLTypesOwned warns about the user-defined types (enums, domains,
// composites; as arrays too) of published columns that the role does not
// own: the publisher's ALTER TYPE of them (an enum's new label, above all)
// then stops parapply on the target. A warning: most types never change.
func checkDDLTypesOwned(ctx context.Context, conn *pgx.Conn, schemas, names []string, role string, rep *Report) {
	rows, err := conn.Query(ctx, `SELECT DISTINCT n.nspname::text, t.typname::text, pg_catalog.pg_get_userbyid(t.typowner)::text
		FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) p(s, r)
		JOIN pg_catalog.pg_namespace pn ON pn.nspname = p.s
		JOIN pg_catalog.pg_class c ON c.relnamespace = pn.oid AND c.relname = p.r
		JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		JOIN pg_catalog.pg_type at ON at.oid = a.atttypid
		JOIN pg_catalog.pg_type t ON t.oid = CASE WHEN at.typcategory = 'A' THEN at.typelem ELSE at.oid END
		JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
		WHERE t.typtype IN ('e', 'd', 'c') AND n.nspname NOT IN ('pg_catalog', 'information_schema')
		  AND NOT pg_catalog.pg_has_role(t.typowner, 'USAGE')
		ORDER BY 1, 2`, schemas, names)
	if err != nil {
		rep.add(sideTarget, checkDDLTypes, "", broken("", "reading the published columns' types", err))
		return
	}
	var problems []Problem
	for rows.Next() {
		var schema, typ, owner string
		if err := rows.Scan(&schema, &typ, &owner); err != nil {
			rows.Close()
			rep.add(sideTarget, checkDDLTypes, "", broken("", "reading the published columns' types", err))
			return
		}
		problems = append(problems, warn(quoteName(schema, typ), "owned by role "+owner+": the publisher's ALTER TYPE of it (an enum's new label) would stop parapply, since only its owner may run it",
			"ALTER TYPE "+quoteName(schema, typ)+" OWNER TO "+ident(role)+";"))
	}
	if err := rows.Err(); err != nil {
		rep.add(sideTarget, checkDDLTypes, "", broken("", "reading the published columns' types", err))
		return
	}
	rep.add(sideTarget, checkDDLTypes, "ALTER TYPE needs the type's owner", problems...)
}
