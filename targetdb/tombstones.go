package targetdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
)

// Tombstones: parapply keeps, on the target, a record of the rows deleted
// there by anyone but parapply, so that a replicated update that finds no
// row can tell a row deleted on the target (update_deleted) from one that
// never was there (update_missing) without holding back vacuum, as
// PostgreSQL 19's retain_dead_tuples does. The record is paid for by
// deletes on published tables only: a statement-level AFTER DELETE
// trigger with a transition table, one row per deleted row. Records are
// pruned once parapply has applied every remote transaction that could
// have been concurrent with the delete (see PruneTombstones).

// TombstonesSQL creates, if missing, the objects of detect_update_deleted:
// parapply.tombstones (the rows deleted on the target by other sessions
// than parapply's), parapply.tombstone_slots (the slots that keep it) and
// the trigger function parapply.tombstone(). They are not part of the
// versioned migrations: they exist only while a slot keeps them, and the
// last slot to turn detect_update_deleted off drops them (RemoveTombstones).
//
// The function runs as its owner (SECURITY DEFINER), so that any session
// allowed to delete from a published table can record the delete; the key
// is kept as jsonb of the typed key values (to_jsonb), which a lookup
// builds the same way from the remote key.
const TombstonesSQL = `CREATE SCHEMA IF NOT EXISTS parapply;
CREATE TABLE IF NOT EXISTS parapply.tombstones (
	relid      oid NOT NULL,
	key        jsonb NOT NULL,
	xid        xid8 NOT NULL,
	deleted_at timestamptz NOT NULL DEFAULT pg_catalog.statement_timestamp()
);
CREATE INDEX IF NOT EXISTS tombstones_key ON parapply.tombstones (relid, key);
CREATE INDEX IF NOT EXISTS tombstones_deleted_at ON parapply.tombstones (deleted_at);
CREATE TABLE IF NOT EXISTS parapply.tombstone_slots (slot_name text PRIMARY KEY);
COMMENT ON TABLE parapply.tombstone_slots IS 'parapply: the slots that keep parapply.tombstones (detect_update_deleted = on); the last to turn it off removes the triggers; do not edit';
COMMENT ON TABLE parapply.tombstones IS 'parapply: rows deleted on the target by other sessions than parapply''s (detect_update_deleted), by table and key, pruned once no replicated update can be concurrent with the delete; do not edit';
CREATE OR REPLACE FUNCTION parapply.tombstone() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp AS $f$
BEGIN
	IF coalesce(current_setting('` + OriginSetting + `', true), '') <> '' THEN
		RETURN NULL; -- parapply's own session
	END IF;
	INSERT INTO parapply.tombstones (relid, key, xid)
		SELECT TG_RELID, (SELECT jsonb_object_agg(k, r.j -> k) FROM unnest(TG_ARGV) AS k), pg_current_xact_id()
		FROM (SELECT to_jsonb(d) AS j FROM parapply_deleted AS d) AS r;
	RETURN NULL;
END $f$;`

// TombstoneTrigger is the trigger parapply installs on each published target
// table (ENABLE ALWAYS, so that another subscription's apply worker, which
// runs with session_replication_role = replica, fires it too).
const TombstoneTrigger = "parapply_tombstones"

// TombstoneTable is a published target table to record deletes of.
type TombstoneTable struct {
	Name string   // quoted, schema-qualified
	Key  []string // the columns of its replica identity, unquoted
}

// tombstoneLockTimeout bounds the wait for a table's lock when a trigger is
// created or dropped: the target's own sessions queue behind a waiting
// ALTER TABLE.
const tombstoneLockTimeout = "2s"

// ErrTombstoneLocked is returned when a table's lock could not be had within
// tombstoneLockTimeout: a long transaction on the target holds it. Trying again
// later is the cure.
var ErrTombstoneLocked = errors.New("lock not available")

// InstallTombstones creates the table and function if missing, and the trigger on
// each of tables where it is missing or names other key columns. Tables
// whose kind takes no such trigger (a partition of a partitioned table)
// are returned in skipped with the reason.
func InstallTombstones(ctx context.Context, conn *pgx.Conn, slot string, tables []TombstoneTable) (installed int, skipped map[string]string, err error) {
	if err := tombstoneTxn(ctx, conn, TombstonesSQL+"; INSERT INTO parapply.tombstone_slots VALUES ("+parapply.QuoteLiteral(slot)+") ON CONFLICT DO NOTHING"); err != nil {
		return 0, nil, tombstonePrivilege(err, "parapply.tombstones", "it needs CREATE on the target database (for the schema parapply) or on schema parapply")
	}
	for _, t := range tables {
		var args []byte
		var enabled string
		err := conn.QueryRow(ctx, "SELECT tgargs, tgenabled::text FROM pg_catalog.pg_trigger WHERE tgrelid = $1::regclass AND tgname = $2", t.Name, TombstoneTrigger).Scan(&args, &enabled)
		if err == nil && enabled == "A" && string(args) == triggerArgs(t.Key) {
			continue
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return installed, skipped, fmt.Errorf("reading the triggers of %s on the target: %w", t.Name, err)
		}
		lits := make([]string, len(t.Key))
		for i, k := range t.Key {
			lits[i] = parapply.QuoteLiteral(k)
		}
		sql := "CREATE OR REPLACE TRIGGER " + TombstoneTrigger + " AFTER DELETE ON " + t.Name +
			" REFERENCING OLD TABLE AS parapply_deleted FOR EACH STATEMENT EXECUTE FUNCTION parapply.tombstone(" + strings.Join(lits, ", ") + ");" +
			"ALTER TABLE " + t.Name + " ENABLE ALWAYS TRIGGER " + TombstoneTrigger
		err = tombstoneTxn(ctx, conn, sql)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == pgerrcode.FeatureNotSupported {
			if skipped == nil {
				skipped = map[string]string{}
			}
			skipped[t.Name] = pe.Message
			continue
		}
		if err != nil {
			return installed, skipped, tombstonePrivilege(err, t.Name, "the target role must own the table (CREATE TRIGGER and ALTER TABLE ... ENABLE ALWAYS TRIGGER need it): ALTER TABLE "+t.Name+" OWNER TO <role>")
		}
		installed++
	}
	return installed, skipped, nil
}

// triggerArgs is pg_trigger.tgargs for the given arguments.
func triggerArgs(args []string) string {
	var b strings.Builder
	for _, a := range args {
		b.WriteString(a)
		b.WriteByte(0)
	}
	return b.String()
}

// RemoveTombstones takes slot off the slots that keep the records and, when no
// other slot keeps them, drops every trigger of parapply.tombstone's, then
// the function and the tables; removed counts the triggers, others names
// the slots that still keep them (then nothing is dropped). Nothing to
// remove is no error.
func RemoveTombstones(ctx context.Context, conn *pgx.Conn, slot string) (removed int, others []string, err error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.to_regprocedure('parapply.tombstone()') IS NOT NULL AND pg_catalog.to_regclass('parapply.tombstone_slots') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return 0, nil, err
	}
	rows, err := conn.Query(ctx, "WITH d AS (DELETE FROM parapply.tombstone_slots WHERE slot_name = $1) SELECT slot_name FROM parapply.tombstone_slots WHERE slot_name <> $1 ORDER BY 1", slot)
	if err != nil {
		return 0, nil, err
	}
	if others, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(others) > 0 {
		return 0, others, err
	}
	rows, err = conn.Query(ctx, `SELECT t.tgrelid::regclass::text FROM pg_catalog.pg_trigger AS t
		WHERE t.tgname = $1 AND t.tgfoid = 'parapply.tombstone()'::regprocedure AND NOT t.tgisinternal AND t.tgparentid = 0`, TombstoneTrigger)
	if err != nil {
		return 0, nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, nil, err
	}
	for _, n := range names {
		if err := tombstoneTxn(ctx, conn, "DROP TRIGGER IF EXISTS "+TombstoneTrigger+" ON "+n); err != nil {
			return removed, nil, tombstonePrivilege(err, n, "the target role must own the table to drop the trigger "+TombstoneTrigger+": drop it as its owner")
		}
		removed++
	}
	return removed, nil, tombstoneTxn(ctx, conn, "DROP FUNCTION IF EXISTS parapply.tombstone(); DROP TABLE IF EXISTS parapply.tombstones, parapply.tombstone_slots")
}

// tombstoneTxn runs sql in a transaction whose lock waits are bounded.
func tombstoneTxn(ctx context.Context, conn *pgx.Conn, sql string) error {
	_, err := conn.Exec(ctx, "BEGIN; SET LOCAL lock_timeout = '"+tombstoneLockTimeout+"'; "+sql+"; COMMIT")
	if err != nil {
		_, _ = conn.Exec(context.Background(), "ROLLBACK")
	}
	return err
}

// privilege names the fix of a failure to change object what.
func tombstonePrivilege(err error, what, fix string) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case pgerrcode.InsufficientPrivilege:
			return fmt.Errorf("detect_update_deleted: cannot set up tombstones for %s on the target: %s; %s, or turn detect_update_deleted off", what, pe.Message, fix)
		case pgerrcode.LockNotAvailable:
			return fmt.Errorf("%w: detect_update_deleted: %s is locked on the target by a transaction that runs longer than %s: %s (parapply tries again)", ErrTombstoneLocked, what, tombstoneLockTimeout, pe.Message)
		}
	}
	return fmt.Errorf("detect_update_deleted: setting up tombstones for %s on the target: %w", what, err)
}

// tombstonePruneBatch is how many records one prune statement deletes at most:
// small statements, so that pruning never holds many row locks nor
// writes much WAL at once.
const tombstonePruneBatch = 1000

// PruneTombstones deletes, in batches, the records of deletes that committed before
// horizon (the source commit time up to which every remote transaction is
// applied, less the clock skew allowed: no remote update still to come
// can have been concurrent with them), and with retention above 0 those
// older than retention whatever the horizon (expired: a later miss of
// their keys is reported as update_missing). The commit time of a delete
// is its transaction's where track_commit_timestamp tells it, else the
// delete statement's start.
func PruneTombstones(ctx context.Context, conn *pgx.Conn, horizon time.Time, retention time.Duration, commitTimestamps bool) (pruned, expired int64, err error) {
	// A delete's statement starts before its transaction commits: the
	// index on deleted_at narrows the rows, commit times decide.
	cond := "b.deleted_at < $1"
	if commitTimestamps {
		cond += " AND coalesce(pg_catalog.pg_xact_commit_timestamp(pg_catalog.xid(b.xid)), b.deleted_at) < $1"
	}
	// (A delete still running is not visible here: its record commits
	// with it.)
	del := func(cond string, args ...any) (int64, error) {
		var total int64
		for {
			tag, err := conn.Exec(ctx, `DELETE FROM parapply.tombstones WHERE ctid = ANY (ARRAY(SELECT b.ctid FROM parapply.tombstones AS b
				WHERE `+cond+` LIMIT `+fmt.Sprint(tombstonePruneBatch)+` FOR UPDATE SKIP LOCKED))`, args...)
			if err != nil {
				return total, err
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < tombstonePruneBatch {
				return total, nil
			}
		}
	}
	if !horizon.IsZero() {
		if pruned, err = del(cond, horizon); err != nil {
			return pruned, 0, err
		}
	}
	if retention > 0 {
		expired, err = del("b.deleted_at < pg_catalog.now() - $1::interval", fmt.Sprintf("%d microseconds", retention.Microseconds()))
	}
	return pruned, expired, err
}
