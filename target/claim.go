package target

import (
	"context"
	"errors"
	"fmt"
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
