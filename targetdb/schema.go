// Package targetdb owns what parapply keeps on and checks of the target
// database: the parapply schema and its migrations, the checks a start
// makes of the target, the slot's claim (its lock, its tables, its
// holder), the replication origins the appliers use, and the tombstones
// of detect_update_deleted; one file per concept, its SQL and the pure
// decisions over what it reads. It sits low in the import graph (the
// root package and pgx only), so that every package that reads or writes
// the target can use it.
package targetdb

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Schema is the target schema holding parapply's own state.
const Schema = "parapply"

// LostSlotFix is the fix for a start whose slot the publisher lost while
// the target records what an earlier slot of the name applied or copied.
const LostSlotFix = "changes made between that slot's loss and now never reached the target; to start over, delete the slot's rows from parapply.progress and parapply.sync_state on the target and run with existing_data = truncate"

// OriginSetting is set, in every target session of parapply's that
// applies changes, to the session's replication origin: the tombstone
// trigger records nothing for those sessions.
const OriginSetting = "parapply.origin"

// SlotTables are parapply's tables on the target that hold rows per slot
// (slot_name), which dropping a slot deletes. parapply.conflicts is left:
// it is the record of what was resolved, for whoever audits it.
var SlotTables = []string{"progress", "prepared", "applied", "skip", "sync_state", "retired_origins", "table_claims", "slot_claims", "status", "sequence_sync", "deferred_ddl"}

// The schema's version is the highest version recorded in
// parapply.schema_version, one row per migration applied, written in the
// migration's own transaction: a table, not a COMMENT on the schema,
// because a row commits or rolls back with the migration, says when each
// ran, and is not overwritten by a DBA's COMMENT ON SCHEMA.

// migration is one step of the schema: applied once, in a transaction of
// its own, in version order.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations is the one ordered list of changes to the parapply schema.
// Append to it; never edit a migration a release has shipped.
var migrations = []migration{
	{1, "the parapply schema of releases before schema versions, brought to one shape", migration1},
	{2, "what schema = copy runs after the initial copy", migration2},
}

// Version is the schema version this release migrates to.
func Version() int { return migrations[len(migrations)-1].version }

// migrateLockWait bounds the wait for another session migrating the
// schema (and for the locks of parapply's tables a migration changes).
var migrateLockWait = 60 * time.Second

// lockKeySQL names the advisory lock that serializes migrations.
const lockKeySQL = "pg_catalog.hashtextextended('parapply schema', 0)"

// Migrate brings the parapply schema on the target to this release's
// version: it creates it on a target parapply never ran on, and upgrades
// one an earlier release made, keeping its rows. A schema already at this
// version (or a later one) is left alone, so that it costs one read and
// no privilege beyond reading the schema. Concurrent starters are
// serialized by an advisory lock; a wait longer than migrateLockWait ends
// in an error.
func Migrate(ctx context.Context, conn *pgx.Conn) error {
	v, err := CurrentVersion(ctx, conn)
	if err != nil {
		return err
	}
	for _, m := range migrations {
		if m.version <= v {
			continue
		}
		if err := applyMigration(ctx, conn, m); err != nil {
			return err
		}
	}
	return nil
}

// CurrentVersion returns the version of the parapply schema on the target:
// 0 when it has none (never created, or made by a release before
// versions). It creates nothing.
func CurrentVersion(ctx context.Context, conn *pgx.Conn) (int, error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass('parapply.schema_version') IS NOT NULL`).Scan(&exists); err != nil {
		return 0, fmt.Errorf("reading the version of schema %s on the target: %w", Schema, err)
	}
	if !exists {
		return 0, nil
	}
	var v int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM parapply.schema_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading %s.schema_version on the target: %w", Schema, err)
	}
	return v, nil
}

// applyMigration runs migration m in a transaction of its own, unless another
// session applied it while this one waited for the lock.
func applyMigration(ctx context.Context, conn *pgx.Conn, m migration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return migrateError(m, err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", migrateLockWait.Milliseconds())); err != nil {
		return migrateError(m, err)
	}
	if _, err := tx.Exec(ctx, "SELECT pg_catalog.pg_advisory_xact_lock("+lockKeySQL+")"); err != nil {
		return migrateError(m, err)
	}
	// Read from pg_class with this statement's snapshot, not with
	// to_regclass: the session's cache of names may not yet know of a
	// table another session committed while this one waited for the lock.
	var done bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'parapply' AND c.relname = 'schema_version')`).Scan(&done); err != nil {
		return migrateError(m, err)
	}
	if done {
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM parapply.schema_version WHERE version >= $1)`, m.version).Scan(&done); err != nil {
			return migrateError(m, err)
		}
	}
	if done {
		return nil
	}
	if _, err := tx.Exec(ctx, m.sql); err != nil {
		return migrateError(m, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO parapply.schema_version (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
		return migrateError(m, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return migrateError(m, err)
	}
	return nil
}

// migrateError names what failed and, where it can tell, the fix.
func migrateError(m migration, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case pgerrcode.InsufficientPrivilege:
			return fmt.Errorf("creating or upgrading schema %s on the target (version %d): %w (the target role needs CREATE on the database, and must own schema %s's tables when an earlier release made them)", Schema, m.version, err, Schema)
		case pgerrcode.LockNotAvailable:
			return fmt.Errorf("creating or upgrading schema %s on the target (version %d): %w: another session held schema %s or one of its tables for more than %s (another parapply starting, or a long transaction on parapply's tables); try again, or end that session", Schema, m.version, err, Schema, migrateLockWait)
		}
	}
	return fmt.Errorf("creating or upgrading schema %s on the target (version %d): %w", Schema, m.version, err)
}

// SQLSTATEs raised by the functions of parapply's schema (class PC is not
// PostgreSQL's), named once here for the SQL that raises them and the Go
// code that tells them apart.
const (
	// SQLStateConflictFound: a replicated change met a conflict; parapply
	// applies the transaction again, resolving it.
	SQLStateConflictFound = "PC001"
	// SQLStateConflictError: a conflict whose policy in
	// conflict_resolution is error.
	SQLStateConflictError = "PC002"
)
