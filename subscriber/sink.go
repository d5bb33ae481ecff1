package subscriber

import (
	"context"
	"time"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/pgoutput"
	"github.com/parapply/parapply/progress"
)

// sink is where the loop puts the source transactions it decodes: applied
// here, on the stream reader's own connection (readerSink), or handed to the
// pool of workers in units (poolSink). The loop decides what is skipped, when
// a group ends and when everything must be committed (commitTaken); the sink
// only takes.
type sink interface {
	// begin starts a source transaction.
	begin(txn apply.Txn)
	// relation notes a relation message the loop's applier has loaded: m
	// when it came between transactions or inside one, nil when inside a
	// stream block (whose changes the sink sees only at commit).
	relation(rel *parapply.Relation, m *pgoutput.RelationMessage)
	// change takes a row change or a truncate of the open transaction.
	change(ctx context.Context, m pgoutput.Message) error
	// end ends the open transaction, which ends at end.
	end(txn apply.Txn, end parapply.LSN)
	// group describes what was taken and is not committed (or handed
	// over) yet: whether there is any, whether a transaction is still
	// open (inTxn is the loop's own view), size and age.
	group(inTxn bool) (open, stillIn bool, changes, bytes int, age time.Duration)
	// maxChanges bounds a group's changes, given group_max_changes.
	maxChanges(limit int) int
	// commitGroup commits the group, or hands it over.
	commitGroup(ctx context.Context) error
	// drain waits until everything taken is committed.
	drain() error
	// quiet reports whether everything taken is committed; an error is
	// that of a commit that failed.
	quiet() (bool, error)
	// busy reports whether the sink would rather the group grew.
	busy() bool
	// failed is closed when the sink failed by itself (a worker's
	// error), which err returns.
	failed() <-chan struct{}
	err() error
}

// readerSink applies on the stream reader's own connection (no workers:
// the least work per change): each group is one target transaction,
// committed while the next is built.
type readerSink struct {
	app     *apply.Applier
	tracker *progress.Tracker
}

func (r *readerSink) begin(txn apply.Txn)                                    { r.app.Begin(txn) }
func (r *readerSink) relation(*parapply.Relation, *pgoutput.RelationMessage) {}
func (r *readerSink) change(ctx context.Context, m pgoutput.Message) error {
	return applyChange(ctx, r.app, m)
}
func (r *readerSink) end(_ apply.Txn, end parapply.LSN) { r.app.End(end) }
func (r *readerSink) group(bool) (open, stillIn bool, changes, bytes int, age time.Duration) {
	_, changes, bytes, age = r.app.GroupSize()
	return r.app.InGroup(), r.app.InTxn(), changes, bytes, age
}
func (r *readerSink) maxChanges(limit int) int { return limit }

// commitGroup lets the target commit while the next group is built; the
// tracker hears of it when it is done (commits on one connection finish in
// order).
func (r *readerSink) commitGroup(ctx context.Context) error {
	return r.app.CommitAsync(ctx, func(c apply.Committed) { record(r.tracker, c) })
}
func (r *readerSink) drain() error { return r.app.Wait() }
func (r *readerSink) quiet() (bool, error) {
	if r.app.InGroup() {
		return false, nil
	}
	busy, err := r.app.Busy()
	return !busy && err == nil, err
}
func (r *readerSink) busy() bool              { return false }
func (r *readerSink) failed() <-chan struct{} { return nil }
func (r *readerSink) err() error              { return nil }

// poolSink builds units of consecutive source transactions, with their
// scheduling keys (read by the reader's applier, which knows every
// relation), and hands them to the pool.
type poolSink struct {
	p       *pool
	keys    *apply.Applier
	cur     *unit
	curOpen time.Time
}

func (t *poolSink) begin(apply.Txn) {
	if t.cur == nil {
		t.cur, t.curOpen = &unit{relSeq: t.p.relSeq()}, time.Now()
	}
}

func (t *poolSink) relation(rel *parapply.Relation, m *pgoutput.RelationMessage) {
	t.p.relation(rel)
	if m != nil && t.cur != nil {
		t.cur.msgs = append(t.cur.msgs, m)
	}
}

// change adds a change to the unit being built, with its scheduling keys.
func (t *poolSink) change(_ context.Context, m pgoutput.Message) error {
	u := t.cur
	var err error
	barrier := false
	switch m := m.(type) {
	case *pgoutput.Insert:
		u.keys, barrier, err = t.keys.RowKeys(m.RelationID, u.keys, nil, m.New)
		u.bytes += tupleBytes(m.New)
	case *pgoutput.Update:
		var old parapply.Tuple
		if m.OldKind != 0 {
			old = m.Old
		}
		u.keys, barrier, err = t.keys.RowKeys(m.RelationID, u.keys, old, m.New)
		u.bytes += tupleBytes(m.Old) + tupleBytes(m.New)
	case *pgoutput.Delete:
		u.keys, barrier, err = t.keys.RowKeys(m.RelationID, u.keys, m.Old, nil)
		u.bytes += tupleBytes(m.Old)
	case *pgoutput.Truncate:
		barrier = true
	}
	u.barrier = u.barrier || barrier
	u.msgs = append(u.msgs, m)
	u.changes++
	return err
}

func (t *poolSink) end(txn apply.Txn, end parapply.LSN) {
	t.cur.txns = append(t.cur.txns, unitTxn{txn: txn, end: end, upto: len(t.cur.msgs)})
}

func (t *poolSink) group(inTxn bool) (open, stillIn bool, changes, bytes int, age time.Duration) {
	if t.cur == nil {
		return false, false, 0, 0, 0
	}
	return true, inTxn, t.cur.changes, t.cur.bytes, time.Since(t.curOpen)
}

// maxChanges keeps units small: workers find independent ones, and merge
// consecutive ready ones into batches of their own size.
func (t *poolSink) maxChanges(limit int) int { return min(limit, unitMaxChanges) }

func (t *poolSink) commitGroup(context.Context) error {
	u := t.cur
	t.cur = nil
	if u == nil || len(u.txns) == 0 {
		return nil
	}
	return t.p.add(u)
}
func (t *poolSink) drain() error            { return t.p.drain() }
func (t *poolSink) quiet() (bool, error)    { return t.cur == nil && t.p.idle(), nil }
func (t *poolSink) busy() bool              { return t.p.busy() }
func (t *poolSink) failed() <-chan struct{} { return t.p.failed }
func (t *poolSink) err() error              { return t.p.err }

// unitMaxChanges bounds, with workers, the changes of the consecutive
// source transactions the reader puts in one unit (a larger transaction is
// a unit by itself): small enough that units over different rows exist to
// run side by side, large enough that the scheduler's cost per unit stays
// small beside the changes'.
const unitMaxChanges = 32

func tupleBytes(t parapply.Tuple) int {
	n := 0
	for _, v := range t {
		n += len(v.Data) + 24
	}
	return n
}
