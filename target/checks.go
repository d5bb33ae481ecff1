package target

import (
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgerrcode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The checks a start makes of the target, beside source's of the
// publisher: each refuses, naming the setting or privilege and the fix,
// before the slot is created.

// CheckTwoPhase refuses two_phase = on where the target cannot prepare
// transactions: parapply applies each prepared transaction as one there.
func CheckTwoPhase(ctx context.Context, conn *pgx.Conn) error {
	var n int
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('max_prepared_transactions')::int").Scan(&n); err != nil {
		return fmt.Errorf("reading max_prepared_transactions on the target: %w", err)
	}
	if n == 0 {
		return errors.New("two_phase = on applies prepared transactions as prepared transactions on the target, but its max_prepared_transactions is 0: set it above 0 there (a restart is needed), or turn two_phase off")
	}
	return nil
}

// CommitTimestamps reads whether the target tracks commit timestamps
// (conflict detection needs them to tell rows changed by others) and
// whether it is PostgreSQL 18 or later (RETURNING OLD).
func CommitTimestamps(ctx context.Context, conn *pgx.Conn) (tracked, oldReturning bool, err error) {
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('track_commit_timestamp')::bool, pg_catalog.current_setting('server_version_num')::int >= 180000").Scan(&tracked, &oldReturning); err != nil {
		return false, false, fmt.Errorf("reading track_commit_timestamp on the target: %w", err)
	}
	return tracked, oldReturning, nil
}

// PrepareSession sets up a target session that applies like the built-in
// apply worker's: session_replication_role = replica (so triggers and
// foreign keys act as they do for replicated changes; the role needs it
// granted), the commit mode asked for, lockTimeout if set, and the
// formats parapply writes values in. A refusal names the fix.
func PrepareSession(ctx context.Context, conn *pgx.Conn, synchronousCommit, lockTimeout string) error {
	set := []struct{ name, value, hint string }{
		{"session_replication_role", "replica", "the target role must be a superuser, or on PostgreSQL 15+ be granted it: GRANT SET ON PARAMETER session_replication_role TO <role>"},
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
			if s.hint != "" && errors.As(err, &pe) && (pe.Code == pgerrcode.InsufficientPrivilege || pe.Code[:2] == pgerrcode.DataException[:2]) {
				return fmt.Errorf("setting %s = %s on the target: %w; %s", s.name, s.value, err, s.hint)
			}
			return fmt.Errorf("setting %s = %s on the target: %w", s.name, s.value, err)
		}
	}
	return nil
}
