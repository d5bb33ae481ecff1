package ddl

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
)

// readFunction is the capture's function a run's role calls to read it
// (parapply check, parapply ddl status): which publications it follows.
const readFunction = "parapply.ddl_followed()"

// Grants are the statements that let role (quoted as an identifier),
// parapply's replication role on the publisher, read the capture: what
// parapply check and parapply ddl status read of it. The capture itself
// (event triggers, messages in the WAL) needs nothing of the role.
func Grants(role string) []string {
	r := role
	return []string{
		"GRANT USAGE ON SCHEMA parapply TO " + r + ";",
		"GRANT EXECUTE ON FUNCTION " + readFunction + " TO " + r + ";",
	}
}

// Grant runs Grants for each role, in one transaction, on the publisher
// conn is connected to (as the capture's installer). Roles that do not
// exist are refused by name, before anything is granted.
func Grant(ctx context.Context, conn *pgx.Conn, roles []string) error {
	if len(roles) == 0 {
		return nil
	}
	var missing []string
	if err := conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.array_agg(r), '{}') FROM pg_catalog.unnest($1::text[]) r
		WHERE r NOT IN (SELECT rolname FROM pg_catalog.pg_roles)`, roles).Scan(&missing); err != nil {
		return fmt.Errorf("reading the publisher's roles: %w", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("role %s does not exist on the publisher: --grant-to names the role parapply connects to the publisher as (CREATE ROLE ... REPLICATION first, see docs/operations.md)", strings.Join(missing, ", "))
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	for _, role := range roles {
		for _, s := range Grants(parapply.QuoteIdent(role)) {
			if _, err := tx.Exec(ctx, s); err != nil {
				return fmt.Errorf("granting role %s the reading of the DDL capture: %w (the statement: %s)", role, err, s)
			}
		}
	}
	return tx.Commit(ctx)
}

// Ungranted names the roles that look like parapply's replication role
// (REPLICATION, not superuser) and may not read the capture, quoted as
// quote_ident does: the roles install, without --grant-to, prints Grants
// for.
func Ungranted(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	var roles []string
	err := conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.array_agg(pg_catalog.quote_ident(r.rolname) ORDER BY r.rolname), '{}')
		FROM pg_catalog.pg_roles r, pg_catalog.pg_namespace n
		WHERE n.nspname = 'parapply' AND r.rolreplication AND NOT r.rolsuper AND r.rolname <> current_user
		  AND NOT (pg_catalog.has_schema_privilege(r.oid, n.oid, 'USAGE')
		           AND pg_catalog.has_function_privilege(r.oid, $1::pg_catalog.regprocedure, 'EXECUTE'))`, readFunction).Scan(&roles)
	if err != nil {
		return nil, fmt.Errorf("reading the publisher's replication roles: %w", err)
	}
	return roles, nil
}
