package apply

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/parapply/parapply"
)

type run struct {
	cols     []int // published column carried by each parameter
	split    int   // cols[:split] locate rows (key or old image), cols[split:] carry values
	table    *Table
	kind     byte
	shape    []byte
	sql      string
	params   [][][]byte
	rows     int
	bytes    int
	keys     map[string]int // row index of each key's change; -1: not collapsible
	closed   bool
	fallback bool
	ahead    int // rows whose keys were offered to the prefetcher
}

// sqlFor returns the statement for a run of one table, kind and column
// set, building it once.
func (a *Applier) sqlFor(r *run) string {
	key := make([]byte, 5, 5+len(r.shape))
	binary.BigEndian.PutUint32(key, r.table.Rel.ID)
	key[4] = r.kind
	key = append(key, r.shape...)
	if s, ok := a.sql[string(key)]; ok {
		return s
	}
	t, head, tail := r.table, r.cols[:r.split], r.cols[r.split:]
	var s string
	switch r.kind {
	case 'I':
		if len(tail) == 1 && tail[0] < 0 {
			tail = nil // a row with no column the target takes
		}
		s = InsertSQL(t, tail)
	case 'U':
		s = UpdateSQL(t, head, tail)
	case 'D':
		s = DeleteSQL(t, head)
	case 'F':
		s = UpdateFullSQL(t, head, tail)
	case 'X':
		s = DeleteFullSQL(t, head)
	}
	a.sql[string(key)] = s
	return s
}

// openRun returns the open run of the table with relation id rel, if any.
func (a *Applier) openRun(rel uint32) *run {
	if a.cur != nil && a.cur.table.Rel.ID == rel {
		return a.cur // the common case: the same table as the last change
	}
	for _, r := range a.runs {
		if r.table.Rel.ID == rel {
			return r
		}
	}
	return nil
}

// fits reports whether a change of this table and kind, whose parameters
// a.mask describes, can join r.
func (a *Applier) fits(r *run, t *Table, kind byte) bool {
	return r != nil && r.table == t && r.kind == kind && !r.closed && bytes.Equal(r.shape, a.mask) && r.rows < a.cfg.BatchRows
}

// startRun makes a.cur a run for a change of this table and kind whose
// parameters are the columns head then tail (a.mask describing them), and
// which touches none of keys: the table's open run when it can take the
// change, else a new one, after the table's open run has become a
// statement.
//
// Runs of different tables stay open side by side, so interleaved changes to
// several tables still become one statement per table: their statements may
// then run in another order than the changes arrived in, which no one can
// observe (the group commits at once, and session_replication_role = replica
// keeps foreign key checks out), unless a trigger fires on the target: a run
// of such a table is only ever open alone.
func (a *Applier) startRun(ctx context.Context, t *Table, kind byte, head, tail []int, keys ...[]byte) error {
	r := a.openRun(t.Rel.ID)
	if a.fits(r, t, kind) && !slices.ContainsFunc(keys, r.has) {
		a.cur = r
		return nil
	}
	if r != nil {
		if err := a.flushRun(ctx, r); err != nil {
			return err
		}
	}
	if len(a.runs) > 0 && (t.Triggers || a.runs[0].table.Triggers) {
		if err := a.flushRuns(ctx); err != nil {
			return err
		}
	}
	r = &run{table: t, kind: kind, split: len(head)}
	r.shape = append(r.shape, a.mask...)
	r.cols = append(append(make([]int, 0, len(head)+len(tail)), head...), tail...)
	r.sql = a.sqlFor(r)
	r.params = make([][][]byte, len(r.cols))
	r.fallback = t.ExtraUnique && (kind == 'U' || kind == 'F')
	a.runs = append(a.runs, r)
	a.cur = r
	return nil
}

// touch records keys the current run now touches, none of them
// collapsible.
func (r *run) touch(keys ...[]byte) {
	for _, k := range keys {
		r.mark(k, -1)
	}
}

// mark records that the run's row i changes the row key names; i < 0 when a
// later change of that row must not be collapsed into it.
func (r *run) mark(key []byte, i int) {
	if len(key) == 0 {
		return
	}
	if r.keys == nil {
		r.keys = map[string]int{}
	}
	r.keys[string(key)] = i
}

func (r *run) has(key []byte) bool {
	if len(key) == 0 {
		return false
	}
	_, ok := r.keys[string(key)]
	return ok
}

// collapse overwrites, in place, the values of an earlier update of the same
// row in the current run with those of a later one, when the result is
// provably the same as applying both: neither changes the key, both set the
// same columns, and no trigger on the target would see the difference. Not
// on tables with unique indexes beyond the key, whose row-by-row fallback
// needs every step.
func (a *Applier) collapse(t *Table, key []byte, new parapply.Tuple) bool {
	r := a.openRun(t.Rel.ID)
	if t.Triggers || t.ExtraUnique || !a.fits(r, t, 'U') {
		return false
	}
	i, ok := r.keys[string(key)]
	if !ok || i < 0 {
		return false
	}
	for j, c := range r.cols[r.split:] {
		p := r.params[r.split+j]
		r.bytes += len(new[c].Data) - len(p[i])
		p[i] = data(new[c])
	}
	a.Stats.Collapsed.Add(1)
	return true
}

// push appends the values of tup's columns cols to the run's parameters,
// starting at parameter off.
func (r *run) push(off int, tup parapply.Tuple, cols []int) {
	for i, c := range cols {
		r.params[off+i] = append(r.params[off+i], data(tup[c]))
		r.bytes += len(tup[c].Data)
	}
}

func appendKey(buf []byte, tup parapply.Tuple, cols []int) []byte {
	buf = buf[:0]
	for _, c := range cols {
		v := tup[c]
		buf = append(buf, v.Kind)
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(v.Data)))
		buf = append(buf, v.Data...)
	}
	return buf
}

func data(v parapply.Value) []byte {
	if v.Kind == parapply.ValueNull {
		return nil
	}
	if v.Data == nil {
		return []byte{}
	}
	return v.Data
}

func checkTuple(t *Table, tup parapply.Tuple, what string) error {
	if len(tup) != len(t.Rel.Columns) {
		return fmt.Errorf("%s of %s carries %d columns, its relation message %d (protocol error)", what, t.Name, len(tup), len(t.Rel.Columns))
	}
	for i, v := range tup {
		if v.Kind == parapply.ValueBinary {
			return fmt.Errorf("%s of %s: column %s arrived in binary format, which this applier does not take; do not request binary", what, t.Name, t.Rel.Columns[i].Name)
		}
	}
	return nil
}

// present appends to mask one byte per column of tup (1 when it carries a
// value the target takes) and returns those columns' indexes in buf.
func present(t *Table, tup parapply.Tuple, skip []int, mask []byte, buf []int) ([]byte, []int) {
	buf = buf[:0]
	for i, v := range tup {
		if v.Kind != parapply.ValueUnchanged && t.Types[i] != "" && !slices.Contains(skip, i) {
			buf = append(buf, i)
			mask = append(mask, 1)
		} else {
			mask = append(mask, 0)
		}
	}
	return mask, buf
}

// change looks up the table of a row change and checks its tuples; it
// returns nil (and the error, if any) when the change is not to be applied
// (see skip), else counts it in the open group (Stats and the table's
// tally hear of it when the group commits).
func (a *Applier) change(rel uint32, what string, kind int, tups ...parapply.Tuple) (*Table, error) {
	t, err := a.table(rel)
	if err != nil {
		return nil, err
	}
	for _, tup := range tups {
		if err := checkTuple(t, tup, what); err != nil {
			return nil, err
		}
	}
	if a.skip(t) {
		return nil, nil
	}
	a.count(t, kind)
	a.grp.changes++
	return t, nil
}

// emptyRow stands for "no column" in an insert run whose rows carry no
// column the target takes: one NULL parameter per row counts them.
var emptyRow = []int{-1}

// Insert queues an INSERT of tup into relation rel.
func (a *Applier) Insert(ctx context.Context, rel uint32, tup parapply.Tuple) error {
	t, err := a.change(rel, "insert", tallyInsert, tup)
	if t == nil {
		return err
	}
	a.mask, a.cols = present(t, tup, nil, a.mask[:0], a.cols)
	if len(a.cols) == 0 {
		if err := a.startRun(ctx, t, 'I', nil, emptyRow); err != nil {
			return err
		}
		a.cur.params[0] = append(a.cur.params[0], nil)
	} else {
		if err := a.startRun(ctx, t, 'I', nil, a.cols); err != nil {
			return err
		}
		a.cur.push(0, tup, a.cur.cols)
	}
	a.cur.rows++
	return a.maybeFlush(ctx)
}

// Update queues an UPDATE. oldKind is 0 (key unchanged, no old image), 'K'
// (old key) or 'O' (old row, REPLICA IDENTITY FULL).
func (a *Applier) Update(ctx context.Context, rel uint32, oldKind byte, old, new parapply.Tuple) error {
	tups := []parapply.Tuple{new, old}
	if oldKind == 0 {
		tups = tups[:1]
	}
	t, err := a.change(rel, "update", tallyUpdate, tups...)
	if t == nil {
		return err
	}
	if t.Full {
		if oldKind != 'O' {
			return fmt.Errorf("update of %s (REPLICA IDENTITY FULL) came without its old row (protocol error)", t.Name)
		}
		return a.full(ctx, t, 'F', old, new)
	}
	if len(t.Key) == 0 {
		return fmt.Errorf("update of %s: the table has no replica identity key on the publisher; set REPLICA IDENTITY there", t.Name)
	}
	// Without an old image the key is unchanged: locate by the new row's
	// key and leave the key columns out of SET.
	// Columns GENERATED ALWAYS AS IDENTITY on the target stay out of SET.
	keySrc, skip := new, t.keyAndIdentity
	if oldKind != 0 {
		keySrc, skip = old, t.AlwaysIdentity
		if err := checkIdentityKept(t, old, new); err != nil {
			return err
		}
	}
	a.mask, a.cols = present(t, new, skip, a.mask[:0], a.cols)
	if len(a.cols) == 0 {
		return nil
	}
	a.keybuf = appendKey(a.keybuf, keySrc, t.Key)
	a.key2buf = a.key2buf[:0]
	if oldKind != 0 {
		a.key2buf = appendKey(a.key2buf, new, t.Key)
	} else if a.collapse(t, a.keybuf, new) {
		return nil
	}
	if err := a.startRun(ctx, t, 'U', t.Key, a.cols, a.keybuf, a.key2buf); err != nil {
		return err
	}
	r := a.cur
	if oldKind == 0 {
		r.mark(a.keybuf, r.rows)
	} else {
		r.touch(a.keybuf, a.key2buf)
	}
	r.push(0, keySrc, t.Key)
	r.push(len(t.Key), new, a.cols)
	r.rows++
	a.readAhead(r, false)
	return a.maybeFlush(ctx)
}

// checkIdentityKept refuses an update that changes the value of a column
// that is GENERATED ALWAYS AS IDENTITY on the target, where the old image
// tells: PostgreSQL lets an UPDATE set such a column only to DEFAULT, and
// leaving the old value would leave a different row than the publisher's.
func checkIdentityKept(t *Table, old, new parapply.Tuple) error {
	for _, c := range t.AlwaysIdentity {
		if c < len(old) && c < len(new) && old[c].Kind == parapply.ValueText && new[c].Kind == parapply.ValueText && string(old[c].Data) != string(new[c].Data) {
			return fmt.Errorf("%w: an update changes column %s of %s from %s to %s, but the column is GENERATED ALWAYS AS IDENTITY on the target, which no UPDATE may set; make it GENERATED BY DEFAULT there (ALTER TABLE %s ALTER COLUMN %s SET GENERATED BY DEFAULT)",
				ErrSchema, colName(t, c), t.Name, old[c].Data, new[c].Data, t.Name, colName(t, c))
		}
	}
	return nil
}

// full queues an update ('F') or delete ('X') under REPLICA IDENTITY FULL.
// The key of a row is its whole old image; an update also touches its new
// image, which the next change of the row names as old.
func (a *Applier) full(ctx context.Context, t *Table, kind byte, old, new parapply.Tuple) error {
	var set []int
	a.mask = a.mask[:0]
	if kind == 'F' {
		if err := checkIdentityKept(t, old, new); err != nil {
			return err
		}
		a.mask, a.cols = present(t, new, t.AlwaysIdentity, a.mask, a.cols)
		if len(a.cols) == 0 {
			return nil
		}
		set = a.cols
	}
	a.mask, a.oldCols = present(t, old, nil, a.mask, a.oldCols)
	noCols := len(a.oldCols) == 0 // a table with no columns: any row will do
	if noCols {
		a.oldCols = append(a.oldCols, emptyRow...)
	}
	if len(a.all) != len(t.Rel.Columns) {
		a.all = a.all[:0]
		for i := range t.Rel.Columns {
			a.all = append(a.all, i)
		}
	}
	a.keybuf = appendKey(a.keybuf, old, a.all)
	if err := a.startRun(ctx, t, kind, a.oldCols, set, a.keybuf); err != nil {
		return err
	}
	r := a.cur
	r.touch(a.keybuf)
	if noCols {
		r.params[0] = append(r.params[0], nil)
	} else {
		r.push(0, old, a.oldCols)
	}
	r.push(len(a.oldCols), new, set)
	r.rows++
	if kind == 'F' {
		if slices.ContainsFunc(new, func(v parapply.Value) bool { return v.Kind == parapply.ValueUnchanged }) {
			// The next change of this row names an old image we cannot
			// spell out here: let it start a new statement.
			r.closed = true
		} else {
			a.keybuf = appendKey(a.keybuf, new, a.all)
			r.touch(a.keybuf)
		}
	}
	return a.maybeFlush(ctx)
}

// Delete queues a DELETE of the row old identifies.
func (a *Applier) Delete(ctx context.Context, rel uint32, oldKind byte, old parapply.Tuple) error {
	t, err := a.change(rel, "delete", tallyDelete, old)
	if t == nil {
		return err
	}
	if t.Full {
		return a.full(ctx, t, 'X', old, nil)
	}
	if len(t.Key) == 0 {
		return fmt.Errorf("delete from %s: the table has no replica identity key on the publisher; set REPLICA IDENTITY there", t.Name)
	}
	a.mask = a.mask[:0]
	a.keybuf = appendKey(a.keybuf, old, t.Key)
	if err := a.startRun(ctx, t, 'D', t.Key, nil, a.keybuf); err != nil {
		return err
	}
	r := a.cur
	r.touch(a.keybuf)
	r.push(0, old, t.Key)
	r.rows++
	a.readAhead(r, false)
	return a.maybeFlush(ctx)
}

// Truncate queues a TRUNCATE of the given relations with the publisher's
// options.
func (a *Applier) Truncate(ctx context.Context, rels []uint32, cascade, restart bool) error {
	if err := a.flushRuns(ctx); err != nil {
		return err
	}
	names := make([]string, 0, len(rels))
	for _, id := range rels {
		t, err := a.table(id)
		if err != nil {
			return err
		}
		if a.skip(t) {
			continue
		}
		names = append(names, t.Target())
		a.count(t, tallyTruncate)
	}
	if len(names) == 0 {
		return nil
	}
	a.queue(TruncateSQL(names, cascade, restart), "truncate", -1)
	a.Stats.Truncates.Add(1)
	return nil
}

// runBytes is the parameter bytes held in open runs.
func (a *Applier) runBytes() int {
	n := 0
	for _, r := range a.runs {
		n += r.bytes
	}
	return n
}

func (a *Applier) maybeFlush(ctx context.Context) error {
	if a.cur.rows >= a.cfg.BatchRows {
		if err := a.flushRun(ctx, a.cur); err != nil {
			return err
		}
	}
	if a.qbytes+a.runBytes() >= a.cfg.PipelineBytes {
		if err := a.flushRuns(ctx); err != nil {
			return err
		}
		return a.sendAsync(ctx, nil)
	}
	return nil
}

var kindNames = map[byte]string{'I': "insert", 'U': "update", 'F': "update", 'D': "delete", 'X': "delete"}

// flushRuns turns every open run into a queued statement, in the order they
// were opened.
func (a *Applier) flushRuns(ctx context.Context) error {
	for len(a.runs) > 0 {
		if err := a.flushRun(ctx, a.runs[0]); err != nil {
			return err
		}
	}
	return nil
}

// flushRun turns the open run r into a queued statement.
func (a *Applier) flushRun(ctx context.Context, r *run) error {
	if i := slices.Index(a.runs, r); i >= 0 {
		a.runs = slices.Delete(a.runs, i, i+1)
	}
	if a.cur == r {
		a.cur = nil
	}
	if r.rows == 0 {
		return nil
	}
	a.readAhead(r, true)
	what := fmt.Sprintf("%s of %d rows in %s", kindNames[r.kind], r.rows, r.table.Name)
	a.grp.bytes += r.bytes
	a.qbytes += r.bytes
	if r.kind == 'I' && r.rows >= copyMinRows && r.cols[0] >= 0 && !r.table.NoCopy {
		a.queueRun(r, CopySQL(r.table, r.cols), what, -1).copy = encodeCopyText(r.params, r.rows, r.bytes)
		return nil
	}
	args := make([]any, len(r.params))
	for i, p := range r.params {
		args[i] = encodeTextArray(p)
	}
	expect := r.rows
	if r.kind == 'I' {
		expect = -1
	}
	if r.fallback {
		return a.withFallback(ctx, r, args, what, expect)
	}
	a.queueRun(r, r.sql, what, expect, args...)
	return nil
}

// queueRun queues a statement built from run r and returns its op, which
// names r's table and columns for errors.
func (a *Applier) queueRun(r *run, sql, what string, expect int, args ...any) *op {
	a.queue(sql, what, expect, args...)
	o := &a.ops[len(a.ops)-1]
	o.table, o.cols, o.kind = r.table, r.cols, r.kind
	return o
}

// withFallback runs an UPDATE on a table with unique indexes beyond its key
// under a savepoint: if the set-based statement hits a unique violation that
// row order would have avoided, it is rolled back and replayed row by row.
func (a *Applier) withFallback(ctx context.Context, r *run, args []any, what string, expect int) error {
	a.queue("SAVEPOINT parapply_run", "savepoint", -1)
	a.queueRun(r, r.sql, what, expect, args...)
	a.queue("RELEASE SAVEPOINT parapply_run", "savepoint", -1)
	err := a.send(ctx)
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != "23505" || r.rows == 1 {
		return err
	}
	a.Stats.Replays.Add(1)
	if _, rerr := a.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT parapply_run"); rerr != nil {
		// The violation came from a statement queued before the
		// savepoint (which then never existed): that error is the one
		// to report, and to retry on.
		return err
	}
	for i := 0; i < r.rows; i++ {
		one := make([]any, len(r.params))
		for j, p := range r.params {
			one[j] = encodeTextArray(p[i : i+1])
		}
		a.queueRun(r, r.sql, fmt.Sprintf("%s of 1 row in %s", kindNames[r.kind], r.table.Name), 1, one...)
	}
	a.queue("RELEASE SAVEPOINT parapply_run", "savepoint", -1)
	return a.send(ctx)
}
