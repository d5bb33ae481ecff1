package apply

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/parapply/parapply"
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

// encode returns the run's parameters (see Table.encodeParam).
func (r *run) encode() ([]any, error) {
	args := make([]any, len(r.params), len(r.params)+5) // room for resolvingOp's five
	for i, p := range r.params {
		a, err := r.table.encodeParam(r.cols[i], p)
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

// hasCareful reports whether the run has a careful statement (see
// Detection.carefulSQL).
func (r *run) hasCareful() bool {
	return r.kind == 'U' || r.kind == 'D' || (r.kind == 'I' && r.cols[r.split] >= 0)
}

// carefulOps returns ops with the statement of every insert run (every
// run, with all) replaced by its careful one (see resolve.go).
func (a *Applier) carefulOps(ops []op, all bool) ([]op, error) {
	out := make([]op, len(ops))
	for i, o := range ops {
		out[i] = o
		if o.run != nil && !o.careful && (all || o.run.kind == 'I') {
			if sql := a.statement(o.run, carefulStatement); sql != "" {
				var err error
				if out[i], err = a.resolvingOp(o.run, sql, o.what); err != nil {
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
	carefulStatement
)

// sqlKey names a statement of conflict detection: the table, the run's
// kind and shape, and which statement.
type sqlKey struct {
	t     *Table
	kind  byte
	shape string
	which int
}

// statement returns the checked, fast or careful statement for run r,
// building it once per table, kind and shape. Careful ones are asked for by
// the session's sender only (see exec), the others by the builder: each
// side has its own map.
func (a *Applier) statement(r *run, which int) string {
	m := &a.builtSQL
	if which == carefulStatement {
		m = &a.carefulSQL
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
			sql = a.det.checkedSQL(r.sql, r.kind, match)
		case fastStatement:
			sql = a.det.fastSQL(r, a.cfg.Slot)
		default:
			sql = a.det.carefulSQL(r, a.cfg.Slot)
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
func (a *Applier) resolvingOp(r *run, sql, what string) (op, error) {
	args, err := r.encode()
	if err != nil {
		return op{}, err
	}
	u, x, l, t, o := r.txnColumns()
	args = append(args, encodeTextArray(u), encodeTextArray(x), encodeTextArray(l), encodeTextArray(t), encodeTextArray(o))
	var n int64
	var found []string
	table := r.table
	return op{sql: sql, what: what, rows: -1, kind: r.kind, table: table, cols: r.cols, args: args, applied: &r.applied,
		run: r, careful: true, scan: []any{&n, &found}, after: func() {
			for _, f := range found {
				a.found = append(a.found, foundConflict{table, f})
			}
			if len(found) > 0 {
				// Conflicts go on: keep resolving them in place.
				a.carefulUntil.Store(time.Now().Add(carefulFor).UnixNano())
			}
			a.Stats.Statements.Add(1)
			a.Stats.Executed.Add(n)
		}}, nil
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
		ty := conflict.Type(p[0])
		f.table.tally.Conflict(ty).Add(1)
		a.Stats.Conflicts.Add(1)
		if ty == conflict.UpdateMissing || ty == conflict.DeleteMissing {
			a.Stats.Missing.Add(1)
		}
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

// logFailed writes a change of a transaction that on_error skips to
// parapply.conflicts (type apply_error), in place of applying it: what
// (insert, update, delete, truncate), the key and the row as the publisher
// sent them, and the error.
func (a *Applier) logFailed(t *Table, what string, tups ...parapply.Tuple) {
	var row, key []byte
	if len(tups) > 0 {
		k := tups[len(tups)-1] // the old image when there is one
		key = tupleJSON(t, k, t.Key)
		row = tupleJSON(t, tups[0], nil)
		if what == "delete" && !t.Full {
			row = key // the other columns of a key image are not the row's
		}
	}
	a.queue(`INSERT INTO parapply.conflicts (slot_name, conflict_type, table_name, key, remote_row, source_xid, commit_lsn, remote_commit_time, remote_origin, resolution, remote_applied, detail)
		VALUES ($1, 'apply_error', $2, $3::text::jsonb, $4::text::jsonb, $5, $6::text::pg_lsn, $7, $9, 'skip_transaction', false, $8)`,
		"logging a change of a skipped transaction", -1,
		a.cfg.Slot, t.Rel.Namespace+"."+t.Rel.Name, nullText(key), nullText(row), int64(a.txn.XID), a.txn.CommitLSN.String(), a.txn.CommitTime, what+": "+a.txn.Failed, nullText([]byte(a.txn.Origin)))
	a.grp.changes++
}

// tupleJSON is a tuple's columns (only cols, when given) as a JSON object
// of text values; nil when none is there.
func tupleJSON(t *Table, tup parapply.Tuple, cols []int) []byte {
	m := map[string]any{}
	for i, v := range tup {
		if cols != nil && !slices.Contains(cols, i) || i >= len(t.Rel.Columns) {
			continue
		}
		switch v.Kind {
		case parapply.ValueNull:
			m[t.Rel.Columns[i].Name] = nil
		case parapply.ValueText:
			m[t.Rel.Columns[i].Name] = string(v.Data)
		}
	}
	if len(m) == 0 {
		return nil
	}
	b, _ := json.Marshal(m)
	return b
}

func nullText(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}
