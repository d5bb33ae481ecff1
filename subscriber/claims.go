package subscriber

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/source"
)

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

// claimTables records that this run's slot applies tables (schema.name),
// and that this process holds the slot; it refuses tables other slots
// have claimed unless SharedTables, and then warns of them.
func (s *Subscriber) claimTables(ctx context.Context, conn *pgx.Conn, tables []string) error {
	slot := s.cfg.Source.Slot
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("claiming the target tables of slot %s: %w", slot, err)
	}
	defer tx.Rollback(context.Background())
	// One start at a time decides: two slots starting at once would
	// otherwise each see the other's claims missing.
	if _, err := tx.Exec(ctx, "LOCK TABLE parapply.table_claims IN SHARE ROW EXCLUSIVE MODE"); err != nil {
		return fmt.Errorf("claiming the target tables of slot %s: %w", slot, err)
	}
	rows, _ := tx.Query(ctx, `SELECT c.table_name, c.slot_name FROM parapply.table_claims AS c
		WHERE c.table_name = ANY ($1) AND c.slot_name <> $2 AND EXISTS (SELECT FROM parapply.progress AS p WHERE p.slot_name = c.slot_name)
		ORDER BY 1, 2`, tables, slot)
	type claim struct{ Table, Slot string }
	others, err := pgx.CollectRows(rows, pgx.RowToStructByPos[claim])
	if err != nil {
		return fmt.Errorf("reading parapply.table_claims on the target: %w", err)
	}
	if len(others) > 0 {
		var list []string
		for _, o := range others {
			list = append(list, fmt.Sprintf("%s (slot %s)", o.Table, o.Slot))
		}
		if !s.cfg.SharedTables {
			first := others[0]
			return fmt.Errorf("slot %s would apply to target tables that slot %s applies to already: %s; two slots writing one table interleave their changes in no order the publisher had; publish the table to one of them only, or retire slot %s if it no longer runs (parapply drop --slot %s), or set shared_tables = on if the overlap is wanted",
				slot, first.Slot, strings.Join(list, ", "), first.Slot, first.Slot)
		}
		s.log.Warn("shared_tables = on: other slots apply to some of this slot's target tables too", "tables", list)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM parapply.table_claims WHERE slot_name = $1 AND NOT table_name = ANY ($2)`, slot, tables); err != nil {
		return fmt.Errorf("claiming the target tables of slot %s: %w", slot, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO parapply.table_claims (table_name, slot_name, shared) SELECT t, $2, $3 FROM pg_catalog.unnest($1::text[]) AS t
		ON CONFLICT (table_name, slot_name) DO UPDATE SET shared = excluded.shared`, tables, slot, s.cfg.SharedTables); err != nil {
		return fmt.Errorf("claiming the target tables of slot %s: %w", slot, err)
	}
	host, _ := os.Hostname()
	if _, err := tx.Exec(ctx, `INSERT INTO parapply.slot_claims (slot_name, host, pid, application_name, backend_pid, claimed_at)
		VALUES ($1, $2, $3, $4, pg_catalog.pg_backend_pid(), now())
		ON CONFLICT (slot_name) DO UPDATE SET host = excluded.host, pid = excluded.pid, application_name = excluded.application_name,
			backend_pid = excluded.backend_pid, claimed_at = excluded.claimed_at`, slot, host, os.Getpid(), s.targetName()); err != nil {
		return fmt.Errorf("recording slot %s's holder in parapply.slot_claims: %w", slot, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("claiming the target tables of slot %s: %w", slot, err)
	}
	return nil
}

// slotHolder names another parapply that holds the slot on this target,
// for a start that found the slot busy on the publisher: the process the
// target's claim records, if the target session that claimed the slot
// still holds the slot's lock there and the process, on this host, is
// alive and not this one. "" when there is none (a walsender still
// ending, say), or it cannot be told.
func (s *Subscriber) slotHolder(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, holderTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.cfg.Target.DSN)
	if err != nil {
		return ""
	}
	defer conn.Close(context.Background())
	var host, app string
	var pid int
	var since time.Time
	err = conn.QueryRow(ctx, `SELECT c.host, c.pid, c.application_name, c.claimed_at FROM parapply.slot_claims AS c
		WHERE c.slot_name = $1 AND EXISTS (SELECT FROM pg_catalog.pg_locks AS l WHERE l.locktype = 'advisory' AND l.granted AND l.pid = c.backend_pid
			AND (l.classid::bigint << 32 | l.objid::bigint) = `+progress.LockKey+`)`, s.cfg.Source.Slot).Scan(&host, &pid, &app, &since)
	if err != nil {
		return ""
	}
	// Only a process seen alive counts: the target session of one just
	// killed holds the lock until its backend notices, as its walsender
	// holds the slot (Run waits for those). A holder on another host cannot
	// be seen from here; it is named when Run gives up waiting.
	me, _ := os.Hostname()
	if host != me || pid == os.Getpid() || syscall.Kill(pid, 0) != nil {
		return ""
	}
	return fmt.Sprintf("parapply pid %d on host %s (application_name %s), applying to this target since %s", pid, host, app, since.UTC().Format("2006-01-02 15:04:05 UTC"))
}

// holderTimeout bounds the look at the target for another process
// holding the slot.
const holderTimeout = 10 * time.Second

// errSlotHeld is the error of a start that found its slot held by another
// parapply (see slotHolder): a restart does not change that.
func errSlotHeld(slot, holder string, err error) error {
	return permanent{fmt.Errorf("slot %s is held by another %s: stop that one first, or start this one with another --slot (%w)", slot, holder, err)}
}

// claimedTables lists the target tables a run applies, as schema.name.
func claimedTables(published []source.PublishedTable) []string {
	tables := make([]string, 0, len(published))
	for _, pt := range published {
		tables = append(tables, pt.Schema+"."+pt.Name)
	}
	slices.Sort(tables)
	return slices.Compact(tables)
}
