package targetdb

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
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
// them unless granted. pg_replication_origin_session_setup is named
// without its arguments: PostgreSQL 19 gave it a second (pid), and the
// name alone is one function on every version.
const originFunctions = "pg_catalog.pg_replication_origin_create(text), pg_catalog.pg_replication_origin_oid(text), pg_catalog.pg_replication_origin_session_setup, pg_catalog.pg_replication_origin_session_reset(), pg_catalog.pg_replication_origin_xact_setup(pg_lsn, timestamp with time zone), pg_catalog.pg_replication_origin_drop(text), pg_catalog.pg_show_replication_origin_status()"

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

// The planning of the target's replication origin states (see
// subscriber's prepareOrigins for how a run uses it): every origin set up
// once holds one of the cluster's few states until dropped.

// OriginStates is what the target says of its replication origin states,
// read before a run opens its sessions, so that PlanOrigins can fit them.
type OriginStates struct {
	// Limit is how many origins may hold state at once, and Setting the
	// setting that says so (max_active_replication_origins, or
	// max_replication_slots before PostgreSQL 18).
	Limit   int
	Setting string
	// Held names the origins holding a state, when Visible: the role may
	// read them (pg_show_replication_origin_status).
	Held    []string
	Visible bool
	// Siblings are the other slots recorded in parapply.progress, whose
	// origin names may look like this slot's.
	Siblings []string
}

// ReadOriginStates reads the target's origin states for a run of slot.
func ReadOriginStates(ctx context.Context, conn *pgx.Conn, slot string) (OriginStates, error) {
	var st OriginStates
	var err error
	if st.Limit, st.Setting, err = originLimit(ctx, conn); err != nil {
		return st, err
	}
	if st.Held, st.Visible, err = heldOrigins(ctx, conn); err != nil {
		return st, err
	}
	// Best effort: parapply may never have run here, or the role may not
	// read its schema (a refusal comes later, naming the fix).
	rows, _ := conn.Query(ctx, "SELECT slot_name FROM parapply.progress WHERE slot_name <> $1", slot)
	st.Siblings, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if pe := (*pgconn.PgError)(nil); err != nil && !errors.As(err, &pe) {
		return st, fmt.Errorf("reading the slots recorded in parapply.progress on the target: %w", err)
	}
	return st, nil
}

// fitOrigins returns the workers and stream sessions a run may open when
// limit origin state slots are free to it, of which the reader takes one:
// workers give way first (down to one), then stream sessions.
func fitOrigins(limit, workers, streams int) (w, st int) {
	free := max(limit-1, 0)
	w = min(workers, max(free-streams, min(workers, 1)), free)
	return w, min(streams, free-w)
}

// OriginPlan is what a run may open, given the target's origin state
// slots.
type OriginPlan struct {
	// Free is the number of state slots this slot's sessions may hold:
	// the limit less those held by other origins.
	Free int
	// Workers, Streams and Copiers are the sessions of each kind the run
	// may open (each beside the reader).
	Workers, Streams, Copiers int
	// Retire lists this slot's origins holding a state slot that the run
	// will not use; Others, the other origins holding one.
	Retire, Others []string
}

// PlanOrigins fits a run of slot with the given workers, stream sessions
// and copy workers into limit origin state slots, of which held lists the
// holders by name. The copy runs before the workers and stream sessions
// open, while their origins kept from earlier runs still hold slots; if
// those leave no room for one copy worker, they are retired too (they are
// set up again when the workers open).
//
// siblings are other slots recorded on the target: an origin whose name
// parses as one of this slot's is theirs if it parses as one of a longer
// sibling's (slot a's worker 1 and slot a_w1's reader are both
// parapply_a_w1).
func PlanOrigins(limit int, held []string, slot string, siblings []string, workers, streams, copiers int) (OriginPlan, error) {
	var p OriginPlan
	type own struct {
		name string
		kind byte
		n    int
	}
	var ours []own
	for _, name := range held {
		if kind, n, ok := ParseOrigin(slot, name); ok && !slices.ContainsFunc(siblings, func(sib string) bool {
			_, _, theirs := ParseOrigin(sib, name)
			return theirs && len(sib) > len(slot)
		}) {
			ours = append(ours, own{name, kind, n})
		} else {
			p.Others = append(p.Others, name)
		}
	}
	p.Free = limit - len(p.Others)
	if p.Free < 1 {
		return p, errNoOriginState(limit, p.Others)
	}
	p.Workers, p.Streams = fitOrigins(p.Free, workers, streams)
	kept := 0
	for _, o := range ours {
		switch {
		case o.kind == 0:
		case o.kind == 'w' && o.n <= p.Workers, o.kind == 's' && o.n <= p.Streams:
			kept++
		default:
			p.Retire = append(p.Retire, o.name)
		}
	}
	p.Copiers = min(copiers, p.Free-1-kept)
	if p.Copiers < 1 && kept > 0 {
		for _, o := range ours {
			if o.kind == 'w' && o.n <= p.Workers || o.kind == 's' && o.n <= p.Streams {
				p.Retire = append(p.Retire, o.name)
			}
		}
		p.Copiers = min(copiers, p.Free-1)
	}
	p.Copiers = max(p.Copiers, 0)
	return p, nil
}

// errNoOriginState says that other origins hold every state slot.
func errNoOriginState(limit int, others []string) error {
	shown := others
	if len(shown) > 8 {
		shown = shown[:8]
	}
	drops := make([]string, len(shown))
	for i, name := range shown {
		drops[i] = "SELECT pg_replication_origin_drop('" + strings.ReplaceAll(name, "'", "''") + "')"
	}
	return fmt.Errorf("the target has no free replication origin state: all %d are held by other origins (%s), and parapply needs one per applying session; drop the origins no longer used (%s; an origin that was set up once keeps its state until dropped, even after its database is dropped), or raise max_active_replication_origins on the target (max_replication_slots before PostgreSQL 18; a restart is needed)",
		limit, strings.Join(others, ", "), strings.Join(drops, "; "))
}

// originLimit reads how many replication origins the target lets hold
// state at once, and the setting's name.
func originLimit(ctx context.Context, conn *pgx.Conn) (int, string, error) {
	var v, name string
	err := conn.QueryRow(ctx, `SELECT coalesce(current_setting('max_active_replication_origins', true), current_setting('max_replication_slots')),
		CASE WHEN current_setting('max_active_replication_origins', true) IS NULL THEN 'max_replication_slots' ELSE 'max_active_replication_origins' END`).Scan(&v, &name)
	if err != nil {
		return 0, "", fmt.Errorf("reading the target's limit on active replication origins: %w", err)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, "", fmt.Errorf("reading the target's limit on active replication origins: %s = %q", name, v)
	}
	return n, name, nil
}

// heldOrigins reads the names of the origins holding a state slot on the
// target cluster; ok is false where the role may not read them.
func heldOrigins(ctx context.Context, conn *pgx.Conn) (names []string, ok bool, err error) {
	rows, _ := conn.Query(ctx, "SELECT external_id FROM pg_catalog.pg_show_replication_origin_status() WHERE external_id IS NOT NULL ORDER BY local_id")
	names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == pgerrcode.InsufficientPrivilege {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading the target's replication origin states: %w", err)
	}
	return names, true, nil
}
