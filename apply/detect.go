package apply

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/citus"
	"github.com/parapply/parapply/conflict"
	"github.com/parapply/parapply/targetdb"
)

// SetDetection turns conflict detection on (d set) or off for the
// statements queued from now on.
func (a *Applier) SetDetection(d *Detection) { a.detector.config = d }

// on reports whether conflicts are detected on table t: detection is on,
// and t is not a table Citus manages that it leaves out (SkipCitus).
func (d *detector) on(t *Table) bool {
	return d.config != nil && !(d.config.SkipCitus && t.Citus != nil && t.Citus.Kind != citus.Local)
}

// rowTxn says that the rows of a run up to upto (exclusive) that no earlier
// entry holds came from source transaction txn.
type rowTxn struct {
	upto int
	txn  Txn
}

// noteTxn records that the run's last row came from txn.
func (r *run) noteTxn(txn Txn) {
	if n := len(r.txns); n > 0 && r.txns[n-1].txn.XID == txn.XID {
		r.txns[n-1].upto = r.rows
		return
	}
	r.txns = append(r.txns, rowTxn{upto: r.rows, txn: txn})
}

// retitle gives the rows of txn.XID the transaction's commit LSN and time.
func (r *run) retitle(txn Txn) {
	for i := range r.txns {
		if r.txns[i].txn.XID == txn.XID {
			r.txns[i].txn = txn
		}
	}
}

// retitle does run.retitle for every run not sent yet.
func (b *batcher) retitle(txn Txn) {
	for _, r := range b.runs {
		r.retitle(txn)
	}
	for _, r := range b.ready {
		r.retitle(txn)
	}
}

// row returns a run of r's row i alone, for a replay row by row.
func (r *run) row(i int) *run {
	one := &run{cols: r.cols, split: r.split, table: r.table, kind: r.kind, shape: r.shape, sql: r.sql, rows: 1, closed: true}
	one.params = make([][][]byte, len(r.params))
	for j, p := range r.params {
		one.params[j] = p[i : i+1]
		one.bytes += len(p[i])
	}
	for _, rt := range r.txns {
		if i < rt.upto {
			one.txns = []rowTxn{{upto: 1, txn: rt.txn}}
			break
		}
	}
	return one
}

// encode returns the run's parameters (see Table.encodeParam), in memory
// from ar.
func (r *run) encode(ar *arena) ([]any, error) {
	args := make([]any, len(r.params), len(r.params)+5) // room for resolvingOp's five
	for i, p := range r.params {
		a, err := r.table.encodeParam(ar, r.cols[i], p)
		if err != nil {
			return nil, err
		}
		args[i] = a
	}
	return args, nil
}

// txnColumns returns, per source transaction of the run in row order, the
// last row number it holds (1-based), its xid, commit LSN, commit time and
// origin as text (NULL where unknown, or made on the publisher).
func (r *run) txnColumns() (upto, xid, lsn, at, origin [][]byte) {
	for _, rt := range r.txns {
		var l, t, o []byte
		if rt.txn.Origin != "" {
			o = []byte(rt.txn.Origin)
		}
		origin = append(origin, o)
		if rt.txn.CommitLSN != 0 {
			l = []byte(rt.txn.CommitLSN.String())
		}
		if !rt.txn.CommitTime.IsZero() {
			t = []byte(rt.txn.CommitTime.UTC().Format("2006-01-02 15:04:05.999999") + "+00")
		}
		upto = append(upto, []byte(fmt.Sprint(min(rt.upto, r.rows))))
		xid, lsn, at = append(xid, []byte(fmt.Sprint(rt.txn.XID))), append(lsn, l), append(at, t)
	}
	return upto, xid, lsn, at, origin
}

// hasResolving reports whether the run has a resolving statement (see
// Detection.resolvingSQL).
func (r *run) hasResolving() bool {
	return r.kind == 'U' || r.kind == 'D' || (r.kind == 'I' && r.cols[r.split] >= 0)
}

// resolvingOps returns ops with the statement of every insert run (every
// run, with all) replaced by its resolving one (see resolve.go).
func (d *detector) resolvingOps(ops []op, all bool) ([]op, error) {
	out := make([]op, len(ops))
	for i, o := range ops {
		out[i] = o
		if o.run != nil && !o.resolving && (all || o.run.kind == 'I') && d.on(o.run.table) {
			if sql := d.statement(o.run, resolvingStatement); sql != "" {
				var err error
				if out[i], err = d.resolvingOp(o.run, sql, o.what); err != nil {
					return nil, err
				}
			}
		}
	}
	return out, nil
}

// Kinds of statement of conflict detection (see resolve.go).
const (
	checkedStatement = iota
	fastStatement
	resolvingStatement
)

// sqlKey names a statement of conflict detection: the table, the run's
// kind and shape, and which statement.
type sqlKey struct {
	t     *Table
	kind  byte
	shape string
	which int
}

// statement returns the checked, fast or resolving statement for run r,
// building it once per table, kind and shape. Resolving ones are asked for by
// the session's sender only (see roundTrip), the others by the builder: each
// side has its own map.
func (d *detector) statement(r *run, which int) string {
	m := &d.builtSQL
	if which == resolvingStatement {
		m = &d.resolvingSQL
	}
	if *m == nil {
		*m = map[sqlKey]string{}
	}
	k := sqlKey{r.table, r.kind, string(r.shape), which}
	sql, ok := (*m)[k]
	if !ok {
		switch which {
		case checkedStatement:
			match := ""
			if r.table.suppresses(r.kind) {
				match = matchSQL(r)
			}
			sql = d.config.checkedSQL(r.sql, r.kind, match)
		case fastStatement:
			sql = d.config.fastSQL(r, d.slot)
		default:
			sql = d.config.resolvingSQL(r, d.slot)
		}
		if len(*m) > 1024 {
			clear(*m)
		}
		(*m)[k] = sql
	}
	return sql
}

// resolvingOp is a statement of run r that returns the rows it changed and
// the conflicts it resolved (see Detection.finish): its parameters are the
// run's, then its rows' source transactions.
func (d *detector) resolvingOp(r *run, sql, what string) (op, error) {
	args, err := r.encode(nil) // also on the sender's goroutine: not the builder's arena
	if err != nil {
		return op{}, err
	}
	u, x, l, t, o := r.txnColumns()
	args = append(args, encodeTextArray(u), encodeTextArray(x), encodeTextArray(l), encodeTextArray(t), encodeTextArray(o))
	var n int64
	var found []string
	table := r.table
	return op{sql: sql, what: what, rows: -1, kind: r.kind, table: table, cols: r.cols, args: args, applied: &r.applied,
		run: r, resolving: true, scan: []any{&n, &found}, after: func() {
			for _, f := range found {
				d.found = append(d.found, foundConflict{table, f})
			}
			if len(found) > 0 {
				// Conflicts go on: keep resolving them in place.
				d.resolvingUntil.Store(time.Now().Add(resolvingFor).UnixNano())
			}
			d.stats.Statements.Add(1)
			d.stats.Executed.Add(n)
		}}, nil
}

// foundConflict is a conflict a resolving statement resolved and logged:
// "type|resolution|remote applied|key" as the statement returned it.
type foundConflict struct {
	table  *Table
	report string
}

// maxConflictLines bounds the log lines one target transaction's conflicts
// take; parapply.conflicts holds them all.
const maxConflictLines = 10

// reportConflicts counts the conflicts of the group just committed and
// logs them (with warn, the applier's Warn).
func (d *detector) reportConflicts(warn func(string)) {
	for i, f := range d.found {
		p := strings.SplitN(f.report, "|", 4)
		if len(p) < 4 {
			continue
		}
		ty := conflict.Type(p[0])
		f.table.tally.Conflict(ty).Add(1)
		d.stats.Conflicts.Add(1)
		if ty == conflict.UpdateMissing || ty == conflict.DeleteMissing {
			d.stats.Missing.Add(1)
		}
		if i < maxConflictLines {
			what := "kept the local row"
			switch {
			case p[2] == "true":
				what = "applied the remote change"
			case ty == conflict.UpdateMissing || ty == conflict.DeleteMissing:
				what = "skipped the change (the target has no such row)"
			}
			warn(fmt.Sprintf("conflict %s on %s, key %s: %s (policy %s; logged in parapply.conflicts)", p[0], f.table.Rel.Namespace+"."+f.table.Rel.Name, p[3], what, p[1]))
		} else if i == maxConflictLines {
			warn(fmt.Sprintf("%d more conflicts in the same target transaction (logged in parapply.conflicts)", len(d.found)-i))
		}
	}
	d.found = nil
}

// detector is the part of an Applier that detects and resolves conflicts
// (see resolve.go): the statements of detection built so far, whether the
// open group is applied with resolving statements, what it has sent (to apply it again
// after a conflict) and the conflicts its resolving statements resolved.
// The builder asks it for checked and fast statements; the round trip
// (roundTrip, possibly on sendQueuedAsync's goroutine) for resolving ones,
// and replays: each side has fields of its own, and resolvingUntil, which
// both read, is atomic.
type detector struct {
	// config is nil when detection is off.
	config *Detection
	// stats is the applier's Stats; slot names the subscription in the
	// conflict log.
	stats *Stats
	slot  string
	// resolvingGroup makes the round trips of the open group use resolving
	// statements, as every group begun before resolvingUntil (UnixNano)
	// does; replayed: the open group was applied again (see replay).
	resolvingGroup atomic.Bool
	replayed       bool
	resolvingUntil atomic.Int64
	// keep holds the group's statements sent so far; found, the
	// conflicts its resolving statements met.
	keep  keptGroup
	found []foundConflict
	// setBasedTry marks a run's first, set-based try under withFallback,
	// whose unique violation is not a conflict (set by the builder around
	// that try's round trip, which it waits for).
	setBasedTry  bool
	resolvingSQL map[sqlKey]string // used by the round trip only
	builtSQL     map[sqlKey]string // checked and fast: by the builder only
}

// rolledBack forgets the conflicts found: the group they were met in is
// rolled back, and the log rows with it.
func (d *detector) rolledBack() { d.found = nil }

// resolvingNow reports whether a group begun now is applied with resolving
// statements from its start: a conflict was met within resolvingFor.
func (d *detector) resolvingNow() bool {
	return d.config != nil && time.Now().UnixNano() < d.resolvingUntil.Load()
}

// beginGroup starts a target transaction's round trips: nothing kept or
// found yet, and resolving statements from the start when resolving.
func (d *detector) beginGroup(resolving bool) {
	d.keep, d.found, d.replayed = keptGroup{}, nil, false
	d.resolvingGroup.Store(resolving)
}

// resolvingIfAsked returns ops, made resolving when the open group is
// applied with resolving statements: after a replay, every run; soon after one, inserts (the fast
// statements of updates and deletes resolve by themselves).
func (d *detector) resolvingIfAsked(ops []op) ([]op, error) {
	if !d.resolvingGroup.Load() {
		return ops, nil
	}
	return d.resolvingOps(ops, d.replayed)
}

// replay returns the statements that apply the open group again from its
// start, after ops met a conflict and the target transaction was rolled
// back: what was kept of it, then ops, every run's statement a resolving one.
func (d *detector) replay(ops []op) ([]op, error) {
	d.resolvingGroup.Store(true)
	d.replayed = true
	d.resolvingUntil.Store(time.Now().Add(resolvingFor).UnixNano())
	all, err := d.resolvingOps(append(d.keep.ops, ops...), true)
	if err != nil {
		return nil, err
	}
	d.keep, d.found = keptGroup{}, nil
	return all, nil
}

// unresolved is the error of a conflict that is not applied again: err,
// or when the group was too large to keep, err with the reason.
func (d *detector) unresolved(err error) error {
	if d.keep.lost {
		return fmt.Errorf("%w (a conflict was met in a target transaction larger than %d MB, which is not kept to be applied again with conflict resolution: lower group_max_bytes, or resolve the conflict on the target)", err, keptGroupBytes>>20)
	}
	return err
}

// backToSavepoint drops what was kept of the open group after the
// savepoint sql made: it was rolled back to it, and a replay starts from
// there too.
func (k *keptGroup) backToSavepoint(sql string) {
	if i := slices.IndexFunc(k.ops, func(o op) bool { return o.sql == sql }); i >= 0 && !k.lost {
		k.ops = k.ops[:i+1]
	}
}

// ConflictFound reports whether err is a fast statement's sign of a
// conflict that a worker running ahead of earlier transactions returns
// (see MayResolve).
func ConflictFound(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == targetdb.SQLStateConflictFound
}

// conflictFound reports whether err is a fast statement's sign of a
// conflict (see resolve.go) that resolving statements resolve.
func (d *detector) conflictFound(err error) bool {
	var pe *pgconn.PgError
	return d.config != nil && (ConflictFound(err) || errors.As(err, &pe) && pe.Code == pgerrcode.UniqueViolation && !d.setBasedTry)
}

// Bounds of conflict replays: a target transaction is applied again with
// resolving statements at most maxReplays times (a local session may change
// rows between two tries); for resolvingFor after a conflict, inserts use
// resolving statements from the start and updates and deletes the fast ones
// (see resolve.go); a group is kept for a replay up to keptGroupBytes of
// parameters.
const (
	maxReplays     = 3
	resolvingFor   = 2 * time.Second
	keptGroupBytes = 16 << 20
)

// keptGroup holds the statements of the open target transaction already
// sent, to apply it again after a conflict.
type keptGroup struct {
	ops   []op
	bytes int
	lost  bool
}

// add keeps ops, sent in the open target transaction, unless the group
// has grown past keptGroupBytes (then none is kept: lost); on tells the
// tables whose runs a replay makes resolving (the others are sent again
// as they are, with their parameters).
func (k *keptGroup) add(ops []op, on func(*Table) bool) {
	if k.lost {
		return
	}
	for _, o := range ops {
		if o.run != nil {
			k.bytes += o.run.bytes
		}
	}
	if k.bytes > keptGroupBytes {
		k.ops, k.lost = nil, true
		return
	}
	for _, o := range ops {
		if o.run != nil && !o.resolving && o.run.hasResolving() && on(o.run.table) {
			// A replay builds the resolving statement from the run: the
			// encoded parameters need not be kept.
			o.args, o.copy = nil, nil
		}
		k.ops = append(k.ops, o)
	}
}
