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

// checkSchemaCopy: with schema = copy, where the target lacks published
// tables (the copy makes those), a pg_dump new enough for the publisher is
// there, and the role may create in each of their schemas the target has,
// or in the database for one it makes. It returns the schemas of the
// tables the copy makes.
func checkSchemaCopy(ctx context.Context, conn *pgx.Conn, cfg subscriber.Config, pub published, role string, rep *Report) map[string]bool {
	if cfg.Schema != schemacopy.Copy || len(pub.tables) == 0 {
		return nil
	}
	var missing []string
	schemas := map[string]bool{}
	for _, t := range pub.tables {
		var found bool
		if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass($1) IS NOT NULL`, t.name()).Scan(&found); err != nil {
			rep.add(sideTarget, checkCopyTables, "", broken(t.name(), "reading it on the target", err))
			return nil
		}
		if !found {
			missing = append(missing, t.name())
			schemas[t.Schema] = true
		}
	}
	if len(missing) == 0 {
		rep.add(sideTarget, checkCopyTables, "the target has every published table: nothing to copy")
		return nil
	}
	rep.add(sideTarget, checkCopyTables, fmt.Sprintf("%d tables the target lacks, made from the publisher's definitions: %s", len(missing), strings.Join(missing, ", ")))
	rep.add(sideTarget, checkCopyCreate, "the role makes the tables, and the schemas the target lacks", copyCreate(ctx, conn, schemas, role)...)
	if !pub.reached || pub.version == 0 {
		rep.skip(sideTarget, checkCopyDump, "the publisher's version could not be read")
		return schemas
	}
	if bin, err := schemacopy.Find(ctx, cfg.PGDump, pub.version/10000); err != nil {
		rep.add(sideTarget, checkCopyDump, "", fail("", err.Error(), ""))
	} else {
		rep.add(sideTarget, checkCopyDump, bin)
	}
	return schemas
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
