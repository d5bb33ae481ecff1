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
	"github.com/parapply/parapply/conflict"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/source"
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
	// DetectConflicts detects conflicts, resolves them by Conflicts and
	// logs them in parapply.conflicts (see apply.Detection); off, rows
	// an update or delete does not find are counted and skipped, and an
	// insert that meets an existing row stops the run.
	DetectConflicts bool
	Conflicts       *conflict.Rules
	// OnError is OnErrorStop ("" too) or OnErrorSkip: what a source
	// transaction that cannot be applied does to the run.
	OnError string
	// DetectUpdateDeleted records the target's own deletes from published
	// tables (package tombstones), so that an update whose row they
	// deleted is update_deleted; off, the records and triggers are
	// removed. A record is kept until the source commit times applied
	// pass its delete's by MaxClockSkew, and with MaxRetention above 0 no
	// longer than that.
	DetectUpdateDeleted bool
	MaxRetention        time.Duration
	MaxClockSkew        time.Duration
	// SharedTables lets this slot apply to target tables another slot
	// applies to as well (see claims.go); off, such a start is refused.
	SharedTables bool
}

// What a source transaction that cannot be applied does: stop parapply,
// naming it, or be skipped, its changes written to parapply.conflicts.
const (
	OnErrorStop = "stop"
	OnErrorSkip = "skip_transaction"
)

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

	received atomic.Uint64
	// det is the run's conflict detection, given to every applier it
	// opens; warnedCommitTS, that the lack of commit timestamps was told.
	det            atomic.Pointer[apply.Detection]
	warnedCommitTS atomic.Bool
	// createdSlot is set once a run of this process created the slot;
	// keptRows are the tables that held rows before its copy with
	// existing_data = keep (see abandonSlot). Only Run's goroutine uses
	// them.
	createdSlot bool
	keptRows    []string
	// lastSkip is the commit LSN on_error last asked to skip.
	lastSkip  parapply.LSN
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
	// skipped counts source transactions skipped (at parapply skip's
	// request, or on_error's), each once however many runs meet it:
	// skippedAt holds the last ones counted.
	skipped atomic.Int64
	// quiet is the last keepalive received with nothing in flight, and
	// tombPruned and tombExpired count the records of deletes pruned and
	// dropped at max_retention_duration (see keepTombstones).
	quiet                   atomic.Pointer[quietMark]
	tombPruned, tombExpired atomic.Int64
	skippedMu               sync.Mutex
	skippedAt               []parapply.LSN
	// oneByOne, when not zero, is the commit LSN up to which runs apply one
	// source transaction per target transaction, on the reader (see
	// errOneByOneDone).
	oneByOne atomic.Uint64
	// With AutoWorkers: the workers applying now (0: the stream reader),
	// the switches made, and the last read-wait share judged (float64
	// bits; see tune.go).
	activeWorkers  atomic.Int32
	workerSwitches atomic.Int64
	readShare      atomic.Uint64
	// want holds the session counts configured, which each run fits to
	// the target's free replication origin states (prepareOrigins);
	// warnedOrigins and strayReported, that what could not be read, and
	// the origins no slot uses, were told.
	want                         struct{ workers, streams, copiers int }
	warnedOrigins, strayReported atomic.Bool
	// kept is what Status reports between runs and during the copy.
	kept kept
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
	if e := cfg.Conflicts.NeedsCommitTimestamps(); cfg.DetectConflicts && e != "" && cfg.Group.MaxChanges > 1 {
		// A target transaction's rows all carry its commit time, which
		// is its last source transaction's: each source transaction must
		// be a target transaction of its own for later comparisons to
		// see the time it was made.
		l.Info("each source transaction is applied as a target transaction of its own (no grouping): conflict_resolution compares commit times", "entry", e)
		cfg.Group.MaxChanges = 1
	}
	sub := &Subscriber{cfg: cfg, log: l, ready: make(chan struct{}), seqWarned: map[string]bool{}, tallies: apply.NewTallies(), delays: NewHistogram(DelayBuckets)}
	sub.cfg.Target.Tallies = sub.tallies
	sub.cfg.Target.SyncStandby = &sub.syncStandby
	sub.cfg.Source.Prompt = &sub.syncStandby
	sub.state.Store(StateStarting)
	sub.want.workers, sub.want.streams, sub.want.copiers = cfg.Workers, cfg.StreamWorkers, max(cfg.CopyWorkers, 1)
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
// run that streamed for a while; other errors stop it at once, marked
// ErrPermanent.
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
	defer func() {
		// Given up: a slot this process created and never streamed from
		// goes, with what its starts recorded on the target.
		if err != nil && s.createdSlot && !s.everStreamed.Load() {
			s.abandonSlot()
		}
	}()
	var faultSince time.Time
	for try := 1; ; try++ {
		began := time.Now()
		err := s.run(ctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, errOneByOneDone) {
			continue
		}
		cause := faultCause(err)
		var ge *apply.GroupError
		if te := s.skippable(err, cause); te != nil {
			if serr := s.skipFailed(ctx, te); serr != nil {
				return permanent{errors.Join(err, serr)}
			}
			continue
		}
		if cause == "" && errors.As(err, &ge) && s.oneByOne.Load() == 0 {
			s.oneByOne.Store(uint64(ge.Last.CommitLSN))
			s.log.Warn("a group of source transactions applied as one target transaction failed; applying them again one at a time, to name the one that fails",
				"first_xid", ge.First.XID, "last_xid", ge.Last.XID, "last_commit_lsn", ge.Last.CommitLSN.String(), "transactions", ge.Txns, "error", err)
			continue
		}
		if cause == "" {
			return permanent{err}
		}
		if s.cfg.ReconnectTimeout <= 0 {
			return err
		}
		if errors.Is(err, source.ErrSlotBusy) {
			if holder := s.slotHolder(ctx); holder != "" {
				return errSlotHeld(s.cfg.Source.Slot, holder, err)
			}
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

// errOneByOneDone ends a run that applied one source transaction at a time
// (after a GroupError) once it has committed past the failed group: the
// group's transactions all applied after all (the error was another
// session's, gone now), or one was skipped; the next run groups again.
var errOneByOneDone = errors.New("applied past the failed group one transaction at a time")

// autoWorkers reports whether this run may move to workers: workers =
// auto, and not applying one transaction at a time.
func (s *Subscriber) autoWorkers() bool {
	return s.cfg.AutoWorkers && s.cfg.Workers > 0 && s.oneByOne.Load() == 0
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
	// Before the slot is created: a target that refuses origins is a
	// setup error.
	if err := s.prepareOrigins(ctx, app.Conn()); err != nil {
		return err
	}
	if err := app.SetupOrigin(ctx, apply.OriginName(s.cfg.Source.Slot, "")); err != nil {
		return err
	}
	if err := s.claimTables(ctx, app.Conn(), claimedTables(published)); err != nil {
		return err
	}
	s.det.Store(nil)
	tombs, err := s.setupTombstones(ctx, app.Conn(), published)
	if err != nil {
		return err
	}
	commitTS := false
	if s.cfg.DetectConflicts {
		det, err := s.detection(ctx, app.Conn(), src.SourceID(), published)
		if err != nil {
			return err
		}
		det.Tombstones, commitTS = tombs, det.CommitTimestamps
		s.det.Store(det)
		app.SetDetection(det)
	}
	// The slot is created only now, after every check that can refuse
	// the start before it (see createSlot); a start refused after it
	// drops it again (see Run).
	if err := s.createSlot(ctx, src, app.Conn(), published); err != nil {
		return err
	}
	pos, resumed, err := progress.Init(ctx, app.Conn(), s.cfg.Source.Slot, src.SourceID())
	if err != nil {
		return err
	}
	s.kept.note(pos.EndLSN, pos.EndLSN, pos.CommitTime)
	ahead, err := progress.ReadApplied(ctx, app.Conn(), s.cfg.Source.Slot)
	if err != nil {
		return err
	}
	skips, err := s.readSkips(ctx, app.Conn(), pos.CommitLSN)
	if err != nil {
		return err
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
	oneByOne := parapply.LSN(s.oneByOne.Load())
	if s.cfg.Workers > 0 && !s.cfg.AutoWorkers && oneByOne == 0 {
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
	if tombs {
		go s.keepTombstones(sctx, tracker, commitTS)
	}
	s.state.Store(StateStreaming)
	s.streamedSince.Store(time.Now().UnixNano())
	s.everStreamed.Store(true)
	s.readyOnce.Do(func() { close(s.ready) })

	l := &loop{s: s, app: app, tracker: tracker, skipBelow: pos.CommitLSN, ahead: ahead, skips: skips, oneByOne: oneByOne, streams: map[parapply.XID]*stream{}, limits: s.cfg.Group,
		rels: map[uint32]*parapply.Relation{}, spillDir: spillDir}
	defer l.closeStreams()
	l.dec.ProtoVersion = src.Proto
	l.reader = &readerSink{app: app, tracker: tracker}
	l.sink = l.reader
	if workers != nil {
		l.sink = &poolSink{p: workers, keys: app}
	}
	if s.autoWorkers() || s.cfg.Target.Prefetch {
		// One prefetch connection until the tuner sees them wait on a
		// disk (before the loop starts, so that none opens more first).
		s.prefetchWaits(l, false)
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
		case <-l.sink.failed():
			if ctx.Err() != nil {
				return nil
			}
			return l.sink.err()
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
				// A batch may hold thousands of transactions, seconds
				// of applying: the tuner's move is taken between any two.
				if err := l.retune(ctx); err != nil {
					return err
				}
			}
			// Nothing more waiting: commit what the group holds now
			// rather than wait for more.
			// (With workers all busy, the group may as well grow.)
			if open, inTxn, _, _, _ := l.group(); len(frames) == 0 && open && !inTxn && !l.sink.busy() {
				if err := l.commitGroup(ctx); err != nil {
					return err
				}
			}
		}
	}
}

// countSkip counts the skip of the source transaction that committed at
// lsn, unless a run counted it before (a run that ends before the skip
// commits meets it again).
func (s *Subscriber) countSkip(lsn parapply.LSN) {
	s.skippedMu.Lock()
	defer s.skippedMu.Unlock()
	if slices.Contains(s.skippedAt, lsn) {
		return
	}
	if len(s.skippedAt) >= 64 {
		s.skippedAt = s.skippedAt[1:]
	}
	s.skippedAt = append(s.skippedAt, lsn)
	s.skipped.Add(1)
}
