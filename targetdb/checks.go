package targetdb

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/preflight/judge"
)

// The checks a start makes of the target, beside source's of the
// publisher: each refuses, naming the setting or privilege and the fix
// as package preflight's judgements (preflight/judge) word them, before
// the slot is created.

// CheckTwoPhase refuses two_phase = on where the target cannot prepare
// transactions: parapply applies each prepared transaction as one there.
func CheckTwoPhase(ctx context.Context, conn *pgx.Conn) error {
	var n int
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('max_prepared_transactions')::int").Scan(&n); err != nil {
		return fmt.Errorf("reading max_prepared_transactions on the target: %w", err)
	}
	if f := judge.PreparedTransactions(n); f != nil {
		return f
	}
	return nil
}

// Detection is what conflict detection reads of the target.
type Detection struct {
	// CommitTimestamps: track_commit_timestamp is on (without it rows
	// changed by others cannot be told); OldReturning: PostgreSQL 18 or
	// later (RETURNING OLD).
	CommitTimestamps, OldReturning bool
	// ID names the target as source IDs name publishers (system
	// identifier and database), to break ties of commit times the same
	// way on both ends of a pair; "" when it cannot be read, IDErr says
	// why (pg_control_system refused, say).
	ID    string
	IDErr error
}

// ReadDetection reads what conflict detection needs of the target.
func ReadDetection(ctx context.Context, conn *pgx.Conn) (Detection, error) {
	var d Detection
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('track_commit_timestamp')::bool, pg_catalog.current_setting('server_version_num')::int >= 180000").Scan(&d.CommitTimestamps, &d.OldReturning); err != nil {
		return d, fmt.Errorf("reading track_commit_timestamp on the target: %w", err)
	}
	d.IDErr = conn.QueryRow(ctx, "SELECT (SELECT system_identifier FROM pg_catalog.pg_control_system())::text || '/' || pg_catalog.current_database()").Scan(&d.ID)
	return d, nil
}

// PrepareSession sets up a target session that applies like the built-in
// apply worker's: session_replication_role = replica (so triggers and
// foreign keys act as they do for replicated changes; the role needs it
// granted), the commit mode asked for, lockTimeout if set, and the
// formats parapply writes values in. A refusal names the fix.
func PrepareSession(ctx context.Context, conn *pgx.Conn, synchronousCommit, lockTimeout string) error {
	set := []struct{ name, value, hint string }{
		{"session_replication_role", "replica", ""}, // refused: judge.ReplicaRole
		{"synchronous_commit", synchronousCommit, "use one of on, remote_apply, remote_write, local, off"},
		{"search_path", "pg_catalog", ""},
		{"datestyle", "ISO", ""},
		{"intervalstyle", "postgres", ""},
		{"extra_float_digits", "3", ""},
	}
	if lockTimeout != "" {
		set = append(set, struct{ name, value, hint string }{"lock_timeout", lockTimeout, "use a duration such as 10s"})
	}
	for _, s := range set {
		if _, err := conn.Exec(ctx, "SELECT pg_catalog.set_config($1, $2, false)", s.name, s.value); err != nil {
			var pe *pgconn.PgError
			if s.name == "session_replication_role" && errors.As(err, &pe) && pe.Code == pgerrcode.InsufficientPrivilege {
				return fmt.Errorf("setting %s = %s on the target: %w", s.name, s.value, judge.ReplicaRole(conn.Config().User, err))
			}
			if s.hint != "" && errors.As(err, &pe) && (pe.Code == pgerrcode.InsufficientPrivilege || pe.Code[:2] == pgerrcode.DataException[:2]) {
				return fmt.Errorf("setting %s = %s on the target: %w; %s", s.name, s.value, err, s.hint)
			}
			return fmt.Errorf("setting %s = %s on the target: %w", s.name, s.value, err)
		}
	}
	return nil
}
