package subscriber

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/pgoutput"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/schedule"
	"github.com/parapply/parapply/targetdb"
)

// unit is one or more consecutive source transactions that a worker applies
// as one target transaction.
type unit struct {
	msgs    []pgoutput.Message // changes and relation messages, in stream order
	relSeq  int                // relation messages logged before the unit's first message
	txns    []unitTxn
	keys    []schedule.Key
	barrier bool
	bytes   int
	changes int // row changes and truncates
}

// batch is a run of consecutive units a worker applies as one target
// transaction: the oldest ready unit it took, and the units after it that
// the scheduler let it add (see schedule.Scheduler.Extend).
type batch struct {
	ids     []schedule.ID
	units   []*unit
	changes int
	bytes   int
}

func (b *batch) add(id schedule.ID, u *unit) {
	b.ids = append(b.ids, id)
	b.units = append(b.units, u)
	b.changes += u.changes
	b.bytes += u.bytes
}

type unitTxn struct {
	txn  apply.Txn
	end  parapply.LSN
	upto int // msgs[:upto] belong to this and earlier transactions
}

// WorkerStats are one worker's running totals.
type WorkerStats struct {
	// Units counts target transactions committed; UnitsApplied counts the
	// units they held (several consecutive units may share one).
	Units        atomic.Int64
	UnitsApplied atomic.Int64
	// Busy is the time spent applying (nanoseconds).
	Busy atomic.Int64
	// DependencyWait is the time spent idle while transactions were in
	// flight but none could start (nanoseconds).
	DependencyWait atomic.Int64
	// CommitWait is the time spent waiting for earlier transactions to
	// commit first (nanoseconds).
	CommitWait atomic.Int64
	// Retries counts units tried again after a deadlock, a serialization
	// failure, a lock wait past lock_timeout or a unique violation met
	// beside earlier units; RetriesBy splits them by cause (the order of
	// RetryCauses).
	Retries   atomic.Int64
	RetriesBy [len(RetryCauses)]atomic.Int64
}

// RetryCauses name why a worker tried a transaction again, in the order of
// WorkerStats.RetriesBy.
var RetryCauses = [5]string{"deadlock", "serialization_failure", "lock_timeout", "unique_violation", "conflict"}

// pool applies units on persistent worker connections, in parallel where
// the scheduler allows, committing in source order.
type pool struct {
	mu sync.Mutex
	// cond wakes those waiting for a commit (the commit gate, drain, the
	// reader blocked on maxBytes) and work the idle workers; both are
	// broadcast when the pool fails or stops. A unit that becomes ready
	// wakes one idle worker, not all of them.
	cond     *sync.Cond
	work     *sync.Cond
	sched    *schedule.Scheduler
	units    map[schedule.ID]*unit
	bytes    int // bytes of units in flight
	maxBytes int
	// queued counts the changes of units added and not yet taken by a
	// worker; batchMax bounds the changes a worker puts in one target
	// transaction (see budget).
	queued     int
	batchMax   int
	chainMax   int
	batchBytes int
	err        error
	closed     bool
	failed     chan struct{}

	// rels logs the relation messages and the DDLs run on the target
	// that a worker loads before each unit (see relLog).
	rels    relLog
	workers []*worker
	tracker *progress.Tracker
	cfg     apply.Config
	log     *slog.Logger
	wg      sync.WaitGroup

	// Commits reach the tracker in source order: those made ahead of
	// earlier units (commit_order = dependency) wait in reports until
	// every earlier one is in.
	reports *schedule.InOrder[pendingReport]
	out     []pendingReport
	// mark is the last transaction reported; the progress row is moved
	// to it now and then (advance), when units commit ahead of order.
	mark        unitTxn
	advancedTo  parapply.LSN
	advancing   bool
	lastAdvance time.Time
}

type pendingReport struct {
	c    apply.Committed
	last unitTxn
}

// advanceEvery is how often the progress row is moved past transactions
// committed ahead of order, so that parapply.applied stays small.
const advanceEvery = time.Second

type worker struct {
	n     int
	app   *apply.Applier
	shown atomic.Pointer[apply.Applier] // app, for Status from other goroutines
	seen  int                           // relation messages loaded
	// ddlSeen is the relation log's ddlSeq when the worker last loaded its
	// tables' descriptions afresh.
	ddlSeen int
	stats   WorkerStats
	// first is the first unit of the batch being applied (for
	// MayResolve, read from the applier's goroutines).
	first atomic.Uint64
}

// openPool connects n workers to the target with open.
func openPool(ctx context.Context, open func(context.Context, apply.Config, bool) (*apply.Applier, error), cfg apply.Config, n int, limits GroupLimits, tracker *progress.Tracker, log *slog.Logger) (*pool, error) {
	p := &pool{sched: schedule.New(), units: map[schedule.ID]*unit{}, maxBytes: 4 * limits.MaxBytes, failed: make(chan struct{}), tracker: tracker, cfg: cfg, log: log,
		reports: schedule.NewInOrder[pendingReport](), lastAdvance: time.Now(),
		batchMax: min(limits.MaxChanges, defaultBatchMax), chainMax: limits.MaxChanges, batchBytes: limits.MaxBytes}
	p.cond = sync.NewCond(&p.mu)
	p.work = sync.NewCond(&p.mu)
	if n == 1 {
		// One worker: nothing to share out; batches as large as groups.
		p.batchMax = limits.MaxChanges
	}
	for i := 1; i <= n; i++ {
		wcfg := cfg
		wcfg.AppName = fmt.Sprintf("%s worker %d", cfg.AppName, i)
		wcfg.Origin = targetdb.OriginName(cfg.Slot, fmt.Sprintf("w%d", i))
		wcfg.PrefetchPieces = true
		app, err := open(ctx, wcfg, true)
		if err != nil {
			p.closeConns()
			return nil, err
		}
		if i > 1 {
			// One prefetcher for all: its connections stay few.
			app.ShareReadAhead(p.workers[0].app)
		}
		w := &worker{n: i, app: app}
		w.shown.Store(app)
		app.MayResolve = func() bool { return p.oldest(schedule.ID(w.first.Load())) }
		p.workers = append(p.workers, w)
	}
	return p, nil
}

func (p *pool) closeConns() {
	for _, w := range p.workers {
		w.app.Close(context.Background())
	}
}

// start runs the workers until stop.
func (p *pool) start(ctx context.Context) {
	for _, w := range p.workers {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := p.run(ctx, w); err != nil {
				p.fail(err)
			}
		}()
	}
}

// stop ends the workers (rolling back what they have not committed) and
// closes their connections.
func (p *pool) stop() {
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	p.work.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
	p.closeConns()
	for _, w := range p.workers {
		if w.stats.Units.Load() == 0 {
			continue
		}
		p.log.Info("worker's run", "worker", w.n, "units", w.stats.UnitsApplied.Load(), "target_transactions", w.stats.Units.Load(),
			"busy", time.Duration(w.stats.Busy.Load()).Round(time.Millisecond),
			"dependency_wait", time.Duration(w.stats.DependencyWait.Load()).Round(time.Millisecond),
			"commit_order_wait", time.Duration(w.stats.CommitWait.Load()).Round(time.Millisecond), "retries", w.stats.Retries.Load())
	}
}

func (p *pool) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
		close(p.failed)
	}
	p.cond.Broadcast()
	p.work.Broadcast()
}

// add hands a unit to the workers; it blocks while the units in flight
// hold more than maxBytes.
func (p *pool) add(u *unit) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.err == nil && !p.closed && p.bytes > 0 && p.bytes+u.bytes > p.maxBytes {
		p.cond.Wait()
	}
	if p.err != nil {
		return p.err
	}
	id, _ := p.sched.Add(u.keys, u.barrier)
	p.units[id] = u
	p.bytes += u.bytes
	p.queued += u.changes
	p.trimRelations()
	if p.sched.ReadyCount() > 0 {
		p.work.Signal()
	}
	return nil
}

// trimRelations folds the relation messages logged before every unit still
// to apply; the reader calls it (through add) with p.mu held, so no unit
// being built starts before them either.
func (p *pool) trimRelations() {
	if !p.rels.long() {
		return
	}
	upto := p.rels.seq()
	for _, u := range p.units {
		upto = min(upto, u.relSeq)
	}
	p.rels.fold(upto)
}

// relation logs a relation message; the reader calls it in stream order.
func (p *pool) relation(rel *parapply.Relation) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rels.append(rel)
}

// targetChanged notes a DDL run on the target (see relLog).
func (p *pool) targetChanged(synced map[string]parapply.LSN) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rels.targetChanged(synced)
}

// relSeq returns the number of relation messages logged.
func (p *pool) relSeq() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rels.seq()
}

// drain waits until every unit handed over is committed.
func (p *pool) drain() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.err == nil && p.sched.InFlight() > 0 {
		p.cond.Wait()
	}
	return p.err
}

// busy reports whether every worker has a unit to apply.
func (p *pool) busy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sched.InFlight() >= len(p.workers)
}

// idle reports whether no unit is in flight.
func (p *pool) idle() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sched.InFlight() == 0
}

func (p *pool) run(ctx context.Context, w *worker) error {
	for {
		p.mu.Lock()
		var id schedule.ID
		waited := time.Now()
		for {
			if p.err != nil || p.closed {
				p.mu.Unlock()
				return nil
			}
			var ok bool
			if id, ok = p.sched.Next(); ok {
				break
			}
			p.work.Wait()
		}
		if p.sched.InFlight() > 1 {
			w.stats.DependencyWait.Add(int64(time.Since(waited)))
		}
		b := p.take(id)
		if p.sched.ReadyCount() > 0 {
			p.work.Signal() // the next idle worker takes the next batch
		}
		p.mu.Unlock()

		err := p.execute(ctx, w, b)
		if errors.Is(err, errStopped) {
			return nil
		}
		if err != nil {
			return err
		}
		p.mu.Lock()
		for i, id := range b.ids {
			if err == nil {
				err = p.sched.Done(id)
			}
			delete(p.units, id)
			p.bytes -= b.units[i].bytes
		}
		p.cond.Broadcast()
		if p.sched.ReadyCount() > 0 {
			p.work.Signal()
		}
		p.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// Batch sizes: a worker fills its target transaction with ready units up to
// its share of the changes waiting to be taken (so that the backlog spreads
// over every worker), at least batchMin (so that commits stay cheap beside
// the changes when little waits) and at most batchMax (so that a batch holds
// few keys and the next worker finds units that do not wait for it). Units
// that wait for the batch itself (a chain on hot rows, or a table keyed as a
// whole) join it up to group_max_changes (chainMax): no other worker could
// start them sooner, and one statement for many of their rows is cheaper.
const (
	batchMin        = 64
	defaultBatchMax = 512
)

// take builds the batch a worker applies next, from the ready unit id and
// the consecutive units the scheduler lets it add. Called with p.mu held.
func (p *pool) take(id schedule.ID) *batch {
	b := &batch{}
	b.add(id, p.units[id])
	budget := p.budget()
	for b.bytes < p.batchBytes {
		first, last := b.ids[0], b.ids[len(b.ids)-1]
		nid, chained, ok := p.sched.Joinable(first, last)
		if !ok {
			break
		}
		// A unit that waits for this batch could run nowhere else before
		// it commits: it joins up to the group limit. A ready one could,
		// and joins only within the worker's share.
		limit := budget
		if chained {
			limit = p.chainMax
		}
		next := p.units[nid]
		if b.changes+next.changes > limit {
			break
		}
		if _, ok := p.sched.Extend(first, last); !ok {
			break
		}
		b.add(nid, next)
	}
	p.queued -= b.changes
	return b
}

// budget returns how many changes the next batch may hold. Called with
// p.mu held.
func (p *pool) budget() int {
	return max(min(p.queued/len(p.workers), p.batchMax), min(batchMin, p.batchMax))
}

// errStopped means the pool stopped (shutdown, or another worker failed)
// while a unit was being applied; the unit is rolled back.
var errStopped = errors.New("pool stopped")

// maxAttempts bounds how often a unit is tried.
const maxAttempts = 5

// execute applies and commits a unit. A deadlock or serialization failure,
// a lock wait past lock_timeout, or a unique violation, met while earlier
// units were in flight (one of them may hold the lock, or free the value:
// freed values carry no key), is retried: the unit is rolled back and tried
// again once every earlier unit has committed, so that it runs in source
// order with no other unit of parapply's beside it. Met with nothing
// earlier in flight, a unique violation is the target's own and stops
// parapply, and a lock wait past lock_timeout ends the run (errLockStall:
// the lock is held by a streamed transaction applied in flight, or by a
// session outside parapply). A lost connection ends the run at once: what
// the target kept is known only once it is read again (see fault.go).
func (p *pool) execute(ctx context.Context, w *worker, b *batch) error {
	id := b.ids[0]
	w.first.Store(uint64(id))
	for attempt := 1; ; attempt++ {
		alone := p.oldest(id)
		err := p.try(ctx, w, b)
		if err == nil || errors.Is(err, errStopped) {
			return err
		}
		if w.app.Conn().IsClosed() {
			return lostConnection(fmt.Errorf("worker %d: %w", w.n, err))
		}
		cause := retryCause(err, alone)
		if cause == "" && isLockTimeout(err) {
			return errLockStall{fmt.Errorf("worker %d: the oldest transaction in flight waited on a lock longer than lock_timeout: %w", w.n, err)}
		}
		if cause == "" || attempt >= maxAttempts || ctx.Err() != nil {
			return err
		}
		w.stats.Retries.Add(1)
		w.stats.RetriesBy[slices.Index(RetryCauses[:], cause)].Add(1)
		p.log.Warn("retrying a transaction on its own", "worker", w.n, "cause", cause, "attempt", attempt+1, "error", err)
		w.app.Abort(context.Background())
		// The failed attempt may have loaded relation descriptions from
		// inside the unit: start again from those before it.
		w.seen = 0
		if !p.waitOldest(id) {
			return errStopped
		}
	}
}

// isLockTimeout reports a statement cancelled by lock_timeout.
func isLockTimeout(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == pgerrcode.LockNotAvailable
}

// retryCause names why a failed unit may be tried again, or returns "";
// alone says every earlier unit had committed when the attempt began.
func retryCause(err error, alone bool) string {
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == pgerrcode.DeadlockDetected:
		return RetryCauses[0]
	case errors.As(err, &pe) && pe.Code == pgerrcode.SerializationFailure:
		return RetryCauses[1]
	case isLockTimeout(err) && !alone:
		return RetryCauses[2]
	case errors.As(err, &pe) && pe.Code == pgerrcode.UniqueViolation && !alone:
		return RetryCauses[3]
	case apply.ConflictFound(err) && !alone:
		// Not resolved: earlier units were in flight (see
		// apply.Applier.MayResolve).
		return RetryCauses[4]
	}
	return ""
}

// oldest reports whether every unit before id has committed.
func (p *pool) oldest(id schedule.ID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sched.MayCommit(id)
}

// waitOldest waits until every unit before id has committed; false if the
// pool stopped meanwhile.
func (p *pool) waitOldest(id schedule.ID) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.sched.MayCommit(id) && p.err == nil && !p.closed {
		p.cond.Wait()
	}
	return p.err == nil && !p.closed
}

// awaitGone terminates the target backend pid, if it is still there, and
// waits until it has exited.
func awaitGone(ctx context.Context, app *apply.Applier, pid uint32) error {
	for i := 0; ; i++ {
		var there bool
		err := app.Conn().QueryRow(ctx, `SELECT pg_catalog.pg_terminate_backend(pid) OR true FROM pg_catalog.pg_stat_activity WHERE pid = $1`, int64(pid)).Scan(&there)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("ending the lost session's backend (pid %d): %w", pid, err)
		}
		if i == 300 {
			return fmt.Errorf("the lost session's backend (pid %d) is still there after 30s", pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// try applies a batch and commits it once every earlier unit has.
func (p *pool) try(ctx context.Context, w *worker, b *batch) error {
	began := time.Now()
	// Between target transactions, now and then: the worker's tables
	// are compared with the target's catalog.
	if err := w.app.RefreshIfDue(ctx); err != nil {
		return err
	}
	for _, u := range b.units {
		if err := p.catchUp(ctx, w, u); err != nil {
			return err
		}
		rels, err := w.apply(ctx, u)
		w.seen = u.relSeq + rels
		if err != nil {
			return err
		}
	}
	if err := w.app.Prepare(ctx); err != nil {
		return err
	}
	w.stats.Busy.Add(int64(time.Since(began)))

	if !p.cfg.AheadOfOrder {
		waited := time.Now()
		ok := p.waitOldest(b.ids[0])
		w.stats.CommitWait.Add(int64(time.Since(waited)))
		if !ok {
			w.app.Abort(context.Background())
			return errStopped
		}
	}
	began = time.Now()
	c, err := w.app.Commit(ctx)
	if err != nil {
		return err
	}
	w.stats.Busy.Add(int64(time.Since(began)))
	w.stats.Units.Add(1)
	w.stats.UnitsApplied.Add(int64(len(b.ids)))
	p.report(b, c)
	if p.cfg.AheadOfOrder {
		p.advance(ctx, w)
	}
	return nil
}

// catchUp loads into w's applier the relation messages logged before u
// that it has not loaded yet.
func (p *pool) catchUp(ctx context.Context, w *worker, u *unit) error {
	p.mu.Lock()
	c := p.rels.catchUp(w.seen, u.relSeq)
	p.mu.Unlock()
	if w.ddlSeen != c.ddlSeq {
		w.ddlSeen = c.ddlSeq
		w.app.Reload()
		if c.synced != nil {
			w.app.SetSynced(c.synced)
		}
	}
	// Only the latest description of each relation matters: nothing
	// between them is applied here.
	latest := map[uint32]int{}
	for i, rel := range c.rels {
		latest[rel.ID] = i
	}
	for i, rel := range c.rels {
		if latest[rel.ID] == i {
			if err := w.app.Relation(ctx, rel); err != nil && !(c.beforeDDL[rel] && errors.Is(err, apply.ErrSchema)) {
				return err
			}
		}
	}
	w.seen = u.relSeq
	return nil
}

// report hands the commit of a batch's units to the tracker once every
// earlier unit's has been: positions reach it in source order whatever the
// commit order. Each unit is reported at its own last transaction, so that
// the tracker never passes a unit committed by another worker later.
func (p *pool) report(b *batch, c apply.Committed) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, id := range b.ids {
		last := b.units[i].txns[len(b.units[i].txns)-1]
		uc := c
		uc.End, uc.CommitTime = last.end, last.txn.CommitTime
		p.out = p.reports.Put(id, pendingReport{uc, last}, p.out[:0])
		for _, r := range p.out {
			record(p.tracker, r.c)
			p.mark = r.last
		}
	}
}

// advance moves the progress row to the last transaction every earlier one
// of which has committed, at most every advanceEvery, on w's connection
// (between units); the groups it passes leave parapply.applied. A failure
// is only logged: the rows it would have removed still say what they say.
func (p *pool) advance(ctx context.Context, w *worker) {
	p.mu.Lock()
	m := p.mark
	if p.advancing || m.end <= p.advancedTo || time.Since(p.lastAdvance) < advanceEvery {
		p.mu.Unlock()
		return
	}
	p.advancing = true
	p.mu.Unlock()
	err := progress.Advance(ctx, w.app.Conn(), p.cfg.Slot, m.txn.CommitLSN, m.end, m.txn.XID, m.txn.CommitTime)
	p.mu.Lock()
	p.advancing, p.lastAdvance = false, time.Now()
	if err == nil {
		p.advancedTo = m.end
	}
	p.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		p.log.Warn("moving the progress row past transactions committed ahead of order", "worker", w.n, "error", err)
	}
}

// record reports a commit to the tracker; with workers, units reach it in
// source order, since each commits only after every earlier one.
func record(tr *progress.Tracker, c apply.Committed) {
	tr.Committed(c.End, c.Local, c.CommitTime)
	if c.Durable {
		tr.AllDurable()
	} else {
		tr.Flushed(c.Flushed)
	}
}

// apply applies a unit's source transactions in one target transaction,
// leaving it open, and returns how many relation messages it loaded.
func (w *worker) apply(ctx context.Context, u *unit) (rels int, err error) {
	from := 0
	for _, t := range u.txns {
		w.app.Begin(t.txn)
		for _, m := range u.msgs[from:t.upto] {
			if r, ok := m.(*pgoutput.RelationMessage); ok {
				if err := w.app.Relation(ctx, &r.Relation); err != nil {
					return rels, err
				}
				rels++
				continue
			}
			if err := applyChange(ctx, w.app, m); err != nil {
				return rels, err
			}
		}
		w.app.End(t.end)
		from = t.upto
	}
	return rels, nil
}

// applyChange applies one row change or truncate.
func applyChange(ctx context.Context, a *apply.Applier, m pgoutput.Message) error {
	switch m := m.(type) {
	case *pgoutput.Insert:
		return a.Insert(ctx, m.RelationID, m.New)
	case *pgoutput.Update:
		return a.Update(ctx, m.RelationID, m.OldKind, m.Old, m.New)
	case *pgoutput.Delete:
		return a.Delete(ctx, m.RelationID, m.OldKind, m.Old)
	case *pgoutput.Truncate:
		return a.Truncate(ctx, m.RelationIDs, m.Cascade, m.RestartIdentity)
	}
	return fmt.Errorf("unexpected %T among a transaction's changes (internal error)", m)
}
