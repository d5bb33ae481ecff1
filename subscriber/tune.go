package subscriber

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/apply"
)

// With workers = auto, a run applies on the stream reader's connection (no
// workers: the least work per change, the fastest where the CPU is full)
// until the target sessions applying for it are seen waiting on data reads
// (a slow disk, data larger than memory); then on the pool of workers, whose
// reads overlap one another. It goes back when the reads stop mattering.
//
// The signal is pg_stat_activity, sampled every tuneSample: of the samples
// in which a session applying for the run (the reader's, the workers') is
// active, the share waiting on a read (see tuneSQL). A session that is idle waits on
// parapply, not on the server, and does not count; nor do waits on WAL,
// locks or the client, which more workers would not shorten. The prefetch
// sessions do not count either: reading is all they do, and from the
// operating system's cache reads are short; what matters is whether the
// appliers still wait once they have read ahead.

// Tuning thresholds: a window of tuneWindow is judged when it holds at
// least tuneMinSamples samples and the appliers were active in
// tuneMinActive of them (a share: on a busy machine samples are late, and
// a window holds fewer than tuneWindow/tuneSample); a read share of
// tuneToPool or more moves to the pool after tuneToPoolWindows windows in
// a row (two seconds: a move costs a drain and a trial, which a catch-up
// of a few seconds does not win back, and on a slow disk the reader with
// its prefetch connections already keeps many reads in flight;
// docs/benchmarks.md), tuneBackWindows windows in a row (3 s) under
// tuneToLoop move back. The gap between the two keeps a run from going
// back and forth.
const (
	tuneSample        = 10 * time.Millisecond
	tuneWindow        = 250 * time.Millisecond
	tuneMinSamples    = 5
	tuneMinActive     = 0.8
	tuneToPool        = 0.30
	tuneToLoop        = 0.10
	tuneToPoolWindows = 8
	tuneBackWindows   = 12
)

// tuneSQL counts, among the appliers' backends ($1) and among the
// prefetchers' ($2), those active and those active and waiting on a read:
// of a relation's page (DataFileRead, DataFilePrefetch), of a temporary
// file (BufFileRead), or on a read another process does for them
// (AioIoCompletion, PostgreSQL 18's asynchronous I/O; BufferIO, a page
// another backend is reading in). The names are compared in lower case:
// their case changed in PostgreSQL 17.
const tuneSQL = `SELECT count(*) FILTER (WHERE active AND pid = ANY($1)),
	count(*) FILTER (WHERE active AND reading AND pid = ANY($1)),
	count(*) FILTER (WHERE active AND pid = ANY($2)),
	count(*) FILTER (WHERE active AND reading AND pid = ANY($2))
	FROM (SELECT pid, state = 'active' AS active, wait_event_type IN ('IO', 'IPC')
			AND lower(wait_event) IN ('datafileread', 'datafileprefetch', 'buffileread', 'aioiocompletion', 'bufferio') AS reading
		FROM pg_catalog.pg_stat_activity WHERE pid = ANY($1) OR pid = ANY($2)) AS s`

// The prefetch sessions' reads wait on a disk, and more prefetch
// connections may open (apply.Applier.Tune, apply.DiskWaiting), from a window in
// which they spent prefetchWaitShare of their active samples waiting on a
// read; they do not, and the prefetcher goes back to one connection, after
// prefetchFastWindows windows in a row under prefetchFastShare. From the
// operating system's cache a read is short beside the rest of a row's
// work, and the share stays low however busy the CPU, though a few windows
// run higher (PostgreSQL 18's I/O workers waiting for a core too), hence
// the gap and the windows in a row; reads that wait on a disk keep it near
// one (figures: docs/benchmarks.md). Until the sessions
// are seen waiting, the prefetcher keeps one connection.
const (
	prefetchWaitShare   = 0.6
	prefetchFastShare   = 0.3
	prefetchFastWindows = 4
)

// diskJudge turns the prefetch sessions' read-wait share, window by
// window, into whether their reads wait on a disk. It is pure; the zero
// value has no verdict (the sampler starts it at "not waiting").
type diskJudge struct {
	known, waits bool
	fast         int // windows in a row under prefetchFastShare
}

// early says, within a window, whether the samples so far already show
// the sessions waiting (twice the samples a window needs, at the
// threshold): on a slow disk, every quarter second at one connection is
// a quarter second of reads one at a time.
func (d *diskJudge) early(w readWaits) (changed bool) {
	if d.waits || w.active < 2*tuneMinSamples || float64(w.reads) < prefetchWaitShare*float64(w.active) {
		return false
	}
	d.known, d.waits, d.fast = true, true, 0
	return true
}

// judge takes a window's share and reports the verdict, and whether it
// is new.
func (d *diskJudge) judge(share float64) (waits, changed bool) {
	switch {
	case share >= prefetchWaitShare:
		d.fast = 0
		changed = !d.known || !d.waits
		d.known, d.waits = true, true
	case share < prefetchFastShare:
		d.fast++
		if d.fast >= prefetchFastWindows {
			changed = !d.known || d.waits
			d.known, d.waits = true, false
		}
	default:
		d.fast = 0
	}
	return d.waits, changed
}

// readWaits adds up, over a window, the samples of one group of sessions.
type readWaits struct{ active, reads int }

// share ends the window: the share of active samples waiting on a read,
// and whether there were enough to tell.
func (w *readWaits) share() (share float64, ok bool) {
	active, reads := w.active, w.reads
	*w = readWaits{}
	if active < tuneMinSamples {
		return 0, false
	}
	return float64(reads) / float64(active), true
}

// tuner decides, window by window, whether a run applies on workers. It is
// pure: the sampler feeds it counts and acts on what it returns.
//
// A move to the pool is a trial: the rows changed per window before it
// are compared with those after it (one window to settle, then
// tuneTrialWindows), and a pool that applies less than the reader did
// (tuneTrialKeep: workers cost more CPU per change, so they must at
// least match it) is left at once; the reader then keeps the load
// for a cooldown that doubles with each failed trial (reads that wait are
// not always reads that workers overlap better than the prefetcher does).
type tuner struct {
	pooled                 bool
	samples, active, reads int
	quietWindows           int
	busyWindows            int
	before                 float64 // changes per window on the reader, before the move
	trial                  int     // windows judged since the move (0: no trial)
	trialRows              int64
	failures               int
	cooldown               int // windows the reader keeps the load before a new trial
	lastShare              float64
	windowsJudged          int
	// recent holds the rows of the last judged windows on the reader: the
	// trial's baseline (a window of a few hundred milliseconds may hold
	// none of the reader's statements, which run thousands of rows each).
	recent []int64
}

// tuneBaseline is how many of the reader's windows the trial's baseline
// spans (two seconds).
const tuneBaseline = 8

// Trial limits: see tuner.
const (
	tuneTrialWindows = 4
	tuneTrialKeep    = 1.0
	tuneCooldown     = 240  // windows: one minute
	tuneCooldownMax  = 2400 // ten minutes
)

// add counts one sample: active sessions, and those of them waiting on a read.
func (t *tuner) add(active, reads int) {
	t.samples++
	t.active += active
	t.reads += reads
}

// judge ends a window, in which the appliers changed rows rows, and reports
// whether the run should now apply on workers (pooled), and whether that is
// a change. A window that is not settled is not judged: the prefetcher
// opened connections in it (its reads are ones the prefetcher will soon
// take), or the loop had not yet made the last move (it commits what it
// holds first, which on slow reads takes seconds, and a trial counted from
// the decision would measure the reader's last statements as the pool's).
func (t *tuner) judge(rows int64, settled bool) (pooled, changed bool) {
	samples, active, reads := t.samples, t.active, t.reads
	t.samples, t.active, t.reads = 0, 0, 0
	if samples < tuneMinSamples || float64(active) < tuneMinActive*float64(samples) || !settled {
		// Too little applied to tell (caught up, or between loads), or
		// not settled.
		return t.pooled, false
	}
	t.windowsJudged++
	share := float64(reads) / float64(active)
	t.lastShare = share
	if !t.pooled {
		if len(t.recent) == tuneBaseline {
			t.recent = t.recent[1:]
		}
		t.recent = append(t.recent, rows)
	}
	if t.pooled && t.trial > 0 {
		t.trial++
		if t.trial == 2 {
			return true, false // the switch settles
		}
		t.trialRows += rows
		if t.trial < 2+tuneTrialWindows {
			return true, false
		}
		rate := float64(t.trialRows) / tuneTrialWindows
		t.trial, t.trialRows = 0, 0
		if rate < tuneTrialKeep*t.before {
			t.pooled = false
			t.cooldown = min(tuneCooldown<<t.failures, tuneCooldownMax)
			t.failures++
			return false, true
		}
		t.failures = 0
		return true, false
	}
	if !t.pooled && t.cooldown > 0 {
		t.cooldown--
		return false, false
	}
	switch {
	case !t.pooled && share >= tuneToPool:
		t.quietWindows = 0
		t.busyWindows++
		if t.busyWindows >= tuneToPoolWindows {
			var sum int64
			for _, r := range t.recent {
				sum += r
			}
			t.before = float64(sum) / float64(len(t.recent))
			t.recent = t.recent[:0]
			t.pooled, t.busyWindows = true, 0
			t.trial, t.trialRows = 1, 0
			return true, true
		}
		return false, false
	case t.pooled && share < tuneToLoop:
		t.quietWindows++
		if t.quietWindows >= tuneBackWindows {
			t.pooled, t.quietWindows = false, 0
			return false, true
		}
	default:
		t.quietWindows, t.busyWindows = 0, 0
	}
	return t.pooled, false
}

// sampleReads runs tuneSQL on conn for the given appliers and prefetchers.
func sampleReads(ctx context.Context, conn *pgx.Conn, appliers, prefetchers []uint32) (apply, prefetch readWaits, err error) {
	err = conn.QueryRow(ctx, tuneSQL, appliers, prefetchers).Scan(&apply.active, &apply.reads, &prefetch.active, &prefetch.reads)
	return apply, prefetch, err
}

// tune runs beside a run with AutoWorkers or prefetching: it samples the
// run's target sessions, and tells the prefetchers whether their reads
// wait on a disk (the caller has told them to keep one connection until
// then). For AutoWorkers it opens the pool the first time the tuner wants
// it (on runCtx, the run's, so that it lives until the run ends), and
// tells the loop which way to apply; the loop switches at its next safe
// point (retune). It ends with ctx.
//
// The reader's connection config and backend are taken by the caller: the
// loop's applier is the loop's alone.
func (s *Subscriber) tune(runCtx, ctx context.Context, l *loop, cc *pgx.ConnConfig, readerPID uint32) {
	r := &tuning{l: l, readerPID: readerPID, disk: diskJudge{known: true}, auto: s.autoWorkers(), every: s.cfg.AutoSwitchEvery}
	if !r.auto {
		r.every = 0
	}
	if r.every <= 0 {
		cc.RuntimeParams["application_name"] = s.targetName() + " tuner"
		var err error
		if r.conn, err = pgx.ConnectConfig(ctx, cc); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("cannot open the connection that watches the target's sessions; for this run, workers = auto applies on the stream reader's connection and the prefetcher keeps one connection", "error", err)
			}
			return
		}
		defer r.conn.Close(context.Background())
	}
	tick := time.NewTicker(tuneSample)
	defer tick.Stop()
	r.windowEnd = time.Now().Add(tuneWindow)
	if r.every > 0 {
		r.windowEnd = time.Now().Add(r.every)
	}
	r.lastRows = s.executedRows(l)
	r.lastConns = s.prefetchConns(l)
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			watched, ok := s.sampleIfDue(ctx, r)
			if !ok {
				return
			}
			if !watched || now.Before(r.windowEnd) {
				continue
			}
			if !s.judgeWindow(runCtx, ctx, r, now) {
				return
			}
		}
	}
}

// sampleIfDue samples the run's target sessions on a tick that is due
// (tuneSample); watched is false for a tick left out, always true with
// AutoSwitchEvery (nothing is sampled), ok false when tune is to end.
func (s *Subscriber) sampleIfDue(ctx context.Context, r *tuning) (watched, ok bool) {
	if r.every > 0 {
		return true, true
	}
	if !r.idle.due() || (s.runs.caughtUp.Load() && !r.l.wantPool.Load() && r.idle.tick%tuneIdleEvery != 0) {
		// Nothing waits (idle), or the run keeps up with the publisher:
		// more workers could not apply sooner, and nothing is read ahead
		// (backlog.go).
		return false, true
	}
	return s.tuneSample(ctx, r)
}

// tuning is what tune keeps between its samples: the run's loop and the
// reader's backend, what it samples on, the judges and their figures, and
// when the current window ends.
type tuning struct {
	l         *loop
	readerPID uint32
	conn      *pgx.Conn // nil with AutoSwitchEvery: nothing is sampled
	auto      bool
	every     time.Duration // AutoSwitchEvery, with auto

	t            tuner
	pf           readWaits
	disk         diskJudge
	pids, pfPIDs []uint32
	lastRows     int64
	lastConns    int
	windowEnd    time.Time
	idle         idleSampler
}

// idleSampler spaces the samples while nothing applies: after
// tuneIdleAfter samples in a row in which no session watched was active
// (caught up, a quiet publisher), one tick in tuneIdleEvery is sampled,
// until a sample finds one active. A parapply that waits for changes
// then queries the target's pg_stat_activity four times a second, not a
// hundred; a load that starts is seen within tuneIdleEvery ticks (a
// quarter second, one window of the tuneToPoolWindows a move to the pool
// takes).
type idleSampler struct{ idle, tick int }

// Idle sampling: see idleSampler.
const (
	tuneIdleAfter = 10
	tuneIdleEvery = 25
)

// due reports whether this tick is to be sampled.
func (s *idleSampler) due() bool {
	s.tick++
	return s.idle < tuneIdleAfter || s.tick%tuneIdleEvery == 0
}

// saw notes how many sessions a sample found active.
func (s *idleSampler) saw(active int) {
	if active > 0 {
		s.idle = 0
	} else {
		s.idle++
	}
}

// tuneSample samples the run's target sessions once; watched is false
// while there is nothing to watch yet, ok false when tune is to end (the
// sample failed).
func (s *Subscriber) tuneSample(ctx context.Context, r *tuning) (watched, ok bool) {
	l := r.l
	r.pfPIDs = s.prefetchers(l, r.pfPIDs[:0])
	if !r.auto && len(r.pfPIDs) == 0 {
		return false, true // nothing to watch yet: no table needed reading ahead
	}
	r.pids = s.appliers(l, append(r.pids[:0], r.readerPID))
	a, p, err := sampleReads(ctx, r.conn, r.pids, r.pfPIDs)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("cannot sample the target's sessions; for this run, workers = auto stays as it is and the prefetcher keeps the connections it has", "error", err)
		}
		return false, false
	}
	r.idle.saw(a.active + p.active)
	r.t.add(a.active, a.reads)
	r.pf.active += p.active
	r.pf.reads += p.reads
	if r.disk.early(r.pf) {
		s.prefetchWaits(l, true)
	}
	return true, true
}

// judgeWindow judges a window that ended at now: whether the prefetchers'
// reads wait on a disk and, for AutoWorkers, which way to apply; false
// ends tune (the pool it wanted could not be opened).
func (s *Subscriber) judgeWindow(runCtx, ctx context.Context, r *tuning, now time.Time) bool {
	l, t := r.l, &r.t
	if share, ok := r.pf.share(); ok {
		waits, changed := r.disk.judge(share)
		if changed {
			s.prefetchWaits(l, waits)
		}
		s.log.Debug("prefetch sessions' read-wait share", "share", math.Round(share*100)/100, "waits", waits)
	}
	if !r.auto {
		r.windowEnd = now.Add(tuneWindow)
		return true
	}
	var pooled, changed bool
	if r.every > 0 {
		r.windowEnd = now.Add(r.every)
		pooled, changed = !l.wantPool.Load(), true
	} else {
		r.windowEnd = now.Add(tuneWindow)
		rows, conns := s.executedRows(l), s.prefetchConns(l)
		moved := (s.tuner.activeWorkers.Load() > 0) == t.pooled
		pooled, changed = t.judge(rows-r.lastRows, conns == r.lastConns && moved)
		r.lastConns = conns
		s.tuner.readShare.Store(math.Float64bits(t.lastShare))
		s.log.Debug("workers = auto: window judged", "read_wait_share", t.lastShare, "rows", rows-r.lastRows, "prefetch_connections", conns, "pooled", pooled)
		r.lastRows = rows
	}
	if !changed {
		return true
	}
	if pooled && l.aupoolSink.Load() == nil {
		p, err := s.openAupoolSink(runCtx, l)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("workers = auto cannot open its workers; applying on the stream reader's connection for this run", "workers", s.cfg.Workers, "error", err)
			}
			return false
		}
		l.aupoolSink.Store(p)
	}
	logAt := slog.LevelInfo
	if r.every > 0 {
		logAt = slog.LevelDebug
	}
	s.log.Log(ctx, logAt, "workers = auto: switching", "workers", map[bool]int{true: s.cfg.Workers, false: 0}[pooled], "read_wait_share", math.Round(t.lastShare*100)/100,
		"cooldown", (time.Duration(t.cooldown) * tuneWindow).String())
	l.wantPool.Store(pooled)
	return true
}

// executedRows counts the rows the run's appliers (the reader's and the
// workers') have changed, committed or not: the reader commits groups of
// thousands of changes, so what it has committed moves in lumps, and a
// window without a commit would look like a window without work.
func (s *Subscriber) executedRows(l *loop) int64 {
	n := l.app.Tune(apply.DiskUnjudged, nil).Executed
	if p := l.aupoolSink.Load(); p != nil {
		for _, w := range p.workers {
			n += w.shown.Load().Tune(apply.DiskUnjudged, nil).Executed
		}
	}
	return n
}

// prefetchConns counts the reader's own prefetch connections open (the
// workers of workers = auto share them).
func (s *Subscriber) prefetchConns(l *loop) int {
	return l.app.Tune(apply.DiskUnjudged, nil).PrefetchConns
}

// prefetchers appends the backends of the run's prefetch connections: the
// reader's, or those of the workers' shared prefetcher.
func (s *Subscriber) prefetchers(l *loop, pids []uint32) []uint32 {
	pids = l.app.Tune(apply.DiskUnjudged, pids).PrefetchPIDs
	for _, w := range s.workersNow() {
		pids = w.app.Tune(apply.DiskUnjudged, pids).PrefetchPIDs
	}
	return pids
}

// prefetchWaits tells the run's prefetchers whether their reads wait on a
// disk.
func (s *Subscriber) prefetchWaits(l *loop, wait bool) {
	verdict := apply.DiskFast
	if wait {
		verdict = apply.DiskWaiting
	}
	l.app.Tune(verdict, nil)
	for _, w := range s.workersNow() {
		w.app.Tune(verdict, nil)
	}
}

// readAheadWanted tells the run's appliers whether reading ahead pays
// (see backlog.go).
func (s *Subscriber) readAheadWanted(l *loop, on bool) {
	l.app.ReadAheadWanted(on)
	for _, w := range s.workersNow() {
		w.app.ReadAheadWanted(on)
	}
}

// workersNow returns the run's pool's workers, if it has a pool.
func (s *Subscriber) workersNow() []*worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pool == nil {
		return nil
	}
	return s.pool.workers
}

// appliers appends the backends of the workers once the pool is open.
func (s *Subscriber) appliers(l *loop, pids []uint32) []uint32 {
	if p := l.aupoolSink.Load(); p != nil {
		for _, w := range p.workers {
			pids = append(pids, w.app.Tune(apply.DiskUnjudged, nil).PID)
		}
	}
	return pids
}

// openAupoolSink opens the workers of workers = auto; they read ahead through
// the stream reader's prefetcher, so that a run has one whichever applies.
func (s *Subscriber) openAupoolSink(ctx context.Context, l *loop) (*pool, error) {
	tcfg := s.cfg.Target
	tcfg.AppName = s.targetName()
	tcfg.AheadOfOrder = s.cfg.CommitOrder == CommitDependency
	p, err := openPool(ctx, s.openTarget, tcfg, s.cfg.Workers, s.cfg.Group, l.tracker, s.log)
	if err != nil {
		return nil, err
	}
	for _, w := range p.workers {
		w.app.ShareReadAhead(l.app)
	}
	p.start(ctx)
	s.mu.Lock()
	s.pool = p
	s.mu.Unlock()
	return p, nil
}

// retune switches the loop between applying itself and handing units to
// the pool when the tuner wants it and the loop is between transactions:
// everything taken so far is committed first, so that the two never apply
// at once.
func (l *loop) retune(ctx context.Context) error {
	if !l.s.cfg.AutoWorkers {
		return nil // asked after every message: the common case first
	}
	_, pooled := l.sink.(*poolSink)
	want := l.wantPool.Load()
	if want == pooled || l.core.InTxn() || l.core.InStream() || l.held != nil {
		return nil
	}
	var p *pool
	if want {
		if p = l.aupoolSink.Load(); p == nil {
			return nil
		}
	}
	if err := l.commitTaken(ctx); err != nil {
		return err
	}
	if p != nil {
		synced := l.app.Synced()
		for _, w := range p.workers {
			w.app.SetSynced(synced)
			w.app.Warn = l.app.Warn
		}
		// Relations described while the loop applied; only the latest
		// description of each matters.
		for _, rel := range l.rels {
			p.relation(rel)
		}
	}
	n := 0
	l.sink = l.reader
	if p != nil {
		n = len(p.workers)
		l.sink = &poolSink{p: p, keys: l.app}
	}
	l.s.tuner.activeWorkers.Store(int32(n))
	l.s.tuner.workerSwitches.Add(1)
	return nil
}
