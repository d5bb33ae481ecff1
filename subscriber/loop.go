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
)

type loop struct {
	s         *Subscriber
	app       *apply.Applier
	tracker   *progress.Tracker
	dec       pgoutput.Decoder
	skipBelow parapply.LSN // commit LSN of the last transaction already applied
	// ahead are transactions past skipBelow applied before a restart
	// (commit_order = dependency), by commit LSN, in order.
	ahead    []progress.Range
	skipping bool
	// skips are the pending requests of parapply.skip, in commit order
	// (a request's Reason, set by on_error, has the transaction's changes
	// logged instead of dropped: see apply.Txn.Failed); skipSeen is the
	// commit LSN of the last one met, logged and counted once.
	skips    []progress.SkipRequest
	skipSeen parapply.LSN
	// oneByOne, when not zero, is the last commit LSN of a group that failed
	// as one: until it is passed, each source transaction is committed
	// alone, so that an error names exactly one.
	oneByOne  parapply.LSN
	txn       apply.Txn
	streams   map[parapply.XID]*stream
	streamXID parapply.XID
	inStream  bool
	inTxn     bool
	// begun is a transaction whose BEGIN arrived, held until the next
	// message: an Origin message there names where the publisher got it;
	// holding says what holds it: 'B' a BEGIN, 'P' a BEGIN PREPARE, 0 none.
	// (A value, not a pointer: no allocation per source transaction.)
	begun    apply.Txn
	holding  byte
	spillDir string
	// rels holds the latest description of every relation, for appliers
	// that start mid-stream.
	rels map[uint32]*parapply.Relation
	// streamConns keeps target connections for streamed transactions
	// between them.
	streamConns streamConns
	limits      GroupLimits
	// sink takes the transactions: reader, the stream reader's own
	// applier, or a poolSink, the workers. held is the sink set aside
	// while a transaction prepared for two-phase commit goes to reader
	// (see beginPrepare).
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
	// ddlMoved is set while a transaction holding DDL that the workers
	// were taking is the reader's (see ddlToReader); held is then the
	// pool's sink.
	ddlMoved bool
	// ddlRan is set while the open source transaction ran DDL on the
	// target: its group commits with it, since what the DDL made (an
	// enum's new label, above all) may not be used in the transaction
	// that made it.
	ddlRan bool
	// refreshAt is when the publication's tables are next read for ones
	// that joined it (see joined.go); joinWarned, what was last said of
	// each that cannot be copied yet (said again only when it changes).
	refreshAt  time.Time
	joinWarned map[string]string
	// lastBegin is the commit time of the transaction whose changes the
	// loop takes (see noteTime).
	lastBegin time.Time
}

// group describes the source transactions taken but not yet committed (or,
// with workers, not yet handed over): whether there are any, whether one is
// still open, and their size and age.
func (l *loop) group() (open, inTxn bool, changes, bytes int, age time.Duration) {
	return l.sink.group(l.inTxn)
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
		if l.inStream {
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
		return l.spillChange(ctx, l.streams[l.streamXID], xid, f)
	}
	m, err := l.dec.Decode(f.Data)
	if err != nil {
		return fmt.Errorf("decoding the stream at %s: %w", f.WALStart, err)
	}
	l.noteTime(m)
	if l.inStream {
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
	if o, ok := m.(*pgoutput.Origin); ok && l.holding != 0 {
		return l.beginHeld(ctx, o)
	}
	if lm, ok := m.(*pgoutput.LogicalMessage); ok && l.holding == 'B' && l.wantsDDL(lm) {
		if ran, err := l.ddlAlone(ctx, lm); ran || err != nil {
			return err
		}
	}
	if err := l.beginHeld(ctx, nil); err != nil {
		return err
	}
	switch m := m.(type) {
	case *pgoutput.Begin:
		l.begun, l.holding = apply.Txn{XID: m.XID, CommitLSN: m.FinalLSN, CommitTime: m.CommitTime}, 'B'
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
	case *pgoutput.Insert, *pgoutput.Update, *pgoutput.Delete, *pgoutput.Truncate:
		if l.skipping || l.txn.Skip {
			return nil
		}
		return l.sink.change(ctx, m)
	case *pgoutput.LogicalMessage:
		if l.inTxn && l.wantsDDL(m) {
			return l.ddl(ctx, m)
		}
		// Other logical messages are informational for a subscriber.
		return nil
	case *pgoutput.Origin, *pgoutput.TypeMessage:
		// Origins are informational for a subscriber; types are
		// taken from the target's catalog.
		return nil
	case *pgoutput.StreamStart:
		l.inStream, l.streamXID = true, m.XID
		st := l.streams[m.XID]
		if st == nil {
			log, err := spill.Create(l.spillDir)
			if err != nil {
				return err
			}
			st = &stream{log: log, first: map[parapply.XID]int64{}}
			l.streams[m.XID] = st
		}
		st.settled = false
		return nil
	case *pgoutput.StreamCommit:
		return l.streamCommit(ctx, m)
	case *pgoutput.StreamAbort:
		l.streamAbort(m)
		return nil
	case *pgoutput.StreamStop:
		return nil
	case *pgoutput.BeginPrepare:
		l.begun, l.holding = apply.Txn{XID: m.XID, CommitLSN: m.PrepareLSN, CommitTime: m.PrepareTime}, 'P'
		return nil
	case *pgoutput.Prepare:
		return l.prepare(ctx, m.XID, m.EndLSN)
	case *pgoutput.StreamPrepare:
		return l.streamPrepare(ctx, (*pgoutput.Prepare)(m))
	case *pgoutput.CommitPrepared:
		return l.finishPrepared(ctx, true, apply.Txn{XID: m.XID, CommitLSN: m.CommitLSN, CommitTime: m.CommitTime}, m.EndLSN)
	case *pgoutput.RollbackPrepared:
		return l.finishPrepared(ctx, false, apply.Txn{XID: m.XID, CommitLSN: m.PrepareEndLSN, CommitTime: m.RollbackTime}, m.RollbackEndLSN)
	default:
		return fmt.Errorf("unexpected %T message (protocol error)", m)
	}
}

// applied reports whether the transaction committed at commitLSN was
// applied before this run started. Transactions arrive in commit order, so
// ranges behind it are dropped as it goes.
func (l *loop) applied(commitLSN parapply.LSN) bool {
	if commitLSN <= l.skipBelow {
		return true
	}
	for len(l.ahead) > 0 && l.ahead[0].Last < commitLSN {
		l.ahead = l.ahead[1:]
	}
	return len(l.ahead) > 0 && l.ahead[0].First <= commitLSN
}

// beginHeld begins the transaction whose BEGIN is held, if any, with the
// origin o names (nil: made on the publisher).
func (l *loop) beginHeld(ctx context.Context, o *pgoutput.Origin) error {
	if l.holding == 0 {
		return nil
	}
	txn, prepared := l.begun, l.holding == 'P'
	l.holding = 0
	if o != nil {
		txn.Origin = o.Name
	}
	if prepared {
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

func (l *loop) begin(txn apply.Txn) error {
	if l.applied(txn.CommitLSN) {
		return l.start(txn, true)
	}
	l.skipAsked(&txn)
	return l.start(txn, false)
}

// skipAsked reports whether txn is a transaction parapply skip named, and
// marks it so (apply.Txn.Skip): it is then taken by the sink as an empty
// transaction, none of its changes applied, and the target transaction
// that commits it marks the request done (a group that fails takes the
// mark with it, and the next try skips it again). A request that no
// transaction matched (the stream passed its LSN) is dropped with a
// warning; the next start removes it from the target. It may be asked
// again about the same transaction.
//
// A transaction on_error skips is marked Failed instead (and false
// returned): its changes are logged in place of being applied.
func (l *loop) skipAsked(txn *apply.Txn) bool {
	for len(l.skips) > 0 && l.skips[0].LSN < txn.CommitLSN {
		if l.skips[0].LSN != l.skipSeen {
			l.s.log.Warn("no source transaction committed at an LSN parapply skip named; nothing was skipped there (a prepared transaction cannot be skipped)", "skip_lsn", l.skips[0].LSN.String(), "next_commit_lsn", txn.CommitLSN.String())
		}
		l.skips = l.skips[1:]
	}
	if len(l.skips) == 0 || l.skips[0].LSN != txn.CommitLSN {
		return false
	}
	reason := l.skips[0].Reason
	if reason == progress.SkipDDL {
		if l.skipSeen != txn.CommitLSN {
			l.skipSeen = txn.CommitLSN
			l.s.log.Warn("skipping the DDL statements of a source transaction, as parapply skip --ddl asked: its row changes are applied", "xid", txn.XID, "commit_lsn", txn.CommitLSN.String())
		}
		txn.SkipDDL = true
		return false
	}
	if l.skipSeen != txn.CommitLSN {
		l.skipSeen = txn.CommitLSN
		l.s.countSkip(txn.CommitLSN)
		if reason != "" {
			l.s.log.Warn("skipping a source transaction that failed (on_error = skip_transaction): none of its changes are applied; each is logged in parapply.conflicts", "xid", txn.XID, "commit_lsn", txn.CommitLSN.String(), "error", reason)
		} else {
			l.s.log.Warn("skipping a source transaction, as parapply skip asked: none of its changes are applied", "xid", txn.XID, "commit_lsn", txn.CommitLSN.String())
		}
	}
	if reason != "" {
		txn.Failed = reason
		return false
	}
	txn.Skip = true
	return true
}

// start opens a source transaction, to be skipped (the target has it) or
// taken by the sink.
func (l *loop) start(txn apply.Txn, skip bool) error {
	if l.inTxn {
		return fmt.Errorf("BEGIN of transaction %d inside transaction %d (protocol error)", txn.XID, l.txn.XID)
	}
	l.txn, l.inTxn = txn, true
	l.skipping = skip
	if !skip {
		l.sink.begin(txn)
	}
	return nil
}

func (l *loop) commit(ctx context.Context, end parapply.LSN) error {
	if err := l.commitTxn(ctx, end); err != nil || l.oneByOne == 0 || l.txn.CommitLSN < l.oneByOne {
		return err
	}
	if err := l.commitTaken(ctx); err != nil {
		return err
	}
	l.s.runs.oneByOne.Store(0)
	l.s.log.Info("applied past the failed group one transaction at a time; grouping again", "commit_lsn", l.txn.CommitLSN.String())
	return errOneByOneDone
}

// commitTxn ends the source transaction: skipped, or taken by the sink and
// committed with its group when the group is full.
func (l *loop) commitTxn(ctx context.Context, end parapply.LSN) error {
	l.inTxn = false
	if l.skipping {
		l.skipping = false
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
	l.sink.end(l.txn, end)
	if l.ddlMoved {
		l.ddlRan = false
		return l.ddlBack(ctx)
	}
	if l.ddlRan {
		l.ddlRan = false
		return l.commitGroup(ctx)
	}
	_, _, changes, bytes, age := l.group()
	maxChanges := l.sink.maxChanges(l.limits.MaxChanges)
	if maxChanges <= 1 || l.oneByOne != 0 || changes >= maxChanges || bytes >= l.limits.MaxBytes || age >= l.limits.MaxDelay {
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
