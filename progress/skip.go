package progress

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/parapply/parapply"
)

// Skipping a source transaction, as ALTER SUBSCRIPTION ... SKIP does: a DBA
// names its commit LSN (the one an error names) with parapply skip; the
// next run reads it (ReadSkip) and lets the transaction pass without
// applying any of it. The request stays until the progress row has passed
// it, so a crash before that skips the transaction again when the publisher
// sends it again, and once past it the transaction is never sent again:
// skipped exactly once.

// ErrNoSlot is returned by SetSkip for a slot the target has no progress
// row of.
var ErrNoSlot = errors.New("no progress recorded for this slot on the target")

// SetSkip asks the next run of slot to skip the source transaction that
// committed at lsn; reason, when set, is the error that transaction met
// (on_error = skip_transaction), and its changes are then logged in
// parapply.conflicts as it is skipped. It refuses a transaction the target
// has already applied (the progress row is at or past it).
func SetSkip(ctx context.Context, conn *pgx.Conn, slot string, lsn parapply.LSN, reason string) error {
	p, _, found, err := readRow(ctx, conn, slot)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" {
		found, err = false, nil // no parapply.progress: parapply never ran here
	}
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("slot %s: %w (is --slot the one parapply run uses, and --target its target?)", slot, ErrNoSlot)
	}
	// parapply.skip is created at each start; a target last run by an
	// older parapply lacks it.
	if _, err := conn.Exec(ctx, createSQL); err != nil {
		return fmt.Errorf("creating %s's tables on the target: %w", Schema, err)
	}
	if lsn <= p.CommitLSN {
		return fmt.Errorf("the target has applied slot %s's transactions up to the one committed at %s: the transaction at %s is applied already", slot, p.CommitLSN, lsn)
	}
	_, err = conn.Exec(ctx, `INSERT INTO parapply.skip (slot_name, commit_lsn, reason) VALUES ($1, $2::text::pg_lsn, nullif($3, ''))
		ON CONFLICT (slot_name) DO UPDATE SET commit_lsn = excluded.commit_lsn, requested_at = now(), reason = excluded.reason`, slot, lsn.String(), reason)
	if err != nil {
		return fmt.Errorf("recording the skip in %s.skip: %w", Schema, err)
	}
	return nil
}

// ReadSkip returns the commit LSN of the transaction slot is to skip (zero
// if none) and the reason SetSkip was given. A request the progress row (at
// applied) has passed is done with, and removed: its LSN is returned as
// passed.
func ReadSkip(ctx context.Context, conn *pgx.Conn, slot string, applied parapply.LSN) (skip, passed parapply.LSN, reason string, err error) {
	var s string
	var r *string
	err = conn.QueryRow(ctx, `SELECT commit_lsn::text, reason FROM parapply.skip WHERE slot_name = $1`, slot).Scan(&s, &r)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, "", nil
	}
	if err != nil {
		return 0, 0, "", fmt.Errorf("reading %s.skip: %w", Schema, err)
	}
	lsn, err := parapply.ParseLSN(s)
	if err != nil {
		return 0, 0, "", err
	}
	if lsn > applied {
		if r != nil {
			reason = *r
		}
		return lsn, 0, reason, nil
	}
	if _, err := conn.Exec(ctx, `DELETE FROM parapply.skip WHERE slot_name = $1 AND commit_lsn = $2::text::pg_lsn`, slot, s); err != nil {
		return 0, 0, "", fmt.Errorf("removing a skip request the target has passed from %s.skip: %w", Schema, err)
	}
	return 0, lsn, "", nil
}
