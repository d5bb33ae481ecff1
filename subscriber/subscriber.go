package subscriber

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/conflict"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/schemacopy"
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
	ExistingData tablesync.ExistingData
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
	CommitOrder CommitOrder
	// ReconnectTimeout is how long faults are ridden out (see Run); 0
	// stops at the first.
	ReconnectTimeout time.Duration
	// Sequences says which publisher sequences are brought to the target
	// (sequences.None, Owned or All): after the copy, and every
	// SequenceSyncInterval while streaming (0: only after the copy).
	Sequences            sequences.Mode
	SequenceSyncInterval time.Duration
	// PublicationRefresh is how often the publication's tables are read
	// for ones that joined it with no change to show it (0:
	// publicationRefreshEvery); a table's first change reads them at once.
	PublicationRefresh time.Duration
	// Binary asks for values in binary where every published column can
	// take them (see chooseBinary), and for the copy's binary COPY where
	// both sides' column types allow it; off, they travel in text, in the
	// copy too.
	Binary bool
	// DetectConflicts detects conflicts, resolves them by Conflicts and
	// logs them in parapply.conflicts (see apply.Detection); off, rows
	// an update or delete does not find are counted and skipped, and an
	// insert that meets an existing row stops the run.
	DetectConflicts bool
	// DetectConflictsAsked: detect_conflicts was set by the user, not
	// left at its default. On a Citus coordinator detection is then
	// refused for the tables Citus manages; left at its default, it is
	// off for those tables and on for the others (apply.Detection's
	// SkipCitus).
	DetectConflictsAsked bool
	Conflicts            *conflict.Rules
	// OnError is OnErrorStop ("" too) or OnErrorSkip: what a source
	// transaction that cannot be applied does to the run.
	OnError OnError
	// DDL is DDLOff ("" too) or DDLApply: whether schema changes the
	// publisher sends as parapply.ddl messages are run on the target.
	DDL DDLMode
	// DetectUpdateDeleted records the target's own deletes from published
	// tables (targetdb/tombstones.go), so that an update whose row they
	// deleted is update_deleted; off, the records and triggers are
	// removed. A record is kept until the source commit times applied
	// pass its delete's by MaxClockSkew, and with MaxRetention above 0 no
	// longer than that.
	DetectUpdateDeleted bool
	MaxRetention        time.Duration
	MaxClockSkew        time.Duration
	// Schema is schemacopy.Target ("" too) or schemacopy.Copy: whether
	// a start brings the definitions of the published tables the target
	// lacks over from the publisher (schema.go), with the pg_dump program
	// PGDump names (empty: found, schemacopy.Find).
	Schema schemacopy.Mode
	PGDump string
	// SharedTables lets this slot apply to target tables another slot
	// applies to as well (see claim.go); off, such a start is refused.
	SharedTables bool
}

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

// Subscriber applies one slot's stream to one target. Its fields are
// grouped by the part that writes them: Run and its phases (runs), the
// loop and its streams (stats), the tuner (tuner), the sequence syncs
// (seq), the origin planning (origins); Status reads them all.
type Subscriber struct {
	cfg Config
	log *slog.Logger
	// ready is closed once the subscriber is streaming.
	ready     chan struct{}
	readyOnce sync.Once

	// mu guards the current run's tracker, applier and pool (for Status),
	// when Run started, the pids of the target sessions of the current
	// and the previous run, and the figures of earlier runs.
	mu             sync.Mutex
	tracker        *progress.Tracker
	applier        *apply.Applier
	pool           *pool
	started        time.Time
	sessions       []uint32
	streamSessions []uint32
	earlier        []uint32
	past           apply.Stats

	runs    runState
	stats   stats
	tuner   tunerFigures
	seq     seqState
	origins originState
	// kept is what Status reports between runs and during the copy.
	kept kept
	// targetDB is the target database's name, quoted, for the fixes of
	// waits ("" if not known).
	targetDB string
}

// runState is written by Run and the phases of its runs.
type runState struct {
	// state is the subscriber's (a State*), src the current run's stream.
	state atomic.Value // string
	src   atomic.Pointer[source.Source]
	// det is the run's conflict detection, given to every applier it
	// opens; warnedCommitTS, that the lack of commit timestamps was told;
	// toldCitus, that detection is off for the tables Citus manages.
	det            atomic.Pointer[apply.Detection]
	warnedCommitTS atomic.Bool
	toldCitus      atomic.Bool
	// toldSchema, that schema = copy found every published table there.
	toldSchema atomic.Bool
	// binary is whether the run's stream carries binary tuple data, given
	// to every applier it opens (see chooseBinary); textOnly is set once a
	// run met a column that cannot take them, for the process's later
	// runs.
	binary, textOnly atomic.Bool
	// caughtUp is the current run's verdict that it keeps up with the
	// publisher (see backlog.go); a run starts behind.
	caughtUp atomic.Bool
	// binaryWhy is the last choice's reason, logged when it changes (Run's
	// goroutine only).
	binaryWhy  string
	binaryTold bool
	// createdSlot is set once a run of this process created the slot,
	// createdRecord once one created the slot's progress row; keptRows
	// are the tables that held rows before its copy with existing_data =
	// keep (see abandonSlot). Only Run's goroutine uses them.
	createdSlot, createdRecord bool
	keptRows                   []string
	// lastSkip is the commit LSN on_error last asked to skip.
	lastSkip parapply.LSN
	// Across runs: when the current run began streaming (Unix ns, 0 if it
	// has not), whether a run ever did, faults ridden out by cause (the
	// order of FaultCauses), and whether the next run applies streamed
	// transactions at their commit only (after a lock stall).
	streamedSince atomic.Int64
	everStreamed  atomic.Bool
	reconnects    [len(FaultCauses)]atomic.Int64
	atCommitOnly  atomic.Bool
	// wait is the wait for the target in progress (nil: none; see
	// wait.go): set by Run, ended by Run, a target commit or a steady run.
	wait atomic.Pointer[waiting]
	// oneByOne, when not zero, is the commit LSN up to which runs apply one
	// source transaction per target transaction, on the reader (see
	// errOneByOneDone).
	oneByOne atomic.Uint64
	// syncStandby is true while the publisher names parapply in
	// synchronous_standby_names (see watchSyncStandby).
	syncStandby atomic.Bool
}

// stats are the figures the loop, its streamed transactions and the
// tombstone keeper write for Status.
type stats struct {
	// The position received, per-table tallies, commit delays, bytes of
	// streamed transactions held, and the last copy progress.
	received    atomic.Uint64
	tallies     *apply.Tallies
	delays      *Histogram
	streamBytes atomic.Int64
	copied      atomic.Pointer[tablesync.Progress]
	// Streamed transactions: bytes written to spill files, appliers in
	// flight, and how many were applied in flight and at their commit.
	spilled                            atomic.Int64
	inflight                           atomic.Int64
	streamedInFlight, streamedAtCommit atomic.Int64
	// skipped counts source transactions skipped (at parapply skip's
	// request, or on_error's), each once however many runs meet it:
	// skippedAt holds the last ones counted.
	skipped   atomic.Int64
	skippedMu sync.Mutex
	// ddl counts the DDL messages run on the target (ddl = apply).
	ddl       atomic.Int64
	skippedAt []parapply.LSN
	// quiet is the last keepalive received with nothing in flight, and
	// tombPruned and tombExpired count the records of deletes pruned and
	// dropped at max_retention_duration (see keepTombstones).
	quiet                   atomic.Pointer[quietMark]
	tombPruned, tombExpired atomic.Int64
}

// tunerFigures are written, with AutoWorkers, by the tuner and the run:
// the workers applying now (0: the stream reader), the switches made, and
// the last read-wait share judged (float64 bits; see tune.go).
type tunerFigures struct {
	activeWorkers  atomic.Int32
	workerSwitches atomic.Int64
	readShare      atomic.Uint64
}

// seqState is written by the sequence syncs: the last one's summary and
// error, and the sequences warned about (missing on the target,
// unreadable on the publisher); mu makes syncs one at a time (a run's
// last may overlap the next run's first).
type seqState struct {
	mu      sync.Mutex
	summary atomic.Pointer[sequences.Summary]
	err     atomic.Pointer[string]
	warned  map[string]bool
}

// originState is written by prepareOrigins: want holds the session counts
// configured, which each run fits to the target's free replication origin
// states; warned and strayReported, that what could not be read, and the
// origins no slot uses, were told.
type originState struct {
	want                  struct{ workers, streams, copiers int }
	warned, strayReported atomic.Bool
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
	sub := &Subscriber{cfg: cfg, log: l, ready: make(chan struct{}), targetDB: targetDatabase(cfg.Target.DSN)}
	sub.seq.warned = map[string]bool{}
	sub.stats.tallies, sub.stats.delays = apply.NewTallies(), NewHistogram(DelayBuckets)
	sub.cfg.Target.Tallies = sub.stats.tallies
	sub.cfg.Target.SyncStandby = &sub.runs.syncStandby
	sub.cfg.Source.Prompt = &sub.runs.syncStandby
	sub.runs.state.Store(StateStarting)
	sub.origins.want.workers, sub.origins.want.streams, sub.origins.want.copiers = cfg.Workers, cfg.StreamWorkers, max(cfg.CopyWorkers, 1)
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
	defer func() { s.runsEnded(err) }()
	var faultSince time.Time
	for try := 1; ; try++ {
		began := time.Now()
		err := s.run(ctx)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		again, cause, aerr := s.againAtOnce(ctx, err)
		if aerr != nil {
			return aerr
		}
		if again {
			continue
		}
		if since := s.runs.streamedSince.Load(); since != 0 && time.Since(time.Unix(0, since)) >= steadyRun {
			// The run streamed long enough: this fault starts a new window.
			faultSince, try = time.Time{}, 1
		}
		if cause == FaultTargetWait {
			// A wait is no fault's time: reconnect_timeout counts from
			// the next fault on.
			faultSince, try = time.Time{}, 0
			if done, werr := s.waitOnTarget(ctx, err, cause); done {
				return werr
			}
			continue
		}
		// Any other outcome ends a wait in progress.
		s.endWait("the run ended with another error")
		if faultSince.IsZero() {
			faultSince = began
		}
		f := fault{cause: cause, everStreamed: s.runs.everStreamed.Load(), timeout: s.cfg.ReconnectTimeout, elapsed: time.Since(faultSince), try: try}
		if cause != "" && f.timeout > 0 && errors.Is(err, source.ErrSlotBusy) {
			f.holder, f.holderAlive = s.slotHolder(ctx)
		}
		r := retryAfter(err, s.cfg.Source.Slot, f)
		if r.err != nil {
			return r.err
		}
		s.runs.reconnects[slices.Index(FaultCauses[:], cause)].Add(1)
		s.runs.atCommitOnly.Store(cause == FaultLockWait)
		s.runs.state.Store(StateReconnecting)
		s.log.Warn("a fault ended the run; starting again from what the target recorded", "cause", cause, "error", err, "attempt", try,
			"retry_in", r.delay.String(), "gives_up_in", r.left.Round(time.Second).String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.delay):
		}
	}
}

// runsEnded ends Run, which returns err: given up, a slot this process
// created and never streamed from goes, with what its starts recorded on
// the target; the state says whether Run stopped or failed.
func (s *Subscriber) runsEnded(err error) {
	if err != nil && (s.runs.createdSlot || s.runs.createdRecord) && !s.runs.everStreamed.Load() {
		s.abandonSlot()
	}
	s.runs.wait.Store(nil)
	if err != nil {
		s.completeSkipHint(err)
		s.runs.state.Store(StateFailed)
	} else {
		s.runs.state.Store(StateStopped)
	}
}

// againAtOnce reports whether a run that ended with err starts again at
// once: it passed a failed group one transaction at a time, on_error goes
// on, a failed transaction is skipped, or a failed group is applied again
// one transaction at a time. cause is err's fault cause, for the rest.
func (s *Subscriber) againAtOnce(ctx context.Context, err error) (again bool, cause string, rerr error) {
	if errors.Is(err, errOneByOneDone) {
		return true, "", nil
	}
	if s.goOnInText(err) {
		return true, "", nil
	}
	cause = faultCause(err)
	var ge *apply.GroupError
	if te := s.skippable(err, cause); te != nil {
		if serr := s.skipFailed(ctx, te); serr != nil {
			return false, cause, permanent{errors.Join(err, serr)}
		}
		return true, cause, nil
	}
	if cause == "" && errors.As(err, &ge) && s.runs.oneByOne.Load() == 0 {
		s.runs.oneByOne.Store(uint64(ge.Last.CommitLSN))
		s.log.Warn("a group of source transactions applied as one target transaction failed; applying them again one at a time, to name the one that fails",
			"first_xid", ge.First.XID, "last_xid", ge.Last.XID, "last_commit_lsn", ge.Last.CommitLSN.String(), "transactions", ge.Txns, "error", err)
		return true, cause, nil
	}
	return false, cause, nil
}

// waitOnTarget waits before the next run after a wait on the target
// (FaultTargetWait); done is set when Run is to return rerr.
func (s *Subscriber) waitOnTarget(ctx context.Context, err error, cause string) (done bool, rerr error) {
	w := s.noteWait(targetWait(err), err)
	r := retryAfter(err, s.cfg.Source.Slot, fault{cause: cause, timeout: s.cfg.ReconnectTimeout, try: w.tries})
	if r.err != nil {
		return true, r.err
	}
	s.runs.reconnects[slices.Index(FaultCauses[:], cause)].Add(1)
	s.runs.state.Store(StateWaiting)
	s.logWait(w, r.delay)
	select {
	case <-ctx.Done():
		return true, nil
	case <-time.After(r.delay):
	}
	return false, nil
}

// errOneByOneDone ends a run that applied one source transaction at a time
// (after a GroupError) once it has committed past the failed group: the
// group's transactions all applied after all (the error was another
// session's, gone now), or one was skipped; the next run groups again.
var errOneByOneDone = errors.New("applied past the failed group one transaction at a time")

// autoWorkers reports whether this run may move to workers: workers =
// auto, and not applying one transaction at a time.
func (s *Subscriber) autoWorkers() bool {
	return s.cfg.AutoWorkers && s.cfg.Workers > 0 && s.runs.oneByOne.Load() == 0
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

// FirstStartSlotWait is firstStartSlotWait, for the checks that say what
// a start does with a slot in use.
const FirstStartSlotWait = firstStartSlotWait

// DefaultReconnectTimeout is how long parapply rides out faults.
const DefaultReconnectTimeout = 5 * time.Minute

// run is one run, in phases (see connect.go): connect and check, claim,
// set up, stream, until ctx ends or the first error. Everything it opens it
// closes; what it learnt of the target's state dies with it, but the pids
// of its target sessions are kept, so that the next run can end any that
// outlive it (see targetdb.Claim).
func (s *Subscriber) run(ctx context.Context) (err error) {
	s.runs.streamedSince.Store(0)
	defer s.endRun()
	c, err := s.connect(ctx)
	if err != nil {
		return err
	}
	defer c.close()
	defer c.nameFault(&err)
	cl, err := s.claim(ctx, c)
	if err != nil {
		return err
	}
	su, err := s.setup(ctx, cl)
	if err != nil {
		return err
	}
	return s.stream(ctx, su)
}

// countSkip counts the skip of the source transaction that committed at
// lsn, unless a run counted it before (a run that ends before the skip
// commits meets it again).
func (s *Subscriber) countSkip(lsn parapply.LSN) {
	s.stats.skippedMu.Lock()
	defer s.stats.skippedMu.Unlock()
	if slices.Contains(s.stats.skippedAt, lsn) {
		return
	}
	if len(s.stats.skippedAt) >= 64 {
		s.stats.skippedAt = s.stats.skippedAt[1:]
	}
	s.stats.skippedAt = append(s.stats.skippedAt, lsn)
	s.stats.skipped.Add(1)
}
