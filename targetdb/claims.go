package targetdb

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A killed parapply's target sessions outlive it: a backend keeps executing
// the statements already in its socket, COMMIT included, until it notices
// the client is gone. Were a restarted parapply to read the progress row
// before such a commit, it would apply those changes a second time. Every
// target session that writes for a slot therefore holds a shared advisory
// lock named after the slot, and a starting parapply first waits for the
// exclusive one.

// LockKey is the SQL expression of the slot's advisory lock key ($1 the
// slot name), for queries of pg_locks in other packages.
const LockKey = lockKey

const lockKey = "hashtextextended('parapply slot ' || $1, 0)"

// LockHeld is the SQL condition that a target session holds the slot's
// lock, slot being the SQL expression of the slot's name: true from a
// run's claim of the slot until its last session ends, the surest sign on
// the target that a parapply is alive on the slot (a killed one's
// sessions end as soon as their backends notice it gone).
func LockHeld(slot string) string {
	return `EXISTS (SELECT FROM pg_catalog.pg_locks AS l WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()
		AND (l.classid::bigint << 32 | l.objid::bigint) = pg_catalog.hashtextextended('parapply slot ' || ` + slot + `, 0))`
}

// ErrClaimWait marks Claim's error when the slot's earlier sessions
// outlast its limit, so that the caller can say who they belong to.
var ErrClaimWait = errors.New("the slot's lock is still held")

// Claim waits until no earlier session of this slot is left on the target,
// then holds the slot's shared lock on conn. Those of ours (the previous
// run of this process) are ended at once with pg_terminate_backend; others
// are waited for, at most limit. wait, if set, is told which backends are
// still there when the lock is first found held (first true) and every ten
// seconds after; an error it returns ends the wait with that error (the
// holder is another process that will not let go, say).
func Claim(ctx context.Context, conn *pgx.Conn, slot string, ours []uint32, limit time.Duration, wait func(pids []int32, first bool) error) error {
	start := time.Now()
	reported, first := start, true
	for {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_try_advisory_lock("+lockKey+")", slot).Scan(&ok); err != nil {
			return fmt.Errorf("taking slot %s's lock on the target: %w", slot, err)
		}
		if ok {
			_, err := conn.Exec(ctx, "SELECT pg_catalog.pg_advisory_unlock("+lockKey+"), pg_catalog.pg_advisory_lock_shared("+lockKey+")", slot)
			if err != nil {
				return fmt.Errorf("taking slot %s's lock on the target: %w", slot, err)
			}
			return nil
		}
		if len(ours) > 0 {
			// Only backends that hold this slot's lock: a pid of ours may
			// have been reused by an unrelated backend since.
			pids := make([]int64, len(ours))
			for i, p := range ours {
				pids[i] = int64(p)
			}
			if _, err := conn.Exec(ctx, `SELECT pg_catalog.pg_terminate_backend(l.pid) FROM pg_catalog.pg_locks l
				WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_catalog.pg_backend_pid() AND l.pid = ANY($2::int8[])
				AND (l.classid::bigint << 32 | l.objid::bigint) = `+lockKey, slot, pids); err != nil {
				return fmt.Errorf("ending the target sessions of slot %s's previous run: %w", slot, err)
			}
		}
		if time.Since(start) >= limit {
			return fmt.Errorf("target sessions of an earlier run of slot %s (pids %v) are still there after %s: if no other parapply runs with this slot, end them with SELECT pg_terminate_backend(pid) on the target (%w)", slot, holders(ctx, conn, slot), limit, ErrClaimWait)
		}
		if wait != nil && (first || time.Since(reported) >= 10*time.Second) {
			if err := wait(holders(ctx, conn, slot), first); err != nil {
				return err
			}
			reported, first = time.Now(), false
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// holders lists the other backends holding slot's lock (best effort).
func holders(ctx context.Context, conn *pgx.Conn, slot string) []int32 {
	var pids []int32
	_ = conn.QueryRow(ctx, `SELECT coalesce(array_agg(l.pid), '{}') FROM pg_catalog.pg_locks l
		WHERE l.locktype = 'advisory' AND l.granted AND l.pid <> pg_catalog.pg_backend_pid()
		AND (l.classid::bigint << 32 | l.objid::bigint) = `+lockKey, slot).Scan(&pids)
	return pids
}

// Share holds the slot's shared lock on another target session of a
// parapply that has claimed the slot.
func Share(ctx context.Context, conn *pgx.Conn, slot string) error {
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.pg_advisory_lock_shared("+lockKey+")", slot); err != nil {
		return fmt.Errorf("taking slot %s's lock on the target: %w", slot, err)
	}
	return nil
}

// One writer per target table. Two slots applying to the same target
// table (two parapply setups given overlapping publications, or a slot
// renamed while the old one still runs) are two writers the publisher
// never ordered against each other: their changes interleave on the
// target in no order the publisher had, and each one's updates may meet
// the other's rows. So each slot claims, in parapply.table_claims, the
// target tables it applies, and a start whose publications take in a
// table another slot has claimed is refused, naming both slots, unless
// the overlap is wanted (shared_tables = on: each side applies its own
// publication's changes, as two subscriptions of one table would).
// Claims of a slot whose progress row is gone (retired) do not count.
//
// One process per slot: parapply.slot_claims records which parapply holds
// a slot on this target (host, pid, application_name, and the target
// session that holds the slot's lock), so that a second process started
// on the same slot is told who holds it and stops, instead of taking the
// slot held for a dying walsender's and trying again.

// TableClaim is a target table (schema.name) that another slot applies.
type TableClaim struct{ Table, Slot string }

// Holder is a parapply process holding a slot on the target, as
// parapply.slot_claims records it: what a second process started on the
// slot is told.
type Holder struct {
	Host    string
	PID     int
	AppName string
	Since   time.Time
}

// ClaimTables records, in one transaction, that slot applies tables
// (schema.name) and that holder, on this session, holds the slot. Tables
// other slots claim refuse the start, naming both slots, unless shared;
// then they are returned, for a warning.
func ClaimTables(ctx context.Context, conn *pgx.Conn, slot string, tables []string, shared bool, holder Holder) ([]TableClaim, error) {
	fail := func(err error) ([]TableClaim, error) {
		return nil, fmt.Errorf("claiming the target tables of slot %s: %w", slot, err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback(context.Background())
	// One start at a time decides: two slots starting at once would
	// otherwise each see the other's claims missing.
	if _, err := tx.Exec(ctx, "LOCK TABLE parapply.table_claims IN SHARE ROW EXCLUSIVE MODE"); err != nil {
		return fail(err)
	}
	rows, _ := tx.Query(ctx, `SELECT c.table_name, c.slot_name FROM parapply.table_claims AS c
		WHERE c.table_name = ANY ($1) AND c.slot_name <> $2 AND EXISTS (SELECT FROM parapply.progress AS p WHERE p.slot_name = c.slot_name)
		ORDER BY 1, 2`, tables, slot)
	others, err := pgx.CollectRows(rows, pgx.RowToStructByPos[TableClaim])
	if err != nil {
		return nil, fmt.Errorf("reading parapply.table_claims on the target: %w", err)
	}
	if len(others) > 0 && !shared {
		return nil, errClaimed(slot, others)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM parapply.table_claims WHERE slot_name = $1 AND NOT table_name = ANY ($2)`, slot, tables); err != nil {
		return fail(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO parapply.table_claims (table_name, slot_name, shared) SELECT t, $2, $3 FROM pg_catalog.unnest($1::text[]) AS t
		ON CONFLICT (table_name, slot_name) DO UPDATE SET shared = excluded.shared`, tables, slot, shared); err != nil {
		return fail(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO parapply.slot_claims (slot_name, host, pid, application_name, backend_pid, claimed_at)
		VALUES ($1, $2, $3, $4, pg_catalog.pg_backend_pid(), now())
		ON CONFLICT (slot_name) DO UPDATE SET host = excluded.host, pid = excluded.pid, application_name = excluded.application_name,
			backend_pid = excluded.backend_pid, claimed_at = excluded.claimed_at`, slot, holder.Host, holder.PID, holder.AppName); err != nil {
		return nil, fmt.Errorf("recording slot %s's holder in parapply.slot_claims: %w", slot, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(err)
	}
	return others, nil
}

// errClaimed refuses a slot tables other slots apply to, naming the fix.
func errClaimed(slot string, others []TableClaim) error {
	list := ClaimList(others)
	first := others[0]
	return fmt.Errorf("slot %s would apply to target tables that slot %s applies to already: %s; two slots writing one table interleave their changes in no order the publisher had; publish the table to one of them only, or retire slot %s if it no longer runs (parapply drop --slot %s), or set shared_tables = on if the overlap is wanted",
		slot, first.Slot, strings.Join(list, ", "), first.Slot, first.Slot)
}

// ClaimList names claims as "table (slot name)", for messages.
func ClaimList(claims []TableClaim) []string {
	list := make([]string, len(claims))
	for i, c := range claims {
		list[i] = fmt.Sprintf("%s (slot %s)", c.Table, c.Slot)
	}
	return list
}

// SlotHolder reads the process parapply.slot_claims records as holding
// slot, if the target session that claimed it still holds the slot's lock
// (false otherwise, or when nothing is recorded).
func SlotHolder(ctx context.Context, conn *pgx.Conn, slot string) (Holder, bool, error) {
	var h Holder
	err := conn.QueryRow(ctx, `SELECT c.host, c.pid, c.application_name, c.claimed_at FROM parapply.slot_claims AS c
		WHERE c.slot_name = $1 AND EXISTS (SELECT FROM pg_catalog.pg_locks AS l WHERE l.locktype = 'advisory' AND l.granted AND l.pid = c.backend_pid
			AND (l.classid::bigint << 32 | l.objid::bigint) = `+lockKey+`)`, slot).Scan(&h.Host, &h.PID, &h.AppName, &h.Since)
	if errors.Is(err, pgx.ErrNoRows) {
		return h, false, nil
	}
	if err != nil {
		return h, false, fmt.Errorf("reading parapply.slot_claims: %w", err)
	}
	return h, true, nil
}
