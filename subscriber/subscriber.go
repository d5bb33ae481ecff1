// Package subscriber wires the stream reader, the decoder and the applier
// into the loop that keeps a target in step with a publisher, and owns their
// goroutines and shutdown.
package subscriber

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/pgoutput"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/schedule"
	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/spill"
	"github.com/parapply/parapply/tablesync"
)

// Config is everything a subscriber needs.
type Config struct {
	Source source.Config
	Target apply.Config
	Log    *slog.Logger
	// CopyData copies the rows published tables already hold before
	// streaming their changes (tables parapply has not synced before);
	// without it, tables are taken as already in sync.
	CopyData bool
	// CopyWorkers is the number of connection pairs the copy uses.
	CopyWorkers int
	// ExistingData is the policy for target tables that already hold rows
	// when they are to be copied (tablesync.Existing*).
	ExistingData string
	// CopyDeferIndexes builds the indexes of empty target tables after
	// their copy instead of during it.
	CopyDeferIndexes bool
	// CopyProgress, if set, receives copy progress every two seconds.
	CopyProgress func(tablesync.Progress)
	// Group bounds transaction grouping.
	Group GroupLimits
	// Workers is the number of target connections applying transactions
	// in parallel; 0 applies them on the stream reader's own connection.
	Workers int
	// AutoWorkers applies on the stream reader's connection while that is
	// fastest, and on Workers workers while the target sessions wait on
	// data reads (see tune.go); the choice is made again as the load
	// changes.
	AutoWorkers bool
	// AutoSwitchEvery, with AutoWorkers, switches between the two every
	// so often whatever the load: for tests of the switch itself.
	AutoSwitchEvery time.Duration
	// StreamWorkers bounds the streamed transactions applied as they
	// arrive, each on a target connection of its own; others are applied
	// at their commit. 0 applies every streamed transaction at its commit.
	StreamWorkers int
	// SpillDir holds streamed transactions' spill files ("": the system's
	// temporary directory).
	SpillDir string
	// CommitOrder is CommitPreserve ("" too) or CommitDependency.
	CommitOrder string
	// ReconnectTimeout is how long faults are ridden out (see Run); 0
	// stops at the first.
	ReconnectTimeout time.Duration
	// Sequences says which publisher sequences are brought to the target
	// (sequences.None, Owned or All): after the copy, and every
	// SequenceSyncInterval while streaming (0: only after the copy).
	Sequences            string
	SequenceSyncInterval time.Duration
}

// Commit orders: with workers, a transaction commits after every earlier
// one (preserve), or as soon as those it depends on have (dependency).
const (
	CommitPreserve   = "preserve"
	CommitDependency = "dependency"
)

// GroupLimits bound a group: consecutive source transactions applied as one
// target transaction. A group is committed when the stream has nothing more
// waiting, or when one of the limits is reached at a source commit.
type GroupLimits struct {
	// MaxChanges: a group that reached this many row changes is committed
	// (1 turns grouping off).
	MaxChanges int
	// MaxBytes: likewise for the bytes of values.
	MaxBytes int
	// MaxDelay: a group open this long is committed at the next source
	// commit, even while more data is waiting.
	MaxDelay time.Duration
}

// Defaults for GroupLimits.
const (
	DefaultGroupMaxChanges = 20000
	DefaultGroupMaxBytes   = 16 << 20
	DefaultGroupMaxDelay   = 200 * time.Millisecond
)

// Subscriber applies one slot's stream to one target.
type Subscriber struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	tracker *progress.Tracker
	applier *apply.Applier
	pool    *pool

	received  atomic.Uint64
	ready     chan struct{}
	readyOnce sync.Once

	// Across runs: when the current run began streaming (Unix ns, 0 if it
	// has not), faults ridden out by cause (the order of FaultCauses),
	// whether the next run applies streamed transactions at their commit
	// only (after a lock stall), the pids of the target sessions of the
	// current and the previous run, and the figures of earlier runs.
	streamedSince  atomic.Int64
	everStreamed   atomic.Bool
	reconnects     [len(FaultCauses)]atomic.Int64
	atCommitOnly   atomic.Bool
	sessions       []uint32
	streamSessions []uint32
	earlier        []uint32
	past           apply.Stats

	// The last sequence sync's summary and error, and the sequences
	// warned about (missing on the target, unreadable on the publisher);
	// seqMu makes syncs one at a time (a run's last may overlap the next
	// run's first).
	seqMu      sync.Mutex
	seqSummary atomic.Pointer[sequences.Summary]
	seqErr     atomic.Pointer[string]
	seqWarned  map[string]bool

	// For Status: the stream, the state, when Run started, per-table
	// tallies, commit delays, bytes of streamed transactions held, and
	// the last copy progress.
	src         atomic.Pointer[source.Source]
	state       atomic.Value // string
	started     time.Time
	tallies     *apply.Tallies
	delays      *Histogram
	streamBytes atomic.Int64
	copied      atomic.Pointer[tablesync.Progress]
	// syncStandby is true while the publisher names parapply in
	// synchronous_standby_names (see watchSyncStandby).
	syncStandby atomic.Bool
	// Streamed transactions: bytes written to spill files, appliers in
	// flight, and how many were applied in flight and at their commit.
	spilled                            atomic.Int64
	inflight                           atomic.Int64
	streamedInFlight, streamedAtCommit atomic.Int64
	// With AutoWorkers: the workers applying now (0: the stream reader),
	// the switches made, and the last read-wait share judged (float64
	// bits; see tune.go).
	activeWorkers  atomic.Int32
	workerSwitches atomic.Int64
	readShare      atomic.Uint64
}

// New returns a subscriber; Run starts it.
func New(cfg Config) *Subscriber {
	if cfg.Group.MaxChanges <= 0 {
		cfg.Group.MaxChanges = DefaultGroupMaxChanges
	}
	if cfg.Group.MaxBytes <= 0 {
		cfg.Group.MaxBytes = DefaultGroupMaxBytes
	}
	if cfg.Group.MaxDelay <= 0 {
		cfg.Group.MaxDelay = DefaultGroupMaxDelay
	}
	l := cfg.Log
	if l == nil {
		l = slog.Default()
	}
	sub := &Subscriber{cfg: cfg, log: l, ready: make(chan struct{}), seqWarned: map[string]bool{}, tallies: apply.NewTallies(), delays: NewHistogram(DelayBuckets)}
	sub.cfg.Target.Tallies = sub.tallies
	sub.cfg.Target.SyncStandby = &sub.syncStandby
	sub.cfg.Source.Prompt = &sub.syncStandby
	sub.state.Store(StateStarting)
	return sub
}

// targetName is the application_name that the target sessions other than
// the reader's own (workers, streams, status) are named after.
func (s *Subscriber) targetName() string {
	if s.cfg.Target.AppName == "" {
		return "parapply"
	}
	return strings.TrimSuffix(s.cfg.Target.AppName, " apply")
}

// Ready is closed once the subscriber is streaming.
func (s *Subscriber) Ready() <-chan struct{} { return s.ready }

// Run connects, checks the setup, and applies the stream until ctx ends
// (returning nil) or an error stops it. A fault (a lost connection, a
// server restart, the slot still held by a dying walsender, a lock wait
// past lock_timeout) ends the run and starts a new one from what the
// target recorded, again and again until ReconnectTimeout passes without a
// run that streamed for a while; other errors stop it at once.
func (s *Subscriber) Run(ctx context.Context) (err error) {
	s.mu.Lock()
	s.started = time.Now()
	s.mu.Unlock()
	defer func() {
		if err != nil {
			s.state.Store(StateFailed)
		} else {
			s.state.Store(StateStopped)
		}
	}()
	var faultSince time.Time
	for try := 1; ; try++ {
		began := time.Now()
		err := s.run(ctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		cause := faultCause(err)
		if cause == "" || s.cfg.ReconnectTimeout <= 0 {
			return err
		}
		limit := s.cfg.ReconnectTimeout
		if !s.everStreamed.Load() {
			// A first start that cannot reach a server is a setup
			// mistake, said at once; only a slot still held by the
			// walsender of a subscriber that just died is waited for.
			if cause != FaultSlotBusy {
				return err
			}
			limit = min(limit, firstStartSlotWait)
		}
		if since := s.streamedSince.Load(); since != 0 && time.Since(time.Unix(0, since)) >= steadyRun {
			// The run streamed long enough: this fault starts a new window.
			faultSince, try = time.Time{}, 1
		}
		if faultSince.IsZero() {
			faultSince = began
		}
		if time.Since(faultSince) >= limit {
			if limit < s.cfg.ReconnectTimeout {
				return fmt.Errorf("%w (still so after %s)", err, limit)
			}
			return fmt.Errorf("%w (gave up after reconnect_timeout %s of faults)", err, limit)
		}
		s.reconnects[slices.Index(FaultCauses[:], cause)].Add(1)
		s.atCommitOnly.Store(cause == FaultLockWait)
		delay := min(reconnectFirstDelay<<min(try-1, 8), reconnectMaxDelay)
		s.state.Store(StateReconnecting)
		s.log.Warn("a fault ended the run; starting again from what the target recorded", "cause", cause, "error", err, "attempt", try,
			"retry_in", delay.String(), "gives_up_in", (limit - time.Since(faultSince)).Round(time.Second).String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

// Reconnect timing: the first retry after a fault waits
// reconnectFirstDelay, each next one twice as long up to
// reconnectMaxDelay; a run that streamed for steadyRun ends the fault.
const (
	reconnectFirstDelay = 100 * time.Millisecond
	reconnectMaxDelay   = 5 * time.Second
	steadyRun           = 10 * time.Second
)

// firstStartSlotWait bounds the wait for a slot still held by a dying
// walsender at the first start (after a kill, the walsender notices its
// client is gone within moments).
const firstStartSlotWait = 10 * time.Second

// DefaultReconnectTimeout is how long parapply rides out faults.
const DefaultReconnectTimeout = 5 * time.Minute

// run is one run: connect, check, copy, stream, until ctx ends or the first
// error. Everything it opens it closes; what it learnt of the target's
// state dies with it, but the pids of its target sessions are kept, so
// that the next run can end any that outlive it (see progress.Claim).
func (s *Subscriber) run(ctx context.Context) (err error) {
	s.streamedSince.Store(0)
	defer s.endRun()
	scfg := s.cfg.Source
	scfg.ExportSnapshot = s.cfg.CopyData
	src, err := source.Connect(ctx, scfg)
	if err != nil {
		return err
	}
	defer src.Close()
	// A start that fails before the progress row is written drops the
	// slot it created: nothing depends on it yet.
	keepSlot := false
	defer func() {
		if err != nil && !keepSlot && src.Created {
			if derr := src.DropCreatedSlot(context.Background()); derr != nil {
				s.log.Warn("the start failed, and the slot it created could not be dropped", "slot", s.cfg.Source.Slot, "error", derr)
			} else {
				s.log.Info("the start failed; dropped the slot it had created", "slot", s.cfg.Source.Slot)
			}
		}
	}()
	s.src.Store(src)
	app, err := s.openTarget(ctx, s.cfg.Target, false)
	if err != nil {
		return err
	}
	defer app.Close(context.Background())
	defer func() {
		// Name the faults met on the reader's own connection.
		switch {
		case err == nil || faultCause(err) != "":
		case app.Closed():
			err = lostConnection(err)
		case isLockTimeout(err):
			err = errLockStall{fmt.Errorf("a change waited on a lock longer than lock_timeout: %w", err)}
		}
	}()
	published := src.Published
	rels := make([]*parapply.Relation, len(published))
	for i, pt := range published {
		rels[i] = &parapply.Relation{Namespace: pt.Schema, Name: pt.Name}
		for _, c := range pt.Columns {
			rels[i].Columns = append(rels[i].Columns, parapply.Column{Name: c})
		}
	}
	if err := apply.CheckTables(ctx, app.Conn(), rels); err != nil {
		return err
	}
	if s.cfg.Source.TwoPhase {
		var n int
		if err := app.Conn().QueryRow(ctx, "SELECT pg_catalog.current_setting('max_prepared_transactions')::int").Scan(&n); err != nil {
			return fmt.Errorf("reading max_prepared_transactions on the target: %w", err)
		}
		if n == 0 {
			return errors.New("two_phase = on applies prepared transactions as prepared transactions on the target, but its max_prepared_transactions is 0: set it above 0 there (a restart is needed), or turn two_phase off")
		}
	}
	err = progress.Claim(ctx, app.Conn(), s.cfg.Source.Slot, s.earlierSessions(), claimTimeout, func(pids []int32) {
		s.log.Warn("waiting for target sessions of an earlier run of this slot to end (they finish the work already sent to them; pg_terminate_backend ends them at once)", "slot", s.cfg.Source.Slot, "pids", pids)
	})
	if err != nil {
		return err
	}
	keepSlot = true
	pos, resumed, err := progress.Init(ctx, app.Conn(), s.cfg.Source.Slot, src.SourceID())
	if err != nil {
		return err
	}
	ahead, err := progress.ReadApplied(ctx, app.Conn(), s.cfg.Source.Slot)
	if err != nil {
		return err
	}
	if src.Created && resumed {
		return fmt.Errorf("slot %s was just created, but the target records progress from an earlier slot of that name (last applied commit %s): changes made between that slot's loss and now never reached the target; to start over, delete the slot's rows from parapply.progress and parapply.sync_state on the target and run with existing_data = truncate", s.cfg.Source.Slot, pos.CommitLSN)
	}
	if err := s.sync(ctx, src, app, published); err != nil {
		return err
	}
	s.syncSequences(ctx, published)
	tracker := progress.NewTracker(pos.EndLSN)
	tracker.Observe = func(commitTime time.Time) { s.delays.Observe(time.Since(commitTime).Seconds()) }
	s.mu.Lock()
	s.tracker, s.applier = tracker, app
	s.mu.Unlock()
	s.received.Store(uint64(pos.EndLSN))
	if resumed {
		s.log.Info("resuming", "slot", s.cfg.Source.Slot, "applied_commit_lsn", pos.CommitLSN.String(), "end_lsn", pos.EndLSN.String())
	} else {
		s.log.Info("starting", "slot", s.cfg.Source.Slot, "publications", s.cfg.Source.Publications, "protocol", src.Proto)
	}

	var workers *pool
	s.activeWorkers.Store(0)
	if s.cfg.Workers > 0 && !s.cfg.AutoWorkers {
		tcfg := s.cfg.Target
		tcfg.AppName = s.targetName()
		tcfg.AheadOfOrder = s.cfg.CommitOrder == CommitDependency
		p, err := openPool(ctx, s.openTarget, tcfg, s.cfg.Workers, s.cfg.Group, tracker, s.log)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for _, w := range p.workers {
			w.app.SetSynced(app.Synced())
			w.app.Warn = app.Warn
		}
		p.start(ctx)
		defer p.stop()
		workers = p
		s.mu.Lock()
		s.pool = p
		s.mu.Unlock()
		s.activeWorkers.Store(int32(s.cfg.Workers))
	}

	spillDir, err := s.spillDir(src.SourceID(), app)
	if err != nil {
		return err
	}
	defer os.RemoveAll(spillDir)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	frames := make(chan []source.Frame, 4)
	streamErr := make(chan error, 1)
	go func() { streamErr <- src.Stream(sctx, pos.EndLSN, frames, tracker) }()
	go s.watchSyncStandby(sctx)
	go s.keepSequences(sctx, published)
	s.state.Store(StateStreaming)
	s.streamedSince.Store(time.Now().UnixNano())
	s.everStreamed.Store(true)
	s.readyOnce.Do(func() { close(s.ready) })

	l := &loop{s: s, app: app, tracker: tracker, skipBelow: pos.CommitLSN, ahead: ahead, streams: map[parapply.XID]*stream{}, limits: s.cfg.Group,
		rels: map[uint32]*parapply.Relation{}, spillDir: spillDir}
	defer l.closeStreams()
	l.dec.ProtoVersion = src.Proto
	l.pool = workers
	if s.cfg.AutoWorkers && s.cfg.Workers > 0 {
		tuned := make(chan struct{})
		cc, pid := app.Conn().Config(), app.Conn().PgConn().PID()
		go func() {
			defer close(tuned)
			s.tune(ctx, sctx, l, cc, pid)
		}()
		defer func() {
			// The tuner may be opening the pool: it ends first.
			cancel()
			<-tuned
			if p := l.autoPool.Load(); p != nil {
				p.stop()
			}
		}()
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	defer func() {
		cancel()
		if app.InGroup() {
			app.Abort(context.Background())
		}
		<-streamErr
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-streamErr:
			streamErr <- err
			if ctx.Err() != nil {
				return nil
			}
			return err
		case <-l.poolFailed():
			if ctx.Err() != nil {
				return nil
			}
			return l.pool.err
		case <-tick.C:
			err := l.checkFlush(ctx)
			if open, inTxn, _, _, age := l.group(); err == nil && open && !inTxn && age >= l.limits.MaxDelay {
				err = l.commitGroup(ctx)
			}
			if err != nil {
				return err
			}
		case batch := <-frames:
			for _, f := range batch {
				if err := l.frame(ctx, f); err != nil {
					if ctx.Err() != nil && errors.Is(err, context.Canceled) {
						return nil
					}
					return err
				}
			}
			// Nothing more waiting: commit what the group holds now
			// rather than wait for more.
			// (With workers all busy, the group may as well grow.)
			if open, inTxn, _, _, _ := l.group(); len(frames) == 0 && open && !inTxn && (l.pool == nil || !l.pool.busy()) {
				if err := l.commitGroup(ctx); err != nil {
					return err
				}
			}
			if err := l.retune(ctx); err != nil {
				return err
			}
		}
	}
}

type loop struct {
	s         *Subscriber
	app       *apply.Applier
	tracker   *progress.Tracker
	dec       pgoutput.Decoder
	skipBelow parapply.LSN // commit LSN of the last transaction already applied
	// ahead are transactions past skipBelow applied before a restart
	// (commit_order = dependency), by commit LSN, in order.
	ahead     []progress.Range
	skipping  bool
	txn       apply.Txn
	streams   map[parapply.XID]*stream
	streamXID parapply.XID
	inStream  bool
	inTxn     bool
	// direct is set while a transaction prepared for two-phase commit is
	// applied on the reader's own connection, with workers or not.
	direct   bool
	spillDir string
	// rels holds the latest description of every relation, for appliers
	// that start mid-stream.
	rels map[uint32]*parapply.Relation
	// streamConns keeps target connections for streamed transactions
	// between them.
	streamConns streamConns
	limits      GroupLimits
	// With workers: the pool, and the unit being built.
	pool *pool
	// With AutoWorkers: the pool once the tuner has opened it, and whether
	// the tuner wants it used (see retune).
	autoPool atomic.Pointer[pool]
	wantPool atomic.Bool
	cur      *unit
	curOpen  time.Time
	curTxn   int // msgs of cur that belong to complete transactions
	keys     []schedule.Key
}

func (l *loop) poolFailed() <-chan struct{} {
	if l.pool == nil {
		return nil
	}
	return l.pool.failed
}

// group describes the source transactions taken but not yet committed (or,
// with workers, not yet handed over): whether there are any, whether one is
// still open, and their size and age.
func (l *loop) group() (open, inTxn bool, changes, bytes int, age time.Duration) {
	if l.pool == nil {
		_, changes, bytes, age = l.app.GroupSize()
		return l.app.InGroup(), l.app.InTxn(), changes, bytes, age
	}
	if l.cur == nil {
		return false, false, 0, 0, 0
	}
	return true, l.inTxn, l.cur.changes, l.cur.bytes, time.Since(l.curOpen)
}

// quiet reports whether everything taken from the stream is committed; an
// error is that of a commit that failed.
func (l *loop) quiet() (bool, error) {
	if l.pool == nil {
		if l.app.InGroup() {
			return false, nil
		}
		busy, err := l.app.Busy()
		return !busy && err == nil, err
	}
	return l.cur == nil && l.pool.idle(), nil
}

// stream is a transaction the publisher streams before it commits: its
// changes go to a spill file, and to an inflight applier when there is one.
type stream struct {
	log   *spill.Log
	first map[parapply.XID]int64 // offset of each subtransaction's first change
	// firstLSN is the position of its first change; published, the end of
	// what was handed to the inflight applier.
	firstLSN  parapply.LSN
	published int64
	inflight  *inflight
	// atCommit is set once the stream is to be applied at its commit only.
	atCommit bool
	// settled is set once what the loop held before the current stream
	// block is committed (see handOver).
	settled bool
	counted int64 // live bytes, as counted in Subscriber.streamBytes
}

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
		if l.inStream {
			return nil
		}
		quiet, err := l.quiet()
		if quiet {
			l.tracker.Reached(f.WALStart)
		}
		return err
	}
	if uint64(f.WALStart) > l.s.received.Load() {
		l.s.received.Store(uint64(f.WALStart))
	}
	if xid, ok := l.dec.PeekStreamedChange(f.Data); ok {
		// Stored as received; decoded when applied.
		return l.spillChange(ctx, l.streams[l.streamXID], xid, f)
	}
	m, err := l.dec.Decode(f.Data)
	if err != nil {
		return fmt.Errorf("decoding the stream at %s: %w", f.WALStart, err)
	}
	if l.inStream {
		return l.streamed(ctx, m, f)
	}
	return l.dispatch(ctx, m)
}

func (l *loop) dispatch(ctx context.Context, m pgoutput.Message) error {
	switch m := m.(type) {
	case *pgoutput.Begin:
		return l.begin(apply.Txn{XID: m.XID, CommitLSN: m.FinalLSN, CommitTime: m.CommitTime})
	case *pgoutput.Commit:
		return l.commit(ctx, m.EndLSN)
	case *pgoutput.RelationMessage:
		rel := m.Relation
		if err := l.app.Relation(ctx, &rel); err != nil {
			return err
		}
		l.rels[rel.ID] = &rel
		if l.pool != nil {
			l.pool.relation(&m.Relation)
			if l.cur != nil {
				l.cur.msgs = append(l.cur.msgs, m)
			}
		}
		return nil
	case *pgoutput.Insert, *pgoutput.Update, *pgoutput.Delete, *pgoutput.Truncate:
		if l.skipping {
			return nil
		}
		if l.pool != nil && !l.direct {
			return l.take(m)
		}
		return applyChange(ctx, l.app, m)
	case *pgoutput.Origin, *pgoutput.TypeMessage, *pgoutput.LogicalMessage:
		// Origins and logical messages are informational for a
		// subscriber; types are taken from the target's catalog.
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
		return l.beginPrepare(ctx, apply.Txn{XID: m.XID, CommitLSN: m.PrepareLSN, CommitTime: m.PrepareTime})
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

func (l *loop) begin(txn apply.Txn) error {
	if l.inTxn {
		return fmt.Errorf("BEGIN of transaction %d inside transaction %d (protocol error)", txn.XID, l.txn.XID)
	}
	l.txn, l.inTxn = txn, true
	l.skipping = l.applied(txn.CommitLSN)
	if l.skipping {
		return nil
	}
	if l.pool != nil {
		if l.cur == nil {
			l.cur, l.curOpen = &unit{relSeq: l.pool.relSeq()}, time.Now()
		}
		return nil
	}
	l.app.Begin(txn)
	return nil
}

func (l *loop) commit(ctx context.Context, end parapply.LSN) error {
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
			var err error
			if l.pool != nil {
				err = l.pool.drain()
			} else {
				err = l.app.Wait()
			}
			if err != nil {
				return err
			}
		}
		l.tracker.Reached(end)
		return nil
	}
	if l.pool != nil {
		l.cur.txns = append(l.cur.txns, unitTxn{txn: l.txn, end: end, upto: len(l.cur.msgs)})
	} else {
		l.app.End(end)
	}
	_, _, changes, bytes, age := l.group()
	maxChanges := l.limits.MaxChanges
	if l.pool != nil {
		// Small units: workers find independent ones, and merge
		// consecutive ready ones into batches of their own size.
		maxChanges = min(maxChanges, unitMaxChanges)
	}
	if maxChanges <= 1 || changes >= maxChanges || bytes >= l.limits.MaxBytes || age >= l.limits.MaxDelay {
		return l.commitGroup(ctx)
	}
	return nil
}

// unitMaxChanges bounds, with workers, the changes of the consecutive
// source transactions the reader puts in one unit (a larger transaction is
// a unit by itself): small enough that units over different rows exist to
// run side by side, large enough that the scheduler's cost per unit stays
// small beside the changes'.
const unitMaxChanges = 32

// take adds a change to the unit being built, with its scheduling keys.
func (l *loop) take(m pgoutput.Message) error {
	u := l.cur
	var err error
	barrier := false
	switch m := m.(type) {
	case *pgoutput.Insert:
		u.keys, barrier, err = l.app.RowKeys(m.RelationID, u.keys, nil, m.New)
		u.bytes += tupleBytes(m.New)
	case *pgoutput.Update:
		var old parapply.Tuple
		if m.OldKind != 0 {
			old = m.Old
		}
		u.keys, barrier, err = l.app.RowKeys(m.RelationID, u.keys, old, m.New)
		u.bytes += tupleBytes(m.Old) + tupleBytes(m.New)
	case *pgoutput.Delete:
		u.keys, barrier, err = l.app.RowKeys(m.RelationID, u.keys, m.Old, nil)
		u.bytes += tupleBytes(m.Old)
	case *pgoutput.Truncate:
		barrier = true
	}
	u.barrier = u.barrier || barrier
	u.msgs = append(u.msgs, m)
	u.changes++
	return err
}

func tupleBytes(t parapply.Tuple) int {
	n := 0
	for _, v := range t {
		n += len(v.Data) + 24
	}
	return n
}

// commitGroup commits the source transactions taken so far as one target
// transaction: itself, or with workers by handing them over as one unit.
func (l *loop) commitGroup(ctx context.Context) error {
	if l.pool != nil {
		u := l.cur
		l.cur = nil
		if u == nil || len(u.txns) == 0 {
			return nil
		}
		return l.pool.add(u)
	}
	// The target commits while the next group is built; the tracker hears
	// of it when it is done (commits on one connection finish in order).
	return l.app.CommitAsync(ctx, func(c apply.Committed) { record(l.tracker, c) })
}

// streamed handles a message between StreamStart and StreamStop: changes go
// to the stream's spill file; at StreamStop the chunk goes to its inflight
// applier.
func (l *loop) streamed(ctx context.Context, m pgoutput.Message, f source.Frame) error {
	st := l.streams[l.streamXID]
	switch m := m.(type) {
	case *pgoutput.StreamStop:
		l.inStream = false
		return l.handOver(ctx, st)
	case *pgoutput.RelationMessage:
		rel := m.Relation
		if err := l.app.Relation(ctx, &rel); err != nil {
			return err
		}
		l.rels[rel.ID] = &rel
		if l.pool != nil {
			// Later transactions' changes to it come without one.
			l.pool.relation(&rel)
		}
		return l.spillChange(ctx, st, m.XID, f)
	case *pgoutput.TypeMessage, *pgoutput.LogicalMessage, *pgoutput.Origin:
		return nil
	}
	return fmt.Errorf("unexpected %T inside a streamed transaction (protocol error)", m)
}

// inflightPart is how much of a stream block is handed to its inflight
// applier at a time: the target applies a large block while the rest of it
// arrives, not after it.
const inflightPart = 256 << 10

// spillChange appends a streamed message, as received, to its stream's
// spill file; xid is the (sub)transaction it belongs to.
func (l *loop) spillChange(ctx context.Context, st *stream, xid parapply.XID, f source.Frame) error {
	off, err := st.log.Append(f.Data)
	if err != nil {
		return err
	}
	if _, ok := st.first[xid]; !ok {
		st.first[xid] = off
	}
	if st.firstLSN == 0 {
		st.firstLSN = f.WALStart
	}
	n := int64(len(f.Data) + 4)
	st.counted += n
	l.s.streamBytes.Add(n)
	l.s.spilled.Add(n)
	if !st.atCommit && st.log.Size()-st.published >= inflightPart {
		return l.handOver(ctx, st)
	}
	return nil
}

// handOver hands what was received of the stream since the last hand-over
// to its inflight applier, starting one if the stream may have it. It is
// called at the end of each stream block and every inflightPart bytes
// within one.
func (l *loop) handOver(ctx context.Context, st *stream) error {
	if err := st.log.Flush(); err != nil {
		return err
	}
	if st.atCommit || st.log.Size() == st.published {
		return nil
	}
	if st.inflight == nil {
		if !l.inflightAllowed(st) {
			st.atCommit = true
			return nil
		}
		f, err := l.startInflight(ctx, l.streamXID, st.log, st.firstLSN)
		if err != nil {
			l.s.log.Warn("cannot open a connection to apply a streamed transaction in flight; it will be applied at its commit", "xid", l.streamXID, "error", err)
			st.atCommit = true
			return nil
		}
		st.inflight = f
	}
	// What came before this block takes its locks on the target first;
	// nothing else arrives within a block.
	if !st.settled {
		if err := l.settle(ctx); err != nil {
			return err
		}
		st.settled = true
	}
	st.inflight.push(streamEvent{kind: 'c', from: st.published, to: st.log.Size()})
	st.published = st.log.Size()
	return nil
}

// inflightAllowed decides whether a stream is applied as it arrives: there
// is a connection to spare, and no table's initial copy could hold the
// transaction already (which only its commit LSN, unknown yet, would tell).
func (l *loop) inflightAllowed(st *stream) bool {
	if int(l.s.inflight.Load()) >= l.s.cfg.StreamWorkers {
		return false
	}
	if l.s.atCommitOnly.Load() {
		// The last run stalled on a lock; this one takes no chance.
		return false
	}
	for _, lsn := range l.app.Synced() {
		if lsn > st.firstLSN {
			return false
		}
	}
	return true
}

// settle commits everything taken from the stream so far (with workers:
// hands it over and waits until it is committed).
func (l *loop) settle(ctx context.Context) error {
	if open, inTxn, _, _, _ := l.group(); open && !inTxn {
		if err := l.commitGroup(ctx); err != nil {
			return err
		}
	}
	if l.pool != nil {
		return l.pool.drain()
	}
	return l.app.Wait()
}

func (l *loop) streamAbort(m *pgoutput.StreamAbort) {
	l.s.log.Debug("stream abort", "xid", m.XID, "subxid", m.SubXID)
	st, ok := l.streams[m.XID]
	if !ok {
		return
	}
	if m.SubXID == m.XID || m.SubXID == 0 {
		l.dropStream(m.XID, st)
		return
	}
	cut, ok := st.first[m.SubXID]
	if !ok {
		return
	}
	st.log.Cut(cut)
	live := st.log.Size() - st.log.DeadBytes()
	l.s.streamBytes.Add(live - st.counted)
	st.counted = live
	for x, off := range st.first {
		if off >= cut {
			delete(st.first, x)
		}
	}
	if st.inflight != nil {
		st.inflight.push(streamEvent{kind: 's', subxid: m.SubXID})
	}
}

// dropStream forgets a stream, rolling back what was applied of it.
func (l *loop) dropStream(xid parapply.XID, st *stream) {
	delete(l.streams, xid)
	if st.inflight != nil {
		st.inflight.abort()
	}
	l.s.streamBytes.Add(-st.counted)
	if err := st.log.Close(); err != nil {
		l.s.log.Warn("removing a spill file", "error", err)
	}
}

func (l *loop) closeStreams() {
	for xid, st := range l.streams {
		l.dropStream(xid, st)
	}
	l.streamConns.close()
}

func (l *loop) streamCommit(ctx context.Context, m *pgoutput.StreamCommit) error {
	st := l.streams[m.XID]
	txn := apply.Txn{XID: m.XID, CommitLSN: m.CommitLSN, CommitTime: m.CommitTime}
	if st == nil {
		// Nothing of it was published (empty, or only unpublished
		// tables).
		if err := l.begin(txn); err != nil {
			return err
		}
		return l.commit(ctx, m.EndLSN)
	}
	defer l.dropStream(m.XID, st)
	if f := st.inflight; f != nil {
		st.inflight = nil
		if err := l.settle(ctx); err != nil {
			f.abort()
			return err
		}
		if l.applied(m.CommitLSN) {
			// Applied before a restart: the copy applied in flight
			// goes.
			f.abort()
			st.atCommit = true
		} else {
			began := time.Now()
			res := f.commit(txn, m.EndLSN)
			<-f.done
			l.s.log.Debug("streamed transaction committed in flight", "xid", m.XID, "seconds", time.Since(began).Seconds(), "error", res.err)
			if res.err == nil {
				l.s.streamedInFlight.Add(1)
				record(l.tracker, res.c)
				return nil
			}
			done, err := l.committedAnyway(ctx, res, m.CommitLSN)
			if err != nil {
				return err
			}
			if done {
				l.s.streamedInFlight.Add(1)
				return nil
			}
			l.s.log.Warn("a streamed transaction could not be applied in flight; applying it from its spill file", "xid", m.XID, "commit_lsn", m.CommitLSN.String(), "error", res.err)
		}
	}
	l.s.streamedAtCommit.Add(1)
	if err := l.begin(txn); err != nil {
		return err
	}
	if err := l.replay(ctx, m.XID, st); err != nil {
		return err
	}
	return l.commit(ctx, m.EndLSN)
}

// replay dispatches a stream's live changes from its spill file.
func (l *loop) replay(ctx context.Context, xid parapply.XID, st *stream) error {
	dec := pgoutput.NewStreamDecoder(l.dec.ProtoVersion)
	return st.log.Replay(func(rec []byte) error {
		c, err := dec.Decode(rec)
		if err != nil {
			return fmt.Errorf("decoding the spill file of transaction %d: %w", xid, err)
		}
		return l.dispatch(ctx, c)
	})
}

// committedAnyway finds out whether an inflight commit that failed reached
// the target all the same (the connection died during COMMIT): its backend
// is ended and waited for, then the progress row tells. If it did, the
// tracker is told.
func (l *loop) committedAnyway(ctx context.Context, res inflightResult, commitLSN parapply.LSN) (bool, error) {
	if res.pid == 0 || res.c.End == 0 {
		return false, nil
	}
	if err := awaitGone(ctx, l.app, res.pid); err != nil {
		return false, err
	}
	done, err := progress.Applied(ctx, l.app.Conn(), l.s.cfg.Source.Slot, commitLSN)
	if err != nil || !done {
		return false, err
	}
	local, flushed, err := l.app.WALPositions(ctx)
	if err != nil {
		return false, err
	}
	record(l.tracker, apply.Committed{End: res.c.End, CommitTime: res.c.CommitTime, Local: local, Flushed: flushed})
	return true, nil
}

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

func (l *loop) beginPrepare(ctx context.Context, txn apply.Txn) error {
	if err := l.settle(ctx); err != nil {
		return err
	}
	if err := l.begin(txn); err != nil {
		return err
	}
	if !l.skipping {
		var exists bool
		err := l.app.Conn().QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_prepared_xacts WHERE gid = $1)", l.preparedGID(txn.XID)).Scan(&exists)
		if err != nil {
			return fmt.Errorf("reading pg_prepared_xacts on the target: %w", err)
		}
		l.skipping = exists // prepared before a restart
	}
	if l.skipping || l.pool == nil {
		return nil
	}
	// With workers, begin opened a unit; this transaction is the
	// reader's own.
	l.cur = nil
	l.direct = true
	l.app.Begin(txn)
	return nil
}

func (l *loop) prepare(ctx context.Context, xid parapply.XID, end parapply.LSN) error {
	l.inTxn = false
	l.direct = false
	if l.skipping {
		l.skipping = false
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
	if err := l.beginPrepare(ctx, apply.Txn{XID: m.XID, CommitLSN: m.PrepareLSN, CommitTime: m.PrepareTime}); err != nil {
		return err
	}
	if st != nil {
		defer l.dropStream(m.XID, st)
		if f := st.inflight; f != nil {
			st.inflight = nil
			f.abort()
		}
		if !l.skipping {
			if err := l.replay(ctx, m.XID, st); err != nil {
				return err
			}
		}
	}
	return l.prepare(ctx, m.XID, m.EndLSN)
}

func (l *loop) finishPrepared(ctx context.Context, commit bool, txn apply.Txn, end parapply.LSN) error {
	if err := l.settle(ctx); err != nil {
		return err
	}
	if commit && l.applied(txn.CommitLSN) {
		l.tracker.Reached(end)
		return nil
	}
	c, err := l.app.FinishPrepared(ctx, l.preparedGID(txn.XID), commit, txn, end)
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

// copyProgress keeps the copy's progress for Status and passes it on.
func (s *Subscriber) copyProgress(p tablesync.Progress) {
	s.copied.Store(&p)
	if s.cfg.CopyProgress != nil {
		s.cfg.CopyProgress(p)
	}
}

// sync copies the published tables this target has not synced yet, then
// tells the applier each table's sync position.
func (s *Subscriber) sync(ctx context.Context, src *source.Source, app *apply.Applier, published []source.PublishedTable) error {
	slot := s.cfg.Source.Slot
	state, err := tablesync.LoadState(ctx, app.Conn(), slot)
	if err != nil {
		return err
	}
	var pending []tablesync.Table
	for _, pt := range published {
		t := tablesync.Table{Schema: pt.Schema, Name: pt.Name, Columns: pt.Columns, RowFilter: pt.RowFilter}
		if state[t.QualifiedName()].State != "done" {
			pending = append(pending, t)
		}
	}
	if len(pending) > 0 {
		if !s.cfg.CopyData {
			s.log.Info("taking tables as already in sync (copy_data = off)", "tables", len(pending))
			if err := tablesync.MarkSynced(ctx, app.Conn(), slot, pending, 0); err != nil {
				return err
			}
		} else {
			snapshot, lsn := src.Snapshot, src.ConsistentPoint
			if snapshot == "" {
				// The slot existed: copy under a temporary slot's snapshot.
				tmp, err := source.NewSnapshotSlot(ctx, s.cfg.Source)
				if err != nil {
					return err
				}
				defer tmp.Close()
				snapshot, lsn = tmp.Snapshot, tmp.ConsistentPoint
			}
			s.state.Store(StateCopying)
			s.log.Info("copying existing rows", "tables", len(pending), "snapshot_lsn", lsn.String(), "workers", s.cfg.CopyWorkers)
			err := tablesync.Copy(ctx, tablesync.Config{
				SourceDSN: s.cfg.Source.DSN, TargetDSN: s.cfg.Target.DSN,
				Snapshot: snapshot, SyncLSN: lsn, Slot: slot,
				Workers: s.cfg.CopyWorkers, Existing: s.cfg.ExistingData, DeferIndexes: s.cfg.CopyDeferIndexes,
				Log: s.log, Progress: s.copyProgress,
			}, pending)
			if err != nil {
				return err
			}
		}
		if state, err = tablesync.LoadState(ctx, app.Conn(), slot); err != nil {
			return err
		}
	}
	synced := map[string]parapply.LSN{}
	for name, st := range state {
		if st.State == "done" {
			synced[name] = st.SyncLSN
		}
	}
	app.SetSynced(synced)
	app.Warn = func(msg string) { s.log.Warn(msg) }
	return nil
}
