package preflight

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/schemacopy"
	"github.com/parapply/parapply/subscriber"
)

// The checks of schema = copy.
const (
	checkCopyTables = "published tables to copy (schema = copy)"
	checkCopyCreate = "CREATE where the copy makes them (schema = copy)"
	checkCopyDump   = "pg_dump (schema = copy)"
)

// checkSchemaCopy: with schema = copy, the target lacks every published
// table or none (a copy brings all or nothing), a pg_dump new enough for
// the publisher is there, and the role may create in each published
// schema the target has, or in the database for one it makes.
func checkSchemaCopy(ctx context.Context, conn *pgx.Conn, cfg subscriber.Config, pub published, role string, rep *Report) {
	if cfg.Schema != schemacopy.Copy || len(pub.tables) == 0 {
		return
	}
	var missing, present []string
	schemas := map[string]bool{}
	for _, t := range pub.tables {
		var found bool
		if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1) IS NOT NULL`, t.name()).Scan(&found); err != nil {
			rep.add(sideTarget, checkCopyTables, "", broken(t.name(), "reading it on the target", err))
			return
		}
		if found {
			present = append(present, t.name())
		} else {
			missing = append(missing, t.name())
			schemas[t.Schema] = true
		}
	}
	switch {
	case len(missing) == 0:
		rep.add(sideTarget, checkCopyTables, "the target has every published table: nothing to copy")
		return
	case len(present) > 0:
		rep.add(sideTarget, checkCopyTables, "", fail("", "the target has "+strings.Join(present, ", ")+" but lacks "+strings.Join(missing, ", ")+": schema = copy brings over every published table or none",
			"create those it lacks by hand (pg_dump --schema-only --table=... on the publisher, run with psql on the target), or drop those it has"))
		return
	}
	rep.add(sideTarget, checkCopyTables, fmt.Sprintf("%d tables, made from the publisher's definitions", len(missing)))
	rep.add(sideTarget, checkCopyCreate, "the role makes the tables, and the schemas the target lacks", copyCreate(ctx, conn, schemas, role)...)
	if !pub.reached || pub.version == 0 {
		rep.skip(sideTarget, checkCopyDump, "the publisher's version could not be read")
		return
	}
	if bin, err := schemacopy.Find(ctx, cfg.PGDump, pub.version/10000); err != nil {
		rep.add(sideTarget, checkCopyDump, "", fail("", err.Error(), ""))
	} else {
		rep.add(sideTarget, checkCopyDump, bin)
	}
}

// copyCreate: the role may create in each schema of the copy the target
// has, and in the database for each it lacks.
func copyCreate(ctx context.Context, conn *pgx.Conn, schemas map[string]bool, role string) []Problem {
	var probs []Problem
	for _, s := range slices.Sorted(maps.Keys(schemas)) {
		var exists, may bool
		var db string
		err := conn.QueryRow(ctx, `SELECT n.oid IS NOT NULL, CASE WHEN n.oid IS NULL THEN pg_catalog.has_database_privilege(current_database(), 'CREATE')
				ELSE pg_catalog.has_schema_privilege(n.oid, 'CREATE') END, current_database()::text
			FROM (SELECT 1) o LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = $1`, s).Scan(&exists, &may, &db)
		switch {
		case err != nil:
			probs = append(probs, broken(s, "reading the role's privileges", err))
		case !may && exists:
			probs = append(probs, fail(s, "role "+role+" may not create in this schema: schema = copy makes the published tables there", "GRANT CREATE ON SCHEMA "+ident(s)+" TO "+ident(role)+";"))
		case !may:
			probs = append(probs, fail(s, "the target lacks this schema, and role "+role+" may not create schemas in database "+db, "GRANT CREATE ON DATABASE "+ident(db)+" TO "+ident(role)+"; (or CREATE SCHEMA "+ident(s)+" AUTHORIZATION "+ident(role)+";)"))
		}
	}
	return probs
}
