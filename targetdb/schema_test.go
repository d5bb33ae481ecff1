package targetdb

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/internal/pgtest"
)

// server starts one PostgreSQL server for a test and returns the test's
// bound and a function that makes a fresh database on it and connects to
// it.
func server(t *testing.T, name string) (context.Context, func(t *testing.T, db string) (*pgx.Conn, string)) {
	t.Helper()
	ctx, srv := pgtest.ForTest(t, name, 5*time.Minute)
	admin := pgtest.Connect(ctx, t, srv.DSN("postgres"))
	return ctx, func(t *testing.T, db string) (*pgx.Conn, string) {
		t.Helper()
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
			t.Fatal(err)
		}
		return pgtest.Connect(ctx, t, srv.DSN(db)), srv.DSN(db)
	}
}

func exec(ctx context.Context, t *testing.T, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// catalogSQL describes everything in schema parapply that a migration
// makes: relations and their comments, columns (by name: an upgraded
// table has its added columns last), constraints, indexes, functions.
const catalogSQL = `SELECT 'relation ' || c.relname || ' ' || c.relkind::text || ' ' || coalesce(obj_description(c.oid, 'pg_class'), '-')
	FROM pg_class c WHERE c.relnamespace = 'parapply'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'S')
UNION ALL
SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
		|| coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '') || CASE WHEN a.attidentity <> '' THEN ' identity ' || a.attidentity::text ELSE '' END
	FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
	WHERE c.relnamespace = 'parapply'::regnamespace AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
	FROM pg_constraint WHERE connamespace = 'parapply'::regnamespace
UNION ALL
SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = 'parapply'::regnamespace
UNION ALL
SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ') ' || pg_get_function_result(p.oid) || ' ' || p.prosecdef || ' ' || md5(p.prosrc)
	FROM pg_proc p WHERE p.pronamespace = 'parapply'::regnamespace
ORDER BY 1`

// catalog returns catalogSQL's lines.
func catalog(ctx context.Context, t *testing.T, c *pgx.Conn) []string {
	t.Helper()
	rows, err := c.Query(ctx, catalogSQL)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// diffLines names the lines only one of got and want has.
func diffLines(got, want []string) string {
	in := func(s []string) map[string]bool {
		m := map[string]bool{}
		for _, l := range s {
			m[l] = true
		}
		return m
	}
	g, w := in(got), in(want)
	var b strings.Builder
	for _, l := range want {
		if !g[l] {
			fmt.Fprintf(&b, "\n\tmissing: %s", l)
		}
	}
	for _, l := range got {
		if !w[l] {
			fmt.Fprintf(&b, "\n\textra:   %s", l)
		}
	}
	return b.String()
}

// tableColumns returns, for each table of schema parapply but
// schema_version, its columns in order.
func tableColumns(ctx context.Context, t *testing.T, c *pgx.Conn) map[string]string {
	t.Helper()
	rows, err := c.Query(ctx, `SELECT c.relname, string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum)
		FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = 'parapply') AND c.relkind = 'r' AND c.relname <> 'schema_version' GROUP BY c.relname`)
	if err != nil {
		t.Fatal(err)
	}
	cols := map[string]string{}
	for rows.Next() {
		var rel, list string
		if err := rows.Scan(&rel, &list); err != nil {
			t.Fatal(err)
		}
		cols[rel] = list
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return cols
}

// tableRows returns each table's rows as text over the columns cols names
// for it, in order: the same columns before and after a migration.
func tableRows(ctx context.Context, t *testing.T, c *pgx.Conn, cols map[string]string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for rel, list := range cols {
		var s string
		q := fmt.Sprintf(`SELECT coalesce(string_agg(r::text, ' | ' ORDER BY r::text), '') FROM (SELECT %s FROM parapply.%s) AS r`, list, rel)
		if err := c.QueryRow(ctx, q).Scan(&s); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		out[rel] = s
	}
	return out
}

// TestMigrateUpgrades: a target with the parapply schema any earlier
// release left (each shape in oldShapes, with rows in every table) is
// brought by Migrate to the very catalog a fresh Migrate makes, every row
// kept; migrating again changes nothing, so much so that a role with no
// privilege to change the schema can run it.
func TestMigrateUpgrades(t *testing.T) {
	ctx, newDB := server(t, "target-migrate")
	fresh, want := freshCatalog(ctx, t, newDB)
	exec(ctx, t, fresh, `CREATE ROLE reader LOGIN`)
	// Every table with rows per slot is one that parapply drop empties
	// of the slot's rows, but the conflicts log (kept for audit) and
	// deferred_index (drop refuses while it has the slot's rows).
	var perSlot []string
	rows, err := fresh.Query(ctx, `SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'slot_name'
		WHERE c.relnamespace = 'parapply'::regnamespace AND c.relkind = 'r' AND c.relname NOT IN ('conflicts', 'deferred_index') ORDER BY 1`)
	if err == nil {
		perSlot, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(SlotTables)); !slices.Equal(got, perSlot) {
		t.Errorf("SlotTables = %v, but the tables with rows per slot are %v", got, perSlot)
	}

	for i, shape := range oldShapes {
		t.Run(shape.name, func(t *testing.T) {
			db := fmt.Sprintf("shape%d", i)
			conn, dsn := newDB(t, db)
			cols, before := build(ctx, t, conn, shape.steps)
			if err := Migrate(ctx, conn); err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			checkMigrated(ctx, t, conn, "the upgrade", want, cols, before)
			migrateAgain(ctx, t, conn, strings.Replace(dsn, "user=postgres", "user=reader", 1), want, cols, before)
		})
	}
}

// migrateAgain: Migrate on a schema at this version, as a role that may
// only read the version (no CREATE, owning nothing), succeeds and leaves
// the catalog and the recorded versions as they were.
func migrateAgain(ctx context.Context, t *testing.T, conn *pgx.Conn, readerDSN string, want []string, cols, before map[string]string) {
	t.Helper()
	exec(ctx, t, conn, `GRANT USAGE ON SCHEMA parapply TO reader; GRANT SELECT ON parapply.schema_version TO reader`)
	reader := pgtest.Connect(ctx, t, readerDSN)
	if err := Migrate(ctx, reader); err != nil {
		t.Fatalf("Migrate again, as a role that cannot change the schema: %v", err)
	}
	if err := Migrate(ctx, conn); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	exec(ctx, t, conn, `REVOKE ALL ON parapply.schema_version FROM reader; REVOKE ALL ON SCHEMA parapply FROM reader`)
	checkMigrated(ctx, t, conn, "migrating again", want, cols, before)
}

// freshCatalog migrates a new, empty database and returns it and its
// catalog: what every migrated target must look like.
func freshCatalog(ctx context.Context, t *testing.T, newDB func(*testing.T, string) (*pgx.Conn, string)) (*pgx.Conn, []string) {
	t.Helper()
	fresh, _ := newDB(t, "fresh")
	if err := Migrate(ctx, fresh); err != nil {
		t.Fatalf("Migrate on an empty target: %v", err)
	}
	want := catalog(ctx, t, fresh)
	if len(want) < 50 {
		t.Fatalf("a fresh migration made only %d catalog entries: %v", len(want), want)
	}
	return fresh, want
}

// checkMigrated: after what, conn's schema is want, its tables hold the
// rows before (over the columns cols they had), and this release's
// version is recorded once.
func checkMigrated(ctx context.Context, t *testing.T, conn *pgx.Conn, what string, want []string, cols, before map[string]string) {
	t.Helper()
	if d := diffLines(catalog(ctx, t, conn), want); d != "" {
		t.Fatalf("after %s the schema differs from a fresh one:%s", what, d)
	}
	for rel, rows := range tableRows(ctx, t, conn, cols) {
		if rows != before[rel] {
			t.Errorf("after %s parapply.%s holds %s, want its rows as they were: %s", what, rel, rows, before[rel])
		}
	}
	var versions string
	if err := conn.QueryRow(ctx, `SELECT string_agg(version::text, ',' ORDER BY version) FROM parapply.schema_version`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, m := range migrations {
		all = append(all, fmt.Sprint(m.version))
	}
	if want := strings.Join(all, ","); versions != want {
		t.Fatalf("after %s parapply.schema_version holds versions %s, want each of %s once", what, versions, want)
	}
}

// build runs steps (oldSteps) on conn and returns the columns and rows of
// the tables they made.
func build(ctx context.Context, t *testing.T, conn *pgx.Conn, steps []string) (cols, rows map[string]string) {
	t.Helper()
	for _, s := range steps {
		step, ok := oldSteps[s]
		if !ok {
			t.Fatalf("no step %q", s)
		}
		exec(ctx, t, conn, step.ddl)
		exec(ctx, t, conn, step.rows)
	}
	cols = tableColumns(ctx, t, conn)
	if len(cols) != len(shapeTables(steps)) {
		t.Fatalf("the old shape has tables %v, its steps make %v", cols, shapeTables(steps))
	}
	rows = tableRows(ctx, t, conn, cols)
	for rel, r := range rows {
		if r == "" {
			t.Fatalf("the old shape's %s has no rows: nothing would show a lost row", rel)
		}
	}
	return cols, rows
}

// shapeTables lists the tables a shape's steps make.
func shapeTables(steps []string) map[string]bool {
	out := map[string]bool{}
	for _, s := range steps {
		for _, l := range strings.Split(oldSteps[s].ddl, "\n") {
			if rest, ok := strings.CutPrefix(l, "CREATE TABLE IF NOT EXISTS parapply."); ok {
				out[strings.Fields(rest)[0]] = true
			}
		}
	}
	return out
}

// TestMigrateConcurrent: starters that migrate at once (on an empty target
// and on one an earlier release left) all succeed, one of them migrates,
// and the schema and rows end as one Migrate leaves them; a starter that
// waits longer than migrateLockWait for another gives up with an error
// that says so.
func TestMigrateConcurrent(t *testing.T) {
	ctx, newDB := server(t, "target-concurrent")
	_, want := freshCatalog(ctx, t, newDB)
	last := oldShapes[len(oldShapes)-3] // upgraded through claims: skip keyed by slot
	for i, steps := range [][]string{nil, last.steps} {
		t.Run(fmt.Sprintf("%d old steps", len(steps)), func(t *testing.T) {
			conn, dsn := newDB(t, fmt.Sprintf("concurrent%d", i))
			cols, before := build(ctx, t, conn, steps)
			const starters = 4
			conns := make([]*pgx.Conn, starters)
			for k := range conns {
				conns[k] = pgtest.Connect(ctx, t, dsn)
			}
			errs := make([]error, starters)
			var wg sync.WaitGroup
			for k := range conns {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[k] = Migrate(ctx, conns[k])
				}()
			}
			wg.Wait()
			for k, err := range errs {
				if err != nil {
					t.Fatalf("starter %d: %v", k, err)
				}
			}
			checkMigrated(ctx, t, conn, "concurrent migrations", want, cols, before)
		})
	}

	t.Run("bounded wait", func(t *testing.T) {
		conn, dsn := newDB(t, "waiting")
		holder := pgtest.Connect(ctx, t, dsn)
		exec(ctx, t, holder, "SELECT pg_catalog.pg_advisory_lock("+lockKeySQL+")")
		defer func(d time.Duration) { migrateLockWait = d }(migrateLockWait)
		migrateLockWait = time.Second
		start := time.Now()
		err := Migrate(ctx, conn)
		if err == nil || !strings.Contains(err.Error(), "another session held schema parapply") || !strings.Contains(err.Error(), "for more than 1s") {
			t.Fatalf("Migrate while another session holds the migration lock: %v, want an error naming the wait", err)
		}
		if waited := time.Since(start); waited > 30*time.Second {
			t.Fatalf("Migrate waited %s for the lock, bound 1s", waited)
		}
		exec(ctx, t, holder, "SELECT pg_catalog.pg_advisory_unlock("+lockKeySQL+")")
		if err := Migrate(ctx, conn); err != nil {
			t.Fatalf("Migrate once the lock is free: %v", err)
		}
	})
}
