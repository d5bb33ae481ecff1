package target

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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
