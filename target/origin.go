package target

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Replication origins: every target session that commits replicated
// changes does so under one of parapply's replication origins, as the
// built-in apply worker does under its subscription's. The target's WAL
// then marks those commits as replicated: a subscription or a parapply
// downstream of the target with origin = none does not send them on (no
// loops in bidirectional setups), and with track_commit_timestamp on,
// pg_xact_commit_timestamp_origin() tells which rows parapply wrote last.
// Before PostgreSQL 19 an origin can be active in one session at a time,
// so each session has its own (see OriginName).

// OriginName names the replication origin of one of a slot's target
// sessions: the stream reader's is parapply_<slot>; others add a suffix
// (w3 for worker 3, s1 for a streamed transaction's session, c2 for a copy
// worker). Replication origin names are not identifiers, and slot names
// are lower-case letters, digits and underscores only.
func OriginName(slot, suffix string) string {
	if suffix == "" {
		return "parapply_" + slot
	}
	return "parapply_" + slot + "_" + suffix
}

// originFunctions are the functions a target role needs to run parapply's
// sessions under replication origins; PostgreSQL lets only superusers run
// them unless granted.
const originFunctions = "pg_catalog.pg_replication_origin_create(text), pg_catalog.pg_replication_origin_oid(text), pg_catalog.pg_replication_origin_session_setup(text), pg_catalog.pg_replication_origin_session_reset(), pg_catalog.pg_replication_origin_xact_setup(pg_lsn, timestamp with time zone), pg_catalog.pg_replication_origin_drop(text), pg_catalog.pg_show_replication_origin_status()"

// OriginFunctions lists the functions parapply's target role needs granted
// when it is not a superuser, for messages that name the GRANT.
const OriginFunctions = originFunctions

// OriginPattern matches the names of every replication origin of slot's
// sessions (see OriginName), and no other slot's.
func OriginPattern(slot string) string {
	return "^" + regexp.QuoteMeta(OriginName(slot, "")) + "(_[wsc][0-9]+)?$"
}

// ParseOrigin tells whether name is one of slot's origins, and of which
// session: kind 0 for the stream reader, else 'w', 's' or 'c' with its
// number (see OriginName).
func ParseOrigin(slot, name string) (kind byte, n int, ok bool) {
	base := OriginName(slot, "")
	if name == base {
		return 0, 0, true
	}
	rest, found := strings.CutPrefix(name, base+"_")
	if !found || len(rest) < 2 || !strings.ContainsRune("wsc", rune(rest[0])) {
		return 0, 0, false
	}
	n, err := strconv.Atoi(rest[1:])
	if err != nil || n < 1 || strconv.Itoa(n) != rest[1:] {
		return 0, 0, false
	}
	return rest[0], n, true
}

// RetireOrigin drops one of slot's replication origins that no session of
// it uses any more (a copy worker's once the copy is done, a worker's
// above the worker count), freeing the origin's state slot on the target,
// of which the target has few (max_active_replication_origins). The
// origin's number is kept in parapply.retired_origins first: rows it
// committed still carry that number, and conflict detection counts them
// as this slot's (see Detection.ours) as long as no other origin has taken
// the number. It returns ErrOriginInUse while a session still holds it.
func RetireOrigin(ctx context.Context, conn *pgx.Conn, slot, name string) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("dropping replication origin %s on the target: %w", name, err)
	}
	defer tx.Rollback(context.Background())
	_, err = tx.Exec(ctx, `INSERT INTO parapply.retired_origins (slot_name, roident, roname)
		SELECT $1, roident, roname FROM pg_catalog.pg_replication_origin WHERE roname = $2
		ON CONFLICT (slot_name, roident) DO UPDATE SET roname = excluded.roname, retired_at = now()`, slot, name)
	if err == nil {
		_, err = tx.Exec(ctx, "SELECT pg_catalog.pg_replication_origin_drop($1) WHERE pg_catalog.pg_replication_origin_oid($1) IS NOT NULL", name)
	}
	if err == nil {
		err = tx.Commit(ctx)
	}
	if err != nil {
		return OriginError(name, err)
	}
	return nil
}

// ResetOrigin ends the session's use of its replication origin, so that
// the origin can be dropped at once (RetireOrigin) instead of when the
// session's backend has exited.
func ResetOrigin(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, "SELECT pg_catalog.pg_replication_origin_session_reset()")
	return err
}

// ErrOriginInUse is returned by SetupOrigin when another session holds the
// origin: a session of an earlier run still ending, or another process.
var ErrOriginInUse = errors.New("replication origin in use")

// SetupOrigin makes every later commit of the session on conn one of the
// replication origin name (created on the target if missing), for the
// appliers' sessions and the initial copy's workers, and marks the session
// as parapply's for the tombstone trigger (OriginSetting).
func SetupOrigin(ctx context.Context, conn *pgx.Conn, name string) error {
	_, err := conn.Exec(ctx, "SELECT pg_catalog.pg_replication_origin_create($1) WHERE pg_catalog.pg_replication_origin_oid($1) IS NULL", name)
	if err == nil {
		_, err = conn.Exec(ctx, "SELECT pg_catalog.pg_replication_origin_session_setup($1)", name)
	}
	if err == nil {
		// Marks the session as parapply's for its tombstone trigger.
		_, err = conn.Exec(ctx, "SELECT pg_catalog.set_config($1, $2, false)", OriginSetting, name)
	}
	return OriginError(name, err)
}

// OriginError explains a failure to set up origin name, naming the fix
// for those a DBA can meet.
func OriginError(name string, err error) error {
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) {
		if err != nil {
			return fmt.Errorf("setting up replication origin %s on the target: %w", name, err)
		}
		return nil
	}
	switch pe.Code {
	case pgerrcode.InsufficientPrivilege:
		return fmt.Errorf("the target role may not use replication origins, under which parapply commits what it applies (so that a subscription downstream with origin = none does not send it back): %s; as a superuser on the target, GRANT EXECUTE ON FUNCTION %s TO <role>", pe.Message, originFunctions)
	case pgerrcode.ConfigurationLimitExceeded:
		return fmt.Errorf("the target has no free replication origin state for %s (%s): parapply keeps one origin active per target session that applies (the stream reader, each worker, each session of a streamed transaction, each copy worker); raise max_active_replication_origins on the target (max_replication_slots before PostgreSQL 18; a restart is needed), or lower workers", name, pe.Message)
	case pgerrcode.ObjectInUse:
		return fmt.Errorf("%w: %s: %s (a session of an earlier run that is still ending, or another parapply on the same slot and target)", ErrOriginInUse, name, pe.Message)
	}
	return fmt.Errorf("setting up replication origin %s on the target: %w", name, err)
}
