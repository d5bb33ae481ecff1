package progress

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/targetdb"
)

// Skipping source transactions, as ALTER SUBSCRIPTION ... SKIP does: a DBA
// names a commit LSN (the one an error names) with parapply skip, and each
// request is a row of parapply.skip, one per slot and commit LSN, so that a
// second request adds to the first instead of replacing it (two failing
// transactions applied in one group are named one after the other). Each run
// reads the pending ones (ReadSkips) and lets each such transaction pass
// without applying any of its changes, as an empty transaction of a group:
// the target transaction that commits the group marks the request skipped
// (SkipDone) and moves the progress row past it, together, so that a crash
// neither loses the skip nor makes it again. A request the progress row has
// passed is removed at the next start; the transaction is never sent again:
// skipped exactly once.

// ErrNoSlot is returned by SetSkip for a slot the target has no progress
// row of.
var ErrNoSlot = errors.New("no progress recorded for this slot on the target")

// SetSkip asks the runs of slot to skip the source transaction that
// committed at lsn, adding to the requests already there; reason, when set,
// is the error that transaction met (on_error = skip_transaction), and its
// changes are then logged in parapply.conflicts as it is skipped. It
// refuses a transaction the target has already applied (the progress row is
// at or past it, or it was committed ahead of order).
func SetSkip(ctx context.Context, conn *pgx.Conn, slot string, lsn parapply.LSN, reason string) error {
	p, _, found, err := readRow(ctx, conn, slot)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == pgerrcode.UndefinedTable {
		found, err = false, nil // no parapply.progress: parapply never ran here
	}
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("slot %s: %w (is --slot the one parapply run uses, and --target its target?)", slot, ErrNoSlot)
	}
	// A target last run by an older parapply may lack parapply.skip, or
	// have the form that held one request per slot.
	if err := targetdb.Migrate(ctx, conn); err != nil {
		return err
	}
	if done, err := Applied(ctx, conn, slot, lsn); err != nil {
		return err
	} else if done {
		return fmt.Errorf("the target has applied slot %s's transactions up to the one committed at %s: the transaction at %s is applied already", slot, p.CommitLSN, lsn)
	}
	_, err = conn.Exec(ctx, `INSERT INTO parapply.skip (slot_name, commit_lsn, reason) VALUES ($1, $2::text::pg_lsn, nullif($3, ''))
		ON CONFLICT (slot_name, commit_lsn) DO UPDATE SET requested_at = now(), reason = coalesce(excluded.reason, parapply.skip.reason)`, slot, lsn.String(), reason)
	if err != nil {
		return fmt.Errorf("recording the skip in %s.skip: %w", Schema, err)
	}
	return nil
}

// SkipDDL is the reason of a request made by parapply skip --ddl: only the
// DDL statements of the transaction are skipped (the DBA ran them, or
// their fix, on the target), its row changes are applied.
const SkipDDL = "parapply skip --ddl: its DDL only"

// SkipRequest is a pending request of parapply.skip: the commit LSN of the
// source transaction to skip, and the error it met when on_error asked
// ("" when parapply skip did).
type SkipRequest struct {
	LSN    parapply.LSN
	Reason string
}

// ReadSkips returns slot's pending skip requests (not yet skipped), in
// commit order. Requests the progress row (at applied) has passed are done
// with and removed: their LSNs are returned as passed.
func ReadSkips(ctx context.Context, conn *pgx.Conn, slot string, applied parapply.LSN) (pending []SkipRequest, passed []parapply.LSN, err error) {
	rows, err := conn.Query(ctx, `DELETE FROM parapply.skip WHERE slot_name = $1 AND commit_lsn <= $2::text::pg_lsn RETURNING commit_lsn::text`, slot, applied.String())
	if err != nil {
		return nil, nil, fmt.Errorf("removing the skip requests the target has passed from %s.skip: %w", Schema, err)
	}
	if passed, err = scanLSNs(rows); err != nil {
		return nil, nil, fmt.Errorf("removing the skip requests the target has passed from %s.skip: %w", Schema, err)
	}
	rows, err = conn.Query(ctx, `SELECT commit_lsn::text, coalesce(reason, '') FROM parapply.skip WHERE slot_name = $1 AND skipped_at IS NULL ORDER BY commit_lsn`, slot)
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s.skip: %w", Schema, err)
	}
	defer rows.Close()
	for rows.Next() {
		var s, reason string
		if err := rows.Scan(&s, &reason); err != nil {
			return nil, nil, fmt.Errorf("reading %s.skip: %w", Schema, err)
		}
		lsn, err := parapply.ParseLSN(s)
		if err != nil {
			return nil, nil, err
		}
		pending = append(pending, SkipRequest{LSN: lsn, Reason: reason})
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("reading %s.skip: %w", Schema, err)
	}
	return pending, passed, nil
}

// scanLSNs reads a column of LSNs as text.
func scanLSNs(rows pgx.Rows) ([]parapply.LSN, error) {
	defer rows.Close()
	var out []parapply.LSN
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		lsn, err := parapply.ParseLSN(s)
		if err != nil {
			return nil, err
		}
		out = append(out, lsn)
	}
	return out, rows.Err()
}

// SkipDone marks the skip requests of the source transactions committed at
// lsns as done; it runs inside the target transaction that passes them, so
// the mark and the progress row move together.
func SkipDone(slot string, lsns []parapply.LSN) Statement {
	s := make([]string, len(lsns))
	for i, l := range lsns {
		s[i] = l.String()
	}
	return Statement{skipDoneSQL, []any{slot, s}}
}

// Parameters: slot, commit LSNs (text[]).
const skipDoneSQL = `UPDATE parapply.skip SET skipped_at = now() WHERE slot_name = $1 AND commit_lsn = ANY ($2::text[]::pg_lsn[]) AND skipped_at IS NULL`

// SkipListed is a skip request as parapply skip --list shows it.
type SkipListed struct {
	LSN         parapply.LSN
	RequestedAt time.Time
	// Reason is the error the transaction met when on_error asked.
	Reason string
	// SkippedAt is when the transaction was skipped (zero: not yet).
	SkippedAt time.Time
	// Passed: the target has applied past the request (the next start
	// removes it); one passed but never skipped named no transaction.
	Passed bool
}

// ListSkips returns slot's skip requests in commit order, without creating
// or changing anything (none on a target parapply never ran on).
func ListSkips(ctx context.Context, conn *pgx.Conn, slot string) ([]SkipListed, error) {
	// A table left by an older release may lack skipped_at (until the
	// next start), and an older one still parapply.applied.
	var exists, hasApplied, hasSkipped bool
	err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass('parapply.skip') IS NOT NULL AND pg_catalog.to_regclass('parapply.progress') IS NOT NULL,
		pg_catalog.to_regclass('parapply.applied') IS NOT NULL,
		EXISTS (SELECT FROM pg_catalog.pg_attribute WHERE attrelid = pg_catalog.to_regclass('parapply.skip') AND attname = 'skipped_at' AND NOT attisdropped)`).Scan(&exists, &hasApplied, &hasSkipped)
	if err != nil || !exists {
		return nil, err
	}
	skipped, ahead := "NULL::timestamptz", "false"
	if hasSkipped {
		skipped = "s.skipped_at"
	}
	if hasApplied {
		ahead = "EXISTS (SELECT FROM parapply.applied a WHERE a.slot_name = s.slot_name AND s.commit_lsn BETWEEN a.commit_lsn AND a.last_commit_lsn)"
	}
	rows, err := conn.Query(ctx, `SELECT s.commit_lsn::text, s.requested_at, coalesce(s.reason, ''), `+skipped+`, coalesce(p.commit_lsn >= s.commit_lsn, false) OR `+ahead+`
		FROM parapply.skip s LEFT JOIN parapply.progress p ON p.slot_name = s.slot_name
		WHERE s.slot_name = $1 ORDER BY s.commit_lsn`, slot)
	if err != nil {
		return nil, fmt.Errorf("reading %s.skip: %w", Schema, err)
	}
	defer rows.Close()
	var out []SkipListed
	for rows.Next() {
		var r SkipListed
		var s string
		var at *time.Time
		if err := rows.Scan(&s, &r.RequestedAt, &r.Reason, &at, &r.Passed); err != nil {
			return nil, fmt.Errorf("reading %s.skip: %w", Schema, err)
		}
		if r.LSN, err = parapply.ParseLSN(s); err != nil {
			return nil, err
		}
		if at != nil {
			r.SkippedAt = *at
		}
		out = append(out, r)
	}
	return out, rows.Err()
}
