package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/status"
	"github.com/parapply/parapply/subscriber"
)

// notStreaming says why no live parapply streams from slot ("" when one
// does or may: a walsender streams from the slot, or the slot's status
// row on the target is fresh and says running, or a target session holds
// the slot's lock): what cutover and verify tell a DBA in place of
// waiting for a position that will not come. rec is the slot's status
// row (nil: none).
func notStreaming(active bool, rec *status.Record) string {
	if active || (rec != nil && rec.Live()) {
		return ""
	}
	why := "the slot is inactive on the publisher and no target session holds its lock"
	if rec == nil {
		return why + "; the target has no status row of it (no parapply ran on it here: check --slot and --target)"
	}
	age := rec.Age.Round(time.Second)
	switch rec.State {
	case subscriber.StateFailed:
		return fmt.Sprintf("%s; its last run (pid %d on %s) failed %s ago: %s", why, rec.PID, rec.Host, age, rec.LastError)
	case subscriber.StateStopped:
		return fmt.Sprintf("%s; its last run (pid %d on %s) stopped %s ago", why, rec.PID, rec.Host, age)
	}
	return fmt.Sprintf("%s; its last run (pid %d on %s) was %s when it stopped recording %s ago, without recording its end (killed?)", why, rec.PID, rec.Host, rec.State, age)
}

// slotRecord reads slot's status row on the target (nil: none, or no
// parapply.status table).
func slotRecord(ctx context.Context, dst *pgx.Conn, slot string) (*status.Record, error) {
	var exists bool
	if err := dst.QueryRow(ctx, "SELECT pg_catalog.to_regclass('parapply.status') IS NOT NULL").Scan(&exists); err != nil {
		return nil, fmt.Errorf("reading parapply.status on the target: %w", err)
	}
	if !exists {
		return nil, nil
	}
	recs, err := status.Read(ctx, dst, slot)
	if err != nil || len(recs) == 0 {
		return nil, err
	}
	return &recs[0], nil
}

// noStreamerFor is how long cutover sees no live parapply for the slot
// before it stops waiting: a few status intervals, so that a run between
// two connections, or one that has just started and not yet claimed the
// slot, is not taken for none.
const noStreamerFor = 5 * status.Interval

// walMark is where the publisher's WAL and transaction ids stand: two of
// them, before and after a comparison, tell whether transactions wrote
// meanwhile.
type walMark struct {
	LSN      parapply.LSN
	Snapshot string // txid_current_snapshot(): xmin:xmax:xip,...
}

// readWALMark reads the publisher's WAL insert position (the write
// position moves a page at a time with synchronous_commit = off) and
// snapshot.
func readWALMark(ctx context.Context, src *pgx.Conn) (walMark, error) {
	var m walMark
	var snap string
	if err := src.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_insert_lsn()::text, pg_catalog.txid_current_snapshot()::text").Scan((*lsnText)(&m.LSN), &snap); err != nil {
		return m, fmt.Errorf("reading the publisher's WAL position: %w", err)
	}
	m.Snapshot = snap
	return m, nil
}

// wroteBetween tells whether transactions wrote on the publisher between
// two marks: its WAL moved, and a transaction was given an id (xmax
// advanced) or one in progress at the first ended. WAL the server writes
// for itself (a checkpoint, a running-transactions record) moves the
// position without either.
func wroteBetween(before, after walMark) bool {
	if after.LSN <= before.LSN {
		return false
	}
	_, bmax, bxip, ok1 := parseSnapshot(before.Snapshot)
	_, amax, axip, ok2 := parseSnapshot(after.Snapshot)
	if !ok1 || !ok2 {
		return true // unknown: the WAL moved
	}
	if amax > bmax {
		return true
	}
	for _, x := range bxip {
		if !slices.Contains(axip, x) {
			return true
		}
	}
	return false
}

// parseSnapshot parses a txid_snapshot's text, xmin:xmax:xip,...
func parseSnapshot(s string) (xmin, xmax uint64, xip []uint64, ok bool) {
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return 0, 0, nil, false
	}
	var err error
	if xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return 0, 0, nil, false
	}
	if xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return 0, 0, nil, false
	}
	if parts[2] != "" {
		for _, f := range strings.Split(parts[2], ",") {
			x, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return 0, 0, nil, false
			}
			xip = append(xip, x)
		}
	}
	return xmin, xmax, xip, true
}

// writesNote is what verify says when the publisher wrote during its
// comparison ("" when it did not).
func writesNote(before, after walMark) string {
	if !wroteBetween(before, after) {
		return ""
	}
	return fmt.Sprintf("the publisher wrote during the comparison (its WAL moved from %s to %s): writes are running, so these results are not final; stop the writes, then run parapply cutover, which waits for parapply to apply everything up to the publisher's position before it compares",
		before.LSN, after.LSN)
}

// slotNote says, for verify, where the slot stands when tables differ:
// no live parapply streams from it (and why), or it has not confirmed
// the publisher's position read before the comparison. "" when the
// publisher has no such slot, or it had caught up.
func slotNote(ctx context.Context, src, dst *pgx.Conn, slot string, at parapply.LSN) (string, error) {
	var confirmed *string
	var active bool
	err := src.QueryRow(ctx, "SELECT confirmed_flush_lsn::text, active FROM pg_catalog.pg_replication_slots WHERE slot_name = $1", slot).Scan(&confirmed, &active)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading slot %s on the publisher: %w", slot, err)
	}
	rec, err := slotRecord(ctx, dst, slot)
	if err != nil {
		return "", err
	}
	if why := notStreaming(active, rec); why != "" {
		return fmt.Sprintf("no parapply streams from slot %s: %s; start it, and once it has caught up run parapply cutover", slot, why), nil
	}
	c := parapply.LSN(0)
	if confirmed != nil {
		c, _ = parapply.ParseLSN(*confirmed)
	}
	if c < at {
		return fmt.Sprintf("slot %s had confirmed %s, behind the publisher's %s: parapply may not have caught up; parapply cutover waits for it before it compares", slot, c, at), nil
	}
	return "", nil
}
