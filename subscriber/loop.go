package subscriber

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/pgoutput"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/spill"
	"github.com/parapply/parapply/subscriber/flow"
)

type loop struct {
	s       *Subscriber
	app     *apply.Applier
	tracker *progress.Tracker
	dec     pgoutput.Decoder
	// core decides what is applied, skipped, held and grouped (see
	// package flow); the loop does the I/O it answers.
	core     *flow.Core
	streams  map[parapply.XID]*stream
	spillDir string
	// rels holds the latest description of every relation, for appliers
	// that start mid-stream.
	rels map[uint32]*parapply.Relation
	// streamConns keeps target connections for streamed transactions
	// between them.
	streamConns streamConns
	// sink takes the transactions: reader, the stream reader's own
	// applier, or a poolSink, the workers. held is the sink set aside
	// while a transaction prepared for two-phase commit goes to reader
	// (see beginPrepare), or while a transaction holding DDL that the
	// workers were taking is the reader's (see ddlToReader).
	sink   sink
	reader *readerSink
	held   sink
	// With AutoWorkers: the pool once the tuner has opened it, and whether
	// the tuner wants it used (see retune).
	aupoolSink atomic.Pointer[pool]
	wantPool   atomic.Bool
	// backlog judges whether the run is behind the publisher (see
	// backlog.go); its verdict is in Subscriber.runs.caughtUp.
	backlog backlogJudge
	// refreshAt is when the publication's tables are next read for ones
	// that joined it (see joined.go); joinWarned, what was last said of
	// each that cannot be copied yet (said again only when it changes).
	refreshAt  time.Time
	joinWarned map[string]string
	// deferredLeft tells that what a schema copy of joined tables left
	// for after their copy failed, to run again (schemajoin.go).
	deferredLeft bool
	// listed holds the tables the last read of the publication listed,
	// and leaving the copied ones that left it since, to forget (see
	// left.go).
	listed  map[string]listedTable
	leaving map[string]leftTable
	// lastBegin is the commit time of the transaction whose changes the
	// loop takes (see noteTime).
	lastBegin time.Time
}

// group describes the source transactions taken but not yet committed (or,
// with workers, not yet handed over): whether there are any, whether one is
// still open, and their size and age.
func (l *loop) group() (open, inTxn bool, changes, bytes int, age time.Duration) {
	return l.sink.group(l.core.InTxn())
}

// quiet reports whether everything taken from the stream is committed; an
// error is that of a commit that failed.
func (l *loop) quiet() (bool, error) { return l.sink.quiet() }

func (l *loop) checkFlush(ctx context.Context) error {
	if open, _, _, _, _ := l.group(); open || !l.tracker.NeedsFlush() {
		return nil
	}
	if l.app.SyncCommit() {
		l.tracker.AllDurable()
		return nil
	}
	_, flushed, err := l.app.WALPositions(ctx)
	if err != nil {
		return err
	}
	l.tracker.Flushed(flushed)
	return nil
}

func (l *loop) frame(ctx context.Context, f source.Frame) error {
	if f.Data == nil {
		if err := l.beginHeld(ctx, nil); err != nil {
			return err
		}
		if l.core.InStream() {
			return nil
		}
		quiet, err := l.quiet()
		if quiet {
			l.tracker.Reached(f.WALStart)
			l.s.stats.quiet.Store(&quietMark{f.WALStart, f.ServerTime})
		}
		return err
	}
	if uint64(f.WALStart) > l.s.stats.received.Load() {
		l.s.stats.received.Store(uint64(f.WALStart))
	}
	if xid, ok := l.dec.PeekStreamedChange(f.Data); ok {
		// Stored as received; decoded when applied.
		return l.spillChange(ctx, l.streams[l.core.StreamXID()], xid, f)
	}
	m, err := l.dec.Decode(f.Data)
	if err != nil {
		return fmt.Errorf("decoding the stream at %s: %w", f.WALStart, err)
	}
	l.noteTime(m)
	if l.core.InStream() {
		return l.streamed(ctx, m, f)
	}
	return l.dispatch(ctx, m)
}

// noteTime keeps the commit (or prepare) time of the transaction whose
// changes follow, for the lag that backlog.go judges; none inside a
// streamed transaction, whose commit time comes at its end.
func (l *loop) noteTime(m pgoutput.Message) {
	switch m := m.(type) {
	case *pgoutput.Begin:
		l.lastBegin = m.CommitTime
	case *pgoutput.BeginPrepare:
		l.lastBegin = m.PrepareTime
	case *pgoutput.StreamStart:
		l.lastBegin = time.Time{}
	case *pgoutput.StreamCommit:
		l.lastBegin = m.CommitTime
	case *pgoutput.CommitPrepared:
		l.lastBegin = m.CommitTime
	case *pgoutput.LogicalMessage:
		if !m.Transactional {
			// Outside any transaction (a heartbeat, say): sent
			// as written, and no commit to measure from.
			l.lastBegin = time.Time{}
		}
	}
}

func (l *loop) dispatch(ctx context.Context, m pgoutput.Message) error {
	if o, ok := m.(*pgoutput.Origin); ok && l.core.Holding() != flow.HoldNone {
		return l.beginHeld(ctx, o)
	}
	if lm, ok := m.(*pgoutput.LogicalMessage); ok && l.core.Holding() == flow.HoldBegin && l.wantsDDL(lm) {
		if ran, err := l.ddlAlone(ctx, lm); ran || err != nil {
			return err
		}
	}
	if err := l.beginHeld(ctx, nil); err != nil {
		return err
	}
	switch m := m.(type) {
	case *pgoutput.Insert, *pgoutput.Update, *pgoutput.Delete, *pgoutput.Truncate:
		if !l.core.Change() {
			return nil
		}
		return l.sink.change(ctx, m)
	case *pgoutput.Begin:
		l.core.Hold(flow.HoldBegin, flow.Txn{XID: m.XID, CommitLSN: m.FinalLSN, CommitTime: m.CommitTime})
		return nil
	case *pgoutput.Commit:
		return l.commit(ctx, m.EndLSN)
	case *pgoutput.RelationMessage:
		rel := m.Relation
		if err := l.app.Relation(ctx, &rel); err != nil {
			return err
		}
		l.rels[rel.ID] = &rel
		l.sink.relation(&m.Relation, m)
		if l.held != nil {
			// Inside a prepared transaction: the workers still need
			// it for the transactions after it.
			l.held.relation(&m.Relation, nil)
		}
		return nil
	case *pgoutput.LogicalMessage:
		if l.core.InTxn() && l.wantsDDL(m) {
			return l.ddl(ctx, m)
		}
		// Other logical messages are informational for a subscriber.
		return nil
	case *pgoutput.Origin, *pgoutput.TypeMessage:
		// Origins are informational for a subscriber; types are
		// taken from the target's catalog.
		return nil
	}
	return l.dispatchEnds(ctx, m)
}

// dispatchEnds takes the messages of streamed and prepared transactions.
func (l *loop) dispatchEnds(ctx context.Context, m pgoutput.Message) error {
	switch m := m.(type) {
	case *pgoutput.StreamStart:
		l.core.StreamStart(m.XID)
		st := l.streams[m.XID]
		if st == nil {
			log, err := spill.Create(l.spillDir)
			if err != nil {
				return err
			}
			st = &stream{log: log, Stream: flow.NewStream()}
			l.streams[m.XID] = st
		}
		st.Settled = false
		return nil
	case *pgoutput.StreamCommit:
		return l.streamCommit(ctx, m)
	case *pgoutput.StreamAbort:
		l.streamAbort(m)
		return nil
	case *pgoutput.StreamStop:
		return nil
	case *pgoutput.BeginPrepare:
		l.core.Hold(flow.HoldPrepare, flow.Txn{XID: m.XID, CommitLSN: m.PrepareLSN, CommitTime: m.PrepareTime})
		return nil
	case *pgoutput.Prepare:
		return l.prepare(ctx, m.XID, m.EndLSN)
	case *pgoutput.StreamPrepare:
		return l.streamPrepare(ctx, (*pgoutput.Prepare)(m))
	case *pgoutput.CommitPrepared:
		return l.finishPrepared(ctx, true, flow.Txn{XID: m.XID, CommitLSN: m.CommitLSN, CommitTime: m.CommitTime}, m.EndLSN)
	case *pgoutput.RollbackPrepared:
		return l.finishPrepared(ctx, false, flow.Txn{XID: m.XID, CommitLSN: m.PrepareEndLSN, CommitTime: m.RollbackTime}, m.RollbackEndLSN)
	default:
		return fmt.Errorf("unexpected %T message (protocol error)", m)
	}
}

// beginHeld begins the transaction whose BEGIN is held, if any, with the
// origin o names (nil: made on the publisher).
func (l *loop) beginHeld(ctx context.Context, o *pgoutput.Origin) error {
	if l.core.Holding() == flow.HoldNone {
		return nil
	}
	origin := ""
	if o != nil {
		origin = o.Name
	}
	txn, h := l.core.Release(origin)
	if h == flow.HoldPrepare {
		return l.beginPrepare(ctx, txn)
	}
	// Between groups, now and then: what the reader's applier knows of
	// the target's tables (it applies, or keys the workers' units) is
	// compared with the target's catalog.
	if err := l.app.RefreshIfDue(ctx); err != nil {
		return err
	}
	return l.begin(txn)
}

// begin opens a source transaction as the core decides: skipped (the
// target has it) or taken by the sink, marked as a skip request asks.
func (l *loop) begin(txn flow.Txn) error {
	txn, skip, err := l.core.Begin(txn)
	l.noted()
	if err != nil || skip {
		return err
	}
	l.sink.begin(apply.Txn(txn))
	return nil
}

// noted logs (and counts) what the core decided of skip requests.
func (l *loop) noted() {
	for _, n := range l.core.Notes() {
		t := n.Txn
		switch n.Kind {
		case flow.NoteSkipMissed:
			l.s.log.Warn("no source transaction committed at an LSN parapply skip named; nothing was skipped there (a prepared transaction cannot be skipped)", "skip_lsn", n.Skip.String(), "next_commit_lsn", t.CommitLSN.String())
		case flow.NoteSkipDDL:
			l.s.log.Warn("skipping the DDL statements of a source transaction, as parapply skip --ddl asked: its row changes are applied", "xid", t.XID, "commit_lsn", t.CommitLSN.String())
		case flow.NoteSkippedFailed:
			l.s.countSkip(t.CommitLSN)
			l.s.log.Warn("skipping a source transaction that failed (on_error = skip_transaction): none of its changes are applied; each is logged in parapply.conflicts", "xid", t.XID, "commit_lsn", t.CommitLSN.String(), "error", t.Failed)
		case flow.NoteSkipped:
			l.s.countSkip(t.CommitLSN)
			l.s.log.Warn("skipping a source transaction, as parapply skip asked: none of its changes are applied", "xid", t.XID, "commit_lsn", t.CommitLSN.String())
		}
	}
}

func (l *loop) commit(ctx context.Context, end parapply.LSN) error {
	if err := l.commitTxn(ctx, end); err != nil || !l.core.PastOneByOne() {
		return err
	}
	if err := l.commitTaken(ctx); err != nil {
		return err
	}
	l.s.runs.oneByOne.Store(0)
	l.s.log.Info("applied past the failed group one transaction at a time; grouping again", "commit_lsn", l.core.Txn().CommitLSN.String())
	return errOneByOneDone
}

// commitTxn ends the source transaction: skipped, or taken by the sink and
// committed with its group when the group is full.
func (l *loop) commitTxn(ctx context.Context, end parapply.LSN) error {
	step := l.core.Commit()
	if step == flow.EndSkipped {
		if quiet, err := l.quiet(); err != nil {
			return err
		} else if !quiet {
			// Not expected (skipped transactions precede applied ones), but
			// the tracker must never pass an uncommitted group.
			if open, _, _, _, _ := l.group(); open {
				if err := l.commitGroup(ctx); err != nil {
					return err
				}
			}
			if err := l.sink.drain(); err != nil {
				return err
			}
		}
		l.tracker.Reached(end)
		return nil
	}
	l.sink.end(apply.Txn(l.core.Txn()), end)
	switch step {
	case flow.EndDDLBack:
		return l.ddlBack(ctx)
	case flow.EndCommitGroup:
		return l.commitGroup(ctx)
	}
	_, _, changes, bytes, age := l.group()
	if l.core.Full(changes, bytes, age, l.sink.maxChanges(l.core.Limits().MaxChanges)) {
		return l.commitGroup(ctx)
	}
	return nil
}

// commitGroup commits the source transactions taken so far as one target
// transaction: itself, or with workers by handing them over as one unit.
func (l *loop) commitGroup(ctx context.Context) error { return l.sink.commitGroup(ctx) }

// commitTaken commits everything taken from the stream so far (with
// workers: hands it over and waits until it is committed), before the loop
// changes how it applies or must know everything before a point applied.
func (l *loop) commitTaken(ctx context.Context) error {
	if open, inTxn, _, _, _ := l.group(); open && !inTxn {
		if err := l.commitGroup(ctx); err != nil {
			return err
		}
	}
	return l.sink.drain()
}
