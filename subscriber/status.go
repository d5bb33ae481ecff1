package subscriber

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/conflict"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/tablesync"
)

// States of a subscriber, as Status reports them.
const (
	StateStarting  = "starting"  // connecting and checking the setup
	StateCopying   = "copying"   // initial copy of existing rows
	StateStreaming = "streaming" // applying the stream
	// StateReconnecting: a fault ended a run; the next starts soon.
	StateReconnecting = "reconnecting"
	// StateWaiting: the target lacks a resource or takes no writes for
	// now (Status.Waiting says which); the next run starts soon.
	StateWaiting = "waiting"
	StateStopped = "stopped" // Run returned without an error
	StateFailed  = "failed"  // Run returned an error
)

// Status is a snapshot of the subscriber's progress.
type Status struct {
	State   string
	Started time.Time
	// Received is the end of the last change received; SourceWALEnd the
	// publisher's WAL end as of its last message; Applied and Durable
	// the positions committed, and committed and flushed, on the target.
	Received, Applied, Durable, SourceWALEnd parapply.LSN
	// Lag is the age of the last applied source commit while more is
	// waiting; zero when caught up.
	Lag time.Duration
	// LastCommit is the source commit time of the last transaction
	// applied.
	LastCommit         time.Time
	Txns, Groups, Rows int64
	Missing, Collapsed int64
	// Conflicts counts the conflicts detected and resolved (see
	// docs/conflicts.md).
	Conflicts                 int64
	Inserts, Updates, Deletes int64
	Statements, Replays       int64
	// Prefetched counts the rows read ahead for coming updates and
	// deletes, and the values of coming inserts looked up in large
	// indexes; PrefetchDropped those not read (queue full, or applied first).
	Prefetched, PrefetchDropped int64
	// PrefetchConns counts the prefetch connections open.
	PrefetchConns int
	// PrefetchWait is how long statements waited, before they were sent,
	// for their rows to be read ahead (reads that wait on a disk).
	PrefetchWait time.Duration
	// QueueBytes holds the bytes of transactions handed to workers and not
	// yet committed; StreamBytes those of streamed transactions received
	// before their commit.
	QueueBytes, StreamBytes int64
	// CommitDelay is the distribution of the time from a source commit to
	// the target commit that applied it (the last transaction of each
	// target transaction), in seconds, measured on parapply's clock.
	CommitDelay HistogramSnapshot
	// Tables holds committed changes per published table, by name.
	Tables []TableStatus
	// Workers holds per-worker figures when transactions are applied by
	// workers (with AutoWorkers, once the pool was first opened).
	Workers []WorkerStatus
	// AutoWorkers is set with workers = auto; ActiveWorkers is how many
	// workers apply now (0: the stream reader), WorkerSwitches how often
	// auto switched, ReadWaitShare the share of the last judged window's
	// active samples of the appliers' sessions that waited on data reads.
	AutoWorkers    bool
	ActiveWorkers  int
	WorkerSwitches int64
	ReadWaitShare  float64
	// Copy is the initial copy's progress, once one has started.
	Copy *tablesync.Progress
	// SyncStandby is true while the publisher names parapply in its
	// synchronous_standby_names.
	SyncStandby bool
	// Binary is true when the current run's values travel in binary (see
	// Config.Binary).
	Binary bool
	// Behind is true while the current run is behind the publisher (its
	// changes arrive two seconds or more after their commit; it keeps up
	// again under one): then it reads ahead (prefetch) and workers = auto
	// weighs the workers; a run that keeps up does neither (see
	// docs/architecture.md). False unless a run is streaming.
	Behind bool
	// Streamed transactions: bytes written to spill files, appliers in
	// flight now, and how many committed were applied in flight and how
	// many at their commit.
	SpillBytes                         int64
	StreamsInFlight                    int64
	StreamedInFlight, StreamedAtCommit int64
	// Skipped counts source transactions skipped at parapply skip's
	// request, none of their changes applied.
	Skipped int64
	// DDL counts the schema changes from the publisher run on the target
	// (ddl = apply).
	DDL int64
	// TombstonesPruned counts the records of deletes on the target
	// (detect_update_deleted) pruned once no remote update could be
	// concurrent with them; TombstonesExpired those dropped earlier, at
	// max_retention_duration (an update of such a row is then reported
	// as update_missing).
	TombstonesPruned, TombstonesExpired int64
	// Reconnects counts faults ridden out by starting a new run, by cause
	// in the order of FaultCauses.
	Reconnects [len(FaultCauses)]int64
	// Waiting is what parapply waits for on the target while it lacks a
	// resource or takes no writes; nil while it waits for nothing.
	Waiting *Wait
	// Sequences is the last sequence sync (zero At: none yet), and
	// SequenceResults what it did to each sequence; SequenceError the
	// error of the last one that failed ("" if it succeeded).
	Sequences       sequences.Summary
	SequenceResults []sequences.Result
	SequenceError   string
	// Retained is the WAL the slot keeps on the publisher (its current
	// WAL minus the slot's restart_lsn), as last read during the initial
	// copy, when the stream is not read and nothing else says how far
	// behind the target falls; 0 if no copy ran.
	Retained int64
}

// LagBytes is the publisher WAL the target has still to catch up on: the
// publisher's WAL end minus applied; during the copy, and while nothing is
// applied yet, the WAL the slot retains (Retained), since applied means
// nothing then.
func (st Status) LagBytes() int64 {
	if st.State == StateCopying || st.Applied == 0 {
		return st.Retained
	}
	if st.SourceWALEnd > st.Applied {
		return int64(st.SourceWALEnd - st.Applied)
	}
	return 0
}

// CopyEstimate says how far the copy p is, and the time it has left: the
// rows' at the rate so far (the share of rows copied against the
// publisher's statistics), plus the index phase's (p.IndexLeft; the rows'
// is none once every table's rows are in, p.Building); the percentage is
// of the time so far against that time plus the time left (the share of
// rows copied when no index is to build), below 100 until every table is
// done, whatever the estimates. ok is false while nothing can be estimated
// (no rows copied yet, or no statistics, before the index phase).
func CopyEstimate(p tablesync.Progress) (percent float64, left time.Duration, ok bool) {
	if p.TablesDone == p.Tables && p.Tables > 0 {
		return 100, 0, true
	}
	if !p.Building {
		if p.EstRows <= 0 || p.Rows <= 0 {
			return 0, 0, false
		}
		f := min(float64(p.Rows)/float64(p.EstRows), 0.99)
		left = time.Duration(float64(p.Elapsed) * (1 - f) / f)
	}
	left += p.IndexLeft
	if p.Elapsed+left <= 0 {
		return 0, left, true
	}
	return min(100*float64(p.Elapsed)/float64(p.Elapsed+left), 99), left, true
}

// kept is what Status reports across runs and between them: the positions
// the last run reached (or the progress row recorded, before the run's
// first apply), the publisher's WAL as read during the copy, and the last
// sequence sync's results.
type kept struct {
	pos        atomic.Pointer[keptPositions]
	walNow     atomic.Uint64
	retained   atomic.Int64
	seqResults atomic.Pointer[[]sequences.Result]
}

type keptPositions struct {
	applied, durable parapply.LSN
	lastCommit       time.Time
}

// note keeps positions known so far, never moving one back (a new run
// starts from the durable position, which may be behind what the last
// run applied) and never to zero.
func (k *kept) note(applied, durable parapply.LSN, lastCommit time.Time) {
	for {
		old := k.pos.Load()
		n := &keptPositions{applied, durable, lastCommit}
		if old != nil {
			n.applied, n.durable = max(n.applied, old.applied), max(n.durable, old.durable)
			if n.lastCommit.Before(old.lastCommit) {
				n.lastCommit = old.lastCommit
			}
		}
		if k.pos.CompareAndSwap(old, n) {
			return
		}
	}
}

// TableStatus is one table's committed changes and conflicts.
type TableStatus struct {
	Name                                 string
	Inserts, Updates, Deletes, Truncates int64
	UpdateMissing, DeleteMissing         int64
	// Conflicts counts the conflicts resolved on the table, by type
	// (update_missing and delete_missing too); types with none are absent.
	Conflicts map[conflict.Type]int64
}

// WorkerStatus is one worker's share of the work.
type WorkerStatus struct {
	Worker      int
	Txns, Units int64 // source transactions, and target transactions they were applied in
	// UnitsApplied counts the units those target transactions held (a
	// worker puts consecutive ready units in one; see pool.take).
	UnitsApplied int64
	Rows         int64
	// Busy is time spent applying; DependencyWait, time idle while
	// transactions in flight could not start; CommitWait, time waiting for
	// earlier transactions to commit first.
	Busy, DependencyWait, CommitWait time.Duration
	// Retries counts transactions tried again (deadlock, serialization
	// failure, lock wait past lock_timeout, unique violation); RetriesBy
	// splits them in the order of RetryCauses.
	Retries   int64
	RetriesBy [len(RetryCauses)]int64
}

// Status reports progress; safe to call from any goroutine.
func (s *Subscriber) Status() Status {
	s.mu.Lock()
	tr, ap, p, started := s.tracker, s.applier, s.pool, s.started
	s.mu.Unlock()
	st := Status{State: s.runs.state.Load().(string), Started: started, Received: parapply.LSN(s.stats.received.Load()),
		StreamBytes: s.stats.streamBytes.Load(), CommitDelay: s.stats.delays.Snapshot(), Copy: s.stats.copied.Load(), SyncStandby: s.runs.syncStandby.Load(), Binary: s.runs.binary.Load(),
		SpillBytes: s.stats.spilled.Load(), StreamsInFlight: s.stats.inflight.Load(), StreamedInFlight: s.stats.streamedInFlight.Load(), StreamedAtCommit: s.stats.streamedAtCommit.Load(), DDL: s.stats.ddl.Load(),
		Skipped: s.stats.skipped.Load(), TombstonesPruned: s.stats.tombPruned.Load(), TombstonesExpired: s.stats.tombExpired.Load()}
	// Only a run that streams is behind or not: stopped, reconnecting or
	// copying, the last run's verdict would be stale.
	st.Behind = st.State == StateStreaming && !s.runs.caughtUp.Load()
	s.statusPositions(&st, tr)
	if v := s.kept.seqResults.Load(); v != nil {
		st.SequenceResults = *v
	}
	if v := s.seq.summary.Load(); v != nil {
		st.Sequences = *v
	}
	if v := s.seq.err.Load(); v != nil {
		st.SequenceError = *v
	}
	for i := range st.Reconnects {
		st.Reconnects[i] = s.runs.reconnects[i].Load()
	}
	if w := s.runs.wait.Load(); w != nil {
		st.Waiting = w.status(s.targetDB)
	}
	st.AutoWorkers, st.ActiveWorkers = s.cfg.AutoWorkers, int(s.tuner.activeWorkers.Load())
	st.WorkerSwitches, st.ReadWaitShare = s.tuner.workerSwitches.Load(), math.Float64frombits(s.tuner.readShare.Load())
	apps := []*apply.Applier{}
	if ap != nil {
		apps = append(apps, ap)
	}
	if p != nil {
		apps = append(apps, statusWorkers(&st, p)...)
	}
	past := &apply.Applier{}
	s.mu.Lock()
	past.Stats.Absorb(&s.past)
	s.mu.Unlock()
	apps = append(apps, past)
	sumAppliers(&st, apps)
	st.Tables = s.statusTables()
	return st
}

// statusPositions fills in the positions: the current run's tracker's,
// or between runs what was reached, and the publisher's WAL end, the lag
// and the WAL the slot retains.
func (s *Subscriber) statusPositions(st *Status, tr *progress.Tracker) {
	if src := s.runs.src.Load(); src != nil {
		st.SourceWALEnd = max(src.WALEnd(), st.Received)
	}
	k := s.kept.pos.Load()
	if tr != nil {
		st.Applied, st.Durable, st.LastCommit = tr.Positions()
	} else if k != nil {
		// Between runs and after the last: what was reached.
		st.Applied, st.Durable = k.applied, k.durable
	}
	if k != nil && st.LastCommit.IsZero() {
		st.LastCommit = k.lastCommit
	}
	// A keepalive moves applied past the last change received:
	// everything before it has been received, too.
	st.Received = max(st.Received, st.Applied)
	if st.Received > st.Applied && !st.LastCommit.IsZero() {
		st.Lag = time.Since(st.LastCommit)
	}
	st.SourceWALEnd = max(st.SourceWALEnd, parapply.LSN(s.kept.walNow.Load()))
	st.Retained = s.kept.retained.Load()
}

// statusWorkers fills in the pool's queue and each worker's figures, and
// returns the workers' appliers.
func statusWorkers(st *Status, p *pool) []*apply.Applier {
	p.mu.Lock()
	st.QueueBytes = int64(p.bytes)
	p.mu.Unlock()
	var apps []*apply.Applier
	for _, w := range p.workers {
		wa := w.shown.Load()
		apps = append(apps, wa)
		ws := WorkerStatus{
			Worker: w.n, Txns: wa.Stats.Txns.Load(), Units: w.stats.Units.Load(), UnitsApplied: w.stats.UnitsApplied.Load(), Rows: wa.Stats.Rows(),
			Busy: time.Duration(w.stats.Busy.Load()), DependencyWait: time.Duration(w.stats.DependencyWait.Load()),
			CommitWait: time.Duration(w.stats.CommitWait.Load()), Retries: w.stats.Retries.Load(),
		}
		for i := range ws.RetriesBy {
			ws.RetriesBy[i] = w.stats.RetriesBy[i].Load()
		}
		st.Workers = append(st.Workers, ws)
	}
	return apps
}

// sumAppliers adds up the figures of the appliers: the current run's and,
// as one, the earlier runs'.
func sumAppliers(st *Status, apps []*apply.Applier) {
	for _, a := range apps {
		st.Txns += a.Stats.Txns.Load()
		st.Groups += a.Stats.Groups.Load()
		st.Collapsed += a.Stats.Collapsed.Load()
		st.Inserts += a.Stats.Inserts.Load()
		st.Updates += a.Stats.Updates.Load()
		st.Deletes += a.Stats.Deletes.Load()
		st.Rows += a.Stats.Rows()
		st.Missing += a.Stats.Missing.Load()
		st.Conflicts += a.Stats.Conflicts.Load()
		st.Statements += a.Stats.Statements.Load()
		st.Replays += a.Stats.Replays.Load()
		rows, dropped, _ := a.Prefetched()
		st.Prefetched += rows
		st.PrefetchDropped += dropped
		st.PrefetchConns += a.PrefetchConns()
		st.PrefetchWait += time.Duration(a.Stats.PrefetchWait.Load())
	}
}

// statusTables returns each published table's committed changes and
// conflicts, by name.
func (s *Subscriber) statusTables() []TableStatus {
	var tables []TableStatus
	for _, name := range s.stats.tallies.Names() {
		t := s.stats.tallies.For(name)
		ts := TableStatus{Name: name, Inserts: t.Inserts.Load(), Updates: t.Updates.Load(), Deletes: t.Deletes.Load(),
			Truncates: t.Truncates.Load(), UpdateMissing: t.UpdateMissing.Load(), DeleteMissing: t.DeleteMissing.Load()}
		for _, ty := range conflict.Types {
			if n := t.Conflict(ty).Load(); n > 0 {
				if ts.Conflicts == nil {
					ts.Conflicts = map[conflict.Type]int64{}
				}
				ts.Conflicts[ty] = n
			}
		}
		tables = append(tables, ts)
	}
	return tables
}

// DelayBuckets are the upper bounds, in seconds, of the commit delay
// histogram: from a few milliseconds (keeping up) to ten minutes (far
// behind).
var DelayBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// Histogram counts observations in fixed buckets: client_golang's
// histogram counts without locks, so that the commit path pays a few atomic
// adds, and reads its buckets, count and sum as of one moment.
type Histogram struct {
	bounds []float64
	h      prometheus.Histogram
}

// HistogramSnapshot is a Histogram's content at one moment; Counts[i]
// counts observations at most Bounds[i] (cumulative), Count all of them.
type HistogramSnapshot struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

// NewHistogram returns an empty histogram with the given bucket bounds
// (increasing; client_golang panics on others).
func NewHistogram(bounds []float64) *Histogram {
	// Not registered: package metrics exports Status.CommitDelay at
	// scrape time, read with the rest of the status.
	return &Histogram{bounds: bounds, h: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "parapply_commit_delay_seconds",
		Help:    "Time from a source commit to the target commit that applied it.",
		Buckets: bounds,
	})}
}

// Observe adds one value.
func (h *Histogram) Observe(v float64) { h.h.Observe(v) }

// Snapshot returns the cumulative counts.
func (h *Histogram) Snapshot() HistogramSnapshot {
	var m dto.Metric
	_ = h.h.Write(&m) // a histogram's Write does not fail
	ph := m.GetHistogram()
	s := HistogramSnapshot{Bounds: h.bounds, Counts: make([]uint64, len(h.bounds)), Count: ph.GetSampleCount(), Sum: ph.GetSampleSum()}
	for i, b := range ph.GetBucket() {
		if i < len(s.Counts) {
			s.Counts[i] = b.GetCumulativeCount()
		}
	}
	return s
}
