package subscriber

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/preflight/judge"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/targetdb"
)

// detection builds the run's conflict detection from the settings and
// what the target said of itself (td): whether commit timestamps are
// tracked there (without them *_origin_differs cannot be told, nor
// last/first_update_wins decided), the names of this slot's origins, and
// who wins a tie of commit times. It refuses per-table entries for tables
// not published, and policies that need commit timestamps where there are
// none.
func (s *Subscriber) detection(td targetdb.Detection, sourceID string, published []source.PublishedTable) (*apply.Detection, error) {
	rules := s.cfg.Conflicts
	var names []string
	for _, pt := range published {
		names = append(names, pt.Schema+"."+pt.Name)
	}
	for _, t := range rules.Tables() {
		if !slices.Contains(names, t) {
			return nil, fmt.Errorf("conflict_resolution names table %s, which the publication does not publish to this target; fix the name (schema.table) or remove the entry", t)
		}
	}
	refusal, warning := judge.CommitTimestamps(rules.NeedsCommitTimestamps(), td.CommitTimestamps)
	if refusal != nil {
		return nil, refusal
	}
	if warning != nil && !s.runs.warnedCommitTS.Swap(true) {
		// Info, not a warning: a one-way migration, whose target no one
		// else writes, has no such conflicts to detect.
		s.log.Info(warning.What, "fix", warning.Fix)
	}
	d := &apply.Detection{Rules: rules, CommitTimestamps: td.CommitTimestamps, OldReturning: td.OldReturning,
		OriginPattern: targetdb.OriginPattern(s.cfg.Source.Slot), Slot: s.cfg.Source.Slot, SkipCitus: !s.cfg.DetectConflictsAsked}
	// A tie of commit times goes to the side whose identity sorts last,
	// so that both ends of a bidirectional pair choose the same row.
	if td.IDErr != nil {
		s.log.Warn("cannot read the target's system identifier (pg_control_system): ties of commit times in last_update_wins and first_update_wins keep the local row", "error", td.IDErr)
	} else {
		d.RemoteWinsTies = strings.Compare(sourceID, td.ID) > 0
	}
	return d, nil
}

// skippable returns the source transaction on_error = skip_transaction is
// to skip for err (nil: none): err is no fault (cause ""), names one
// transaction, and is that transaction's own (not transient, not a
// conflict too large to resolve).
func (s *Subscriber) skippable(err error, cause string) *apply.TxnError {
	var ge *apply.GroupError
	var te *apply.TxnError
	if cause != "" || s.cfg.OnError != OnErrorSkip || errors.As(err, &ge) || !errors.As(err, &te) || apply.ConflictFound(err) || transient(err) {
		return nil
	}
	return te
}

// skipFailed records that the source transaction te names is to be skipped
// (on_error = skip_transaction), for the next run: it is logged, change by
// change, in parapply.conflicts, in the target transaction that records it
// done, so that a crash neither applies it nor logs it twice. A transaction
// that fails again once skipped (the log itself failed), one whose commit
// is not known yet, and a prepared one stop parapply.
func (s *Subscriber) skipFailed(ctx context.Context, te *apply.TxnError) error {
	lsn := te.Txn.CommitLSN
	if lsn == 0 {
		return fmt.Errorf("on_error = skip_transaction cannot skip source transaction %d: its commit LSN is not known yet", te.Txn.XID)
	}
	if lsn == s.runs.lastSkip {
		return fmt.Errorf("on_error = skip_transaction: source transaction %d (commit %s) failed again while being skipped", te.Txn.XID, lsn)
	}
	conn, err := pgx.Connect(ctx, s.cfg.Target.DSN)
	if err != nil {
		return fmt.Errorf("recording the skip of source transaction %d: %w", te.Txn.XID, err)
	}
	defer conn.Close(context.Background())
	if err := progress.SetSkip(ctx, conn, s.cfg.Source.Slot, lsn, te.Error()); err != nil {
		return fmt.Errorf("recording the skip of source transaction %d: %w", te.Txn.XID, err)
	}
	s.runs.lastSkip = lsn
	s.log.Warn("a source transaction could not be applied; skipping it (on_error = skip_transaction)", "xid", te.Txn.XID, "commit_lsn", lsn.String(), "error", te.Err)
	return nil
}

// transient reports an error that says nothing about the transaction
// itself (a deadlock, a serialization failure, a lock or resource limit,
// an administrator's command, a system error): on_error never skips a
// transaction for one of these; it stops, and a restart applies it.
func transient(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return true // not the server's refusal of a statement
	}
	switch pe.Code[:2] {
	case pgerrcode.TransactionRollback[:2], pgerrcode.InsufficientResources[:2], pgerrcode.OperatorIntervention[:2],
		pgerrcode.SystemError[:2], pgerrcode.InternalError[:2], pgerrcode.ConnectionException[:2]: // classes 40, 53, 57, 58, XX, 08
		return true
	}
	return pe.Code == pgerrcode.LockNotAvailable || pe.Code == pgerrcode.ObjectInUse
}

// logSkips tells what progress.Open found of the slot's skip requests:
// those the target has applied past (removed now) and those pending.
func (s *Subscriber) logSkips(o progress.Opened) {
	for _, p := range o.Passed {
		s.log.Info("a skip request is done with: the target has applied past it", "skip_lsn", p.String(), "applied_commit_lsn", o.Position.CommitLSN.String())
	}
	for _, r := range o.Skips {
		s.log.Info("a source transaction is to be skipped", "skip_lsn", r.LSN.String(), "error", r.Reason)
	}
}

// completeSkipHint puts the run's own skip command (cfg.Target.SkipCommand:
// parapply skip with the connection flags it was started with) in the
// hint of a conflict stop, which the target's parapply.conflict_error
// writes knowing only the slot: printed, it then runs as printed.
func (s *Subscriber) completeSkipHint(err error) {
	var pe *pgconn.PgError
	if s.cfg.Target.SkipCommand == "" || !errors.As(err, &pe) || pe.Code != targetdb.SQLStateConflictError {
		return
	}
	pe.Hint = strings.Replace(pe.Hint, "parapply skip --slot "+s.cfg.Source.Slot+" ", s.cfg.Target.SkipCommand+" ", 1)
}
