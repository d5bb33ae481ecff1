package preflight

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/citus"
	"github.com/parapply/parapply/preflight/judge"
	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/targetdb"
)

const sideTarget = "target"

func checkTarget(ctx context.Context, cfg subscriber.Config, pub published, rep *Report) {
	conn, err := connect(ctx, "target", cfg.Target.DSN, cfg.Source.AppName)
	if err != nil {
		rep.add(sideTarget, "connection", "", fail("", err.Error(), "check the target connection string (host, port, dbname, user, password) and the target's pg_hba.conf"))
		rep.unreachable(sideTarget)
		return
	}
	defer conn.Close(context.Background())
	var version, preparedMax int
	var role string
	var super, createDB, commitTS bool
	err = conn.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version_num')::int, current_user::text, r.rolsuper,
			pg_catalog.has_database_privilege(pg_catalog.current_database(), 'CREATE'),
			pg_catalog.current_setting('track_commit_timestamp')::bool, pg_catalog.current_setting('max_prepared_transactions')::int
		FROM pg_catalog.pg_roles r WHERE r.rolname = current_user`).Scan(&version, &role, &super, &createDB, &commitTS, &preparedMax)
	if err != nil {
		rep.add(sideTarget, "connection", "", broken("", "reading the target's settings", err))
		return
	}
	rep.add(sideTarget, "connection", fmt.Sprintf("PostgreSQL %d.%d as role %s", version/10000, version%10000, role), failing(judge.TargetVersion(version))...)
	checkReplicaRole(ctx, conn, role, rep)
	checkSchema(ctx, conn, role, createDB, rep)
	checkOrigins(ctx, conn, cfg, role, super, rep)
	if cfg.Source.TwoPhase {
		if f := judge.PreparedTransactions(preparedMax); f != nil {
			rep.add(sideTarget, "max_prepared_transactions", "", failing(f)...)
		} else {
			rep.add(sideTarget, "max_prepared_transactions", fmt.Sprint(preparedMax))
		}
	}
	checkCommitTimestamps(cfg, commitTS, rep)
	if !pub.reached {
		rep.skip(sideTarget, "published tables", "the publisher could not be read")
		return
	}
	checkTables(ctx, conn, cfg, pub, role, rep)
	copied := checkSchemaCopy(ctx, conn, cfg, pub, role, rep)
	checkDDLTarget(ctx, conn, cfg, pub, role, rep)
	checkCitus(ctx, conn, cfg, pub, rep)
	if cfg.Sequences != sequences.None {
		checkTargetSequences(ctx, conn, pub, role, copied, rep)
	}
}

// checkReplicaRole: parapply's sessions apply as replication does, with
// session_replication_role = replica (tried, and rolled back).
func checkReplicaRole(ctx context.Context, conn *pgx.Conn, role string, rep *Report) {
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.Exec(ctx, "SELECT pg_catalog.set_config('session_replication_role', 'replica', true)")
		_ = tx.Rollback(ctx)
	}
	var pe *pgconn.PgError
	if err != nil && !errors.As(err, &pe) {
		rep.add(sideTarget, "session_replication_role", "", broken("", "trying session_replication_role", err))
		return
	}
	if err != nil {
		rep.add(sideTarget, "session_replication_role", "", failing(judge.ReplicaRole(role, err))...)
		return
	}
	rep.add(sideTarget, "session_replication_role", "replica, as the built-in apply worker")
}

// checkSchema: parapply keeps its progress in schema parapply, which the
// role creates (CREATE on the database) or must own.
func checkSchema(ctx context.Context, conn *pgx.Conn, role string, createDB bool, rep *Report) {
	var owner *string
	var owns bool
	err := conn.QueryRow(ctx, `SELECT pg_catalog.pg_get_userbyid(n.nspowner)::text, pg_catalog.pg_has_role(n.nspowner, 'USAGE')
		FROM pg_catalog.pg_namespace n WHERE n.nspname = 'parapply'`).Scan(&owner, &owns)
	switch {
	case errors.Is(err, pgx.ErrNoRows) && createDB:
		rep.add(sideTarget, "schema parapply", "missing: created at the first start")
	case errors.Is(err, pgx.ErrNoRows):
		rep.add(sideTarget, "schema parapply", "", fail("", "schema parapply, where parapply records its progress, is missing and role "+role+" may not create it",
			"GRANT CREATE ON DATABASE "+ident(currentDB(ctx, conn))+" TO "+ident(role)+";"))
	case err != nil:
		rep.add(sideTarget, "schema parapply", "", broken("", "reading pg_namespace", err))
	case !owns:
		rep.add(sideTarget, "schema parapply", "", fail("", "schema parapply belongs to role "+*owner+"; parapply's role "+role+" must own it and its tables",
			"ALTER SCHEMA parapply OWNER TO "+ident(role)+"; and the same for each table in it (or run parapply as "+*owner+")"))
	default:
		rep.add(sideTarget, "schema parapply", "exists, owned by "+*owner)
	}
}

func currentDB(ctx context.Context, conn *pgx.Conn) string {
	var db string
	_ = conn.QueryRow(ctx, "SELECT pg_catalog.current_database()::text").Scan(&db)
	return db
}

// checkOrigins: every parapply session commits under a replication origin
// of its own, which a role other than a superuser needs granted, and each
// holds one of the target's few origin states.
func checkOrigins(ctx context.Context, conn *pgx.Conn, cfg subscriber.Config, role string, super bool, rep *Report) {
	if !super {
		var missing []string
		status := false
		for _, f := range strings.Split(targetdb.OriginFunctions, ", ") {
			// By name: the arguments differ by version (see OriginFunctions).
			var ok bool
			if err := conn.QueryRow(ctx, "SELECT coalesce(pg_catalog.has_function_privilege(pg_catalog.to_regproc($1)::oid, 'EXECUTE'), false)", f).Scan(&ok); err != nil || !ok {
				if strings.Contains(f, "pg_show_replication_origin_status") {
					status = true // only read to plan the origin states
					continue
				}
				missing = append(missing, f)
			}
		}
		grant := "GRANT EXECUTE ON FUNCTION " + targetdb.OriginFunctions + " TO " + ident(role) + ";"
		if len(missing) > 0 {
			rep.add(sideTarget, "replication origin functions", "", fail("", "role "+role+" may not use replication origins, which parapply's sessions commit under: it may not run "+strings.Join(missing, ", "), grant))
			return
		}
		if status {
			rep.add(sideTarget, "replication origin functions", "", warn("", "role "+role+" may not run pg_show_replication_origin_status(): a run cannot see which origins hold the target's origin states, nor retire its own unused ones", grant))
		}
	}
	if !rep.has(sideTarget, "replication origin functions") {
		rep.add(sideTarget, "replication origin functions", "may be run by "+role)
	}
	st, err := targetdb.ReadOriginStates(ctx, conn, cfg.Source.Slot)
	if err != nil {
		rep.add(sideTarget, "replication origin states", "", warn("", err.Error(), ""))
		return
	}
	plan, err := targetdb.PlanOrigins(st.Limit, st.Held, cfg.Source.Slot, st.Siblings, cfg.Workers, cfg.StreamWorkers, cfg.CopyWorkers)
	if err != nil {
		rep.add(sideTarget, "replication origin states", "", fail("", err.Error(), ""))
		return
	}
	detail := fmt.Sprintf("%s = %d, %d held by other origins", st.Setting, st.Limit, len(plan.Others))
	if plan.Workers < cfg.Workers || plan.Streams < cfg.StreamWorkers {
		rep.add(sideTarget, "replication origin states", detail, warn("", fmt.Sprintf("room for %d workers and %d stream sessions of the %d and %d asked: parapply applies with fewer", plan.Workers, plan.Streams, cfg.Workers, cfg.StreamWorkers),
			fmt.Sprintf("ALTER SYSTEM SET %s = %d; then restart the target", st.Setting, st.Limit+cfg.Workers+cfg.StreamWorkers-plan.Workers-plan.Streams)))
		return
	}
	rep.add(sideTarget, "replication origin states", detail)
}

// checkCommitTimestamps: conflict policies by commit time need
// track_commit_timestamp; without it rows changed by others are not told
// from parapply's own.
func checkCommitTimestamps(cfg subscriber.Config, on bool, rep *Report) {
	if !cfg.DetectConflicts || on {
		return
	}
	refusal, warning := judge.CommitTimestamps(cfg.Conflicts.NeedsCommitTimestamps(), on)
	if refusal != nil {
		rep.add(sideTarget, "track_commit_timestamp", "", failing(refusal)...)
		return
	}
	rep.add(sideTarget, "track_commit_timestamp", "", warn("", warning.What, warning.Fix))
}

// checkCitus: on a Citus coordinator, the published tables Citus
// distributes (applied through its planner, see package citus), and the
// settings Citus cannot serve (citus.Refusals). Nothing is said of a
// plain target.
func checkCitus(ctx context.Context, conn *pgx.Conn, cfg subscriber.Config, pub published, rep *Report) {
	var schemas, names []string
	for _, t := range pub.tables {
		schemas, names = append(schemas, t.Schema), append(names, t.Name)
	}
	managed, err := citus.Managed(ctx, conn, schemas, names)
	if err != nil {
		rep.add(sideTarget, "Citus tables", "", broken("", "reading the Citus metadata", err))
		return
	}
	if len(managed) == 0 {
		return
	}
	var probs []Problem
	for _, r := range citus.Refusals(cfg.DetectConflicts && cfg.DetectConflictsAsked, cfg.Source.TwoPhase) {
		probs = append(probs, fail("", r.What, r.Fix))
	}
	detail := fmt.Sprintf("a Citus coordinator, applied to through its planner: %s", strings.Join(managed, ", "))
	if cfg.DetectConflicts && !cfg.DetectConflictsAsked {
		detail += "; conflict detection off for these (detect_conflicts = auto), on for the others"
	}
	rep.add(sideTarget, "Citus tables", detail, probs...)
}
