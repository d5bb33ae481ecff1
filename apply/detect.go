package apply

import (
	"fmt"
	"strings"

	"github.com/parapply/parapply/conflict"
)

// SetDetection turns conflict detection on (d set) or off for the
// statements queued from now on.
func (a *Applier) SetDetection(d *Detection) { a.det = d }

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

// txnColumns returns, per row of the run, its source transaction's xid,
// commit LSN and commit time as text (NULL where unknown).
func (r *run) txnColumns() (xid, lsn, at [][]byte) {
	xid, lsn, at = make([][]byte, r.rows), make([][]byte, r.rows), make([][]byte, r.rows)
	i := 0
	for _, rt := range r.txns {
		x := []byte(fmt.Sprint(rt.txn.XID))
		var l, t []byte
		if rt.txn.CommitLSN != 0 {
			l = []byte(rt.txn.CommitLSN.String())
		}
		if !rt.txn.CommitTime.IsZero() {
			t = []byte(rt.txn.CommitTime.UTC().Format("2006-01-02 15:04:05.999999") + "+00")
		}
		for ; i < rt.upto && i < r.rows; i++ {
			xid[i], lsn[i], at[i] = x, l, t
		}
	}
	return xid, lsn, at
}

// hasCareful reports whether the run has a careful statement (see
// Detection.carefulSQL).
func (r *run) hasCareful() bool {
	return r.kind == 'U' || r.kind == 'D' || (r.kind == 'I' && r.cols[r.split] >= 0)
}

// carefulOps returns ops with the statement of every run replaced by its
// careful one (see resolve.go).
func (a *Applier) carefulOps(ops []op) []op {
	out := make([]op, len(ops))
	for i, o := range ops {
		out[i] = o
		if o.run != nil && !o.careful {
			out[i] = a.carefulOp(o)
		}
	}
	return out
}

// carefulOp is the careful statement of the run op o applies, or o when
// the run's kind has none.
func (a *Applier) carefulOp(o op) op {
	r := o.run
	if a.carefulSQL == nil {
		a.carefulSQL = map[*run]string{}
	}
	sql, ok := a.carefulSQL[r]
	if !ok {
		sql = a.det.carefulSQL(r, a.cfg.Slot)
		a.carefulSQL[r] = sql
		if len(a.carefulSQL) > 1024 {
			clear(a.carefulSQL)
		}
	}
	if sql == "" {
		return o
	}
	args := make([]any, 0, len(r.params)+3)
	for _, p := range r.params {
		args = append(args, encodeTextArray(p))
	}
	x, l, t := r.txnColumns()
	args = append(args, encodeTextArray(x), encodeTextArray(l), encodeTextArray(t))
	var n int64
	var found []string
	table := r.table
	return op{sql: sql, what: o.what, rows: -1, kind: r.kind, table: table, cols: r.cols, args: args, applied: &r.applied,
		run: r, careful: true, scan: []any{&n, &found}, after: func() {
			for _, f := range found {
				a.found = append(a.found, foundConflict{table, f})
			}
			a.Stats.Statements.Add(1)
			a.Stats.Executed.Add(n)
		}}
}

// foundConflict is a conflict a careful statement resolved and logged:
// "type|resolution|remote applied|key" as the statement returned it.
type foundConflict struct {
	table  *Table
	report string
}

// maxConflictLines bounds the log lines one target transaction's conflicts
// take; parapply.conflicts holds them all.
const maxConflictLines = 10

// reportConflicts counts the conflicts of the group just committed and
// logs them.
func (a *Applier) reportConflicts() {
	for i, f := range a.found {
		p := strings.SplitN(f.report, "|", 4)
		if len(p) < 4 {
			continue
		}
		f.table.tally.Conflict(conflict.Type(p[0])).Add(1)
		a.Stats.Conflicts.Add(1)
		if i < maxConflictLines {
			what := "kept the local row"
			if p[2] == "true" {
				what = "applied the remote change"
			}
			a.Warn(fmt.Sprintf("conflict %s on %s, key %s: %s %s (logged in parapply.conflicts)", p[0], f.table.Rel.Namespace+"."+f.table.Rel.Name, p[3], p[1], what))
		} else if i == maxConflictLines {
			a.Warn(fmt.Sprintf("%d more conflicts in the same target transaction (logged in parapply.conflicts)", len(a.found)-i))
		}
	}
	a.found = nil
}
