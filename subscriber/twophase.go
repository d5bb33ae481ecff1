package subscriber

import (
	"context"
	"fmt"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/pgoutput"
	"github.com/parapply/parapply/subscriber/flow"
)

// Two-phase transactions (two_phase = on). A prepared transaction is
// applied alone on the reader's connection, after everything before it has
// committed, and ends with PREPARE TRANSACTION under a gid of parapply's
// own; COMMIT PREPARED or ROLLBACK PREPARED follow when the publisher sends
// them. The progress row moves at COMMIT PREPARED (a prepared transaction
// holding its lock would stall every later commit); a PREPARE the publisher
// sends again after a restart is recognized by its gid in
// pg_prepared_xacts.

// preparedGID names a source transaction's prepared transaction on the
// target.
func (l *loop) preparedGID(xid parapply.XID) string {
	return fmt.Sprintf("parapply_%s_%d", l.s.cfg.Source.Slot, xid)
}

func (l *loop) beginPrepare(ctx context.Context, txn flow.Txn) error {
	if err := l.commitTaken(ctx); err != nil {
		return err
	}
	skip := l.core.Applied(txn.CommitLSN)
	if !skip {
		// Prepared before a restart?
		err := l.app.Conn().QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_prepared_xacts WHERE gid = $1)", l.preparedGID(txn.XID)).Scan(&skip)
		if err != nil {
			return fmt.Errorf("reading pg_prepared_xacts on the target: %w", err)
		}
	}
	// The prepared transaction is the reader's own, with workers or not.
	l.held, l.sink = l.sink, l.reader
	if err := l.core.BeginPrepared(txn, skip); err != nil || skip {
		return err
	}
	l.sink.begin(apply.Txn(txn))
	return nil
}

func (l *loop) prepare(ctx context.Context, xid parapply.XID, end parapply.LSN) error {
	skipped := l.core.Prepare()
	if l.held != nil {
		l.sink, l.held = l.held, nil
	}
	if skipped {
		l.tracker.Reached(end)
		return nil
	}
	l.app.End(end)
	c, err := l.app.PrepareTransaction(ctx, l.preparedGID(xid))
	if err != nil {
		return err
	}
	record(l.tracker, c)
	return nil
}

// streamPrepare prepares a streamed transaction: it is applied from its
// spill file (what was applied in flight is rolled back) and prepared.
func (l *loop) streamPrepare(ctx context.Context, m *pgoutput.Prepare) error {
	st := l.streams[m.XID]
	txn := flow.Txn{XID: m.XID, CommitLSN: m.PrepareLSN, CommitTime: m.PrepareTime}
	if st != nil {
		txn.Origin = st.Origin
	}
	if err := l.beginPrepare(ctx, txn); err != nil {
		return err
	}
	if st != nil {
		defer l.dropStream(m.XID, st)
		if f := st.inflight; f != nil {
			st.inflight = nil
			f.abort()
		}
		if !l.core.Skipping() {
			if err := l.replay(ctx, m.XID, st); err != nil {
				return err
			}
		}
	}
	return l.prepare(ctx, m.XID, m.EndLSN)
}

func (l *loop) finishPrepared(ctx context.Context, commit bool, txn flow.Txn, end parapply.LSN) error {
	if err := l.commitTaken(ctx); err != nil {
		return err
	}
	if !l.core.FinishPrepared(commit, txn.CommitLSN) {
		l.tracker.Reached(end)
		return nil
	}
	c, err := l.app.FinishPrepared(ctx, l.preparedGID(txn.XID), commit, apply.Txn(txn), end)
	if err != nil {
		return err
	}
	if !commit {
		l.tracker.Reached(end)
		return nil
	}
	record(l.tracker, c)
	return nil
}
