package apply

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/parapply/parapply"
)

// batcher turns the row changes of a target transaction into runs: rows of
// one table, kind and column set that one set-based statement applies. It
// holds the rules (when a run can take a change, when it must close, which
// repeated updates collapse into one row) and no connection: a run it
// closes waits in ready, in the order its statement must be sent, until the
// session (Applier) takes it. Not goroutine safe.
type batcher struct {
	batchRows int
	// collapsed counts updates folded into an earlier one of their run.
	collapsed *atomic.Int64
	sql       map[string]*statement // statements by table, kind and shape
	// Open runs, at most one per table, in the order they were opened;
	// cur is the one the last change went to.
	runs  []*run
	cur   *run
	ready []*run // closed, not yet taken

	mask, keybuf, key2buf []byte
	cols, oldCols, all    []int // reused per change
	// spareKeys is a closed run's key index, emptied, for the next run
	// (spareRoom: the most keys it has held): filled again, it does not
	// grow again.
	spareKeys map[string]int
	spareRoom int
}

func newBatcher(batchRows int, collapsed *atomic.Int64) *batcher {
	return &batcher{batchRows: batchRows, collapsed: collapsed, sql: map[string]*statement{}}
}

// statement is the SQL of runs of one table, kind and column set, and the
// rows of the last of them to close: the next one's parameters are made
// that large at once rather than grown row by row.
type statement struct {
	sql  string
	rows int
}

// run is one statement's worth of changes: parameters are one array per
// column, one element per row.
type run struct {
	cols     []int // published column carried by each parameter
	split    int   // cols[:split] locate rows (key or old image), cols[split:] carry values
	table    *Table
	part     int32 // the shard of a Citus distributed table its rows are on (see Table.part)
	kind     byte  // I insert, U update, D delete, F and X update and delete by whole old row
	shape    []byte
	sql      string
	params   [][][]byte
	rows     int
	bytes    int
	keys     map[string]int // row index of each key's change; -1: not collapsible
	keysRoom int            // the most keys keys has held, in this run or earlier ones
	stmt     *statement     // where sql comes from (nil for runs made outside the batcher)
	closed   bool
	fallback bool
	ahead    int // rows whose keys were offered to the prefetcher
	// txns names the source transaction of each row, for conflict
	// detection (see noteTxn).
	txns []rowTxn
	// applied is set once the run's statement has run: key sets of it
	// still waiting for the prefetcher are not worth reading any more.
	applied atomic.Bool
	// reading counts its key sets offered to the prefetcher and not read
	// yet.
	reading pendingReads
}

// statementFor returns the statement for a run of one table, kind and
// column set, building it once.
func (b *batcher) statementFor(r *run) *statement {
	key := make([]byte, 5, 5+len(r.shape))
	binary.BigEndian.PutUint32(key, r.table.Rel.ID)
	key[4] = r.kind
	key = append(key, r.shape...)
	if st, ok := b.sql[string(key)]; ok {
		return st
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
	st := &statement{sql: s}
	b.sql[string(key)] = st
	return st
}

// forget drops the statements built for relation rel (its description
// changed) after closing its open runs, whose statements stay as built.
func (b *batcher) forget(rel uint32) {
	for _, r := range slices.Clone(b.runs) {
		if r.table.Rel.ID == rel {
			b.close(r)
		}
	}
	for k := range b.sql {
		if binary.BigEndian.Uint32([]byte(k)) == rel {
			delete(b.sql, k)
		}
	}
}

// openRun returns the open run of the table with relation id rel and of
// part part (0 but on a Citus distributed table), if any.
func (b *batcher) openRun(rel uint32, part int32) *run {
	if b.cur != nil && b.cur.table.Rel.ID == rel && b.cur.part == part {
		return b.cur // the common case: the same table as the last change
	}
	for _, r := range b.runs {
		if r.table.Rel.ID == rel && r.part == part {
			return r
		}
	}
	return nil
}

// fits reports whether a change of this table and kind, whose parameters
// b.mask describes, can join r.
func (b *batcher) fits(r *run, t *Table, kind byte) bool {
	return r != nil && r.table == t && r.kind == kind && !r.closed && bytes.Equal(r.shape, b.mask) && r.rows < b.batchRows
}

// start makes b.cur a run for a change of this table, part and kind whose
// parameters are the columns head then tail (b.mask describing them), and
// which touches none of keys: the open run of the table and part when it
// can take the change, else a new one, after that run has closed.
//
// Runs of different tables stay open side by side, so interleaved changes to
// several tables still become one statement per table: their statements may
// then run in another order than the changes arrived in, which no one can
// observe (the group commits at once, and session_replication_role = replica
// keeps foreign key checks out), unless a trigger fires on the target: a run
// of such a table is only ever open alone. The runs of the shards of a
// Citus distributed table are as independent as those of different tables:
// a row's changes all land on its shard (a change of its distribution
// value is a delete and an insert, see batcher.move), and every unique
// index there holds the distribution column.
func (b *batcher) start(t *Table, part int32, kind byte, head, tail []int, keys ...[]byte) *run {
	r := b.openRun(t.Rel.ID, part)
	if b.fits(r, t, kind) && !slices.ContainsFunc(keys, r.has) {
		b.cur = r
		return r
	}
	if r != nil {
		b.close(r)
	}
	if len(b.runs) > 0 && (t.Triggers || b.runs[0].table.Triggers) {
		b.closeAll()
	}
	r = &run{table: t, part: part, kind: kind, split: len(head), keys: b.spareKeys, keysRoom: b.spareRoom}
	b.spareKeys, b.spareRoom = nil, 0
	r.shape = append(r.shape, b.mask...)
	r.cols = append(append(make([]int, 0, len(head)+len(tail)), head...), tail...)
	r.stmt = b.statementFor(r)
	r.sql = r.stmt.sql
	r.params = make([][][]byte, len(r.cols))
	if n := r.stmt.rows; n > 1 {
		room := make([][]byte, n*len(r.cols))
		for i := range r.params {
			r.params[i] = room[i*n : i*n : (i+1)*n]
		}
	}
	r.fallback = t.ExtraUnique && (kind == 'U' || kind == 'F')
	b.runs = append(b.runs, r)
	b.cur = r
	return r
}

// added ends a change that joined b.cur: a run that is full closes.
func (b *batcher) added() *run {
	r := b.cur
	r.rows++
	if r.rows >= b.batchRows {
		b.close(r)
	}
	return r
}

// close moves the open run r to ready (dropped when it holds no row).
func (b *batcher) close(r *run) {
	if i := slices.Index(b.runs, r); i >= 0 {
		b.runs = slices.Delete(b.runs, i, i+1)
	}
	if b.cur == r {
		b.cur = nil
	}
	if r.rows > 0 {
		b.ready = append(b.ready, r)
		if r.stmt != nil {
			r.stmt.rows = r.rows
		}
	}
	b.keepKeys(r)
}

// keepKeys takes the key index of r, just closed (none reads it after), as
// the spare for the next run, emptied: unless it held too few keys for its
// room, when emptying it would cost more than a new one growing.
func (b *batcher) keepKeys(r *run) {
	m, n := r.keys, len(r.keys)
	r.keys = nil
	if m == nil || (n > 0 && n*4 < r.keysRoom) || (b.spareKeys != nil && b.spareRoom >= max(n, r.keysRoom)) {
		return
	}
	clear(m)
	b.spareKeys, b.spareRoom = m, max(n, r.keysRoom)
}

// closeAll closes every open run, in the order they were opened.
func (b *batcher) closeAll() {
	for len(b.runs) > 0 {
		b.close(b.runs[0])
	}
}

// take returns the closed runs, in order, and forgets them.
func (b *batcher) take() []*run {
	out := b.ready
	b.ready = nil
	return out
}

// reset drops every run, open or closed: the transaction rolled back.
func (b *batcher) reset() {
	b.runs, b.cur, b.ready = nil, nil, nil
}

// bytes is the parameter bytes held in runs not taken yet.
func (b *batcher) bytes() int {
	_, n := b.held()
	return n
}

// held is the rows and parameter bytes held in runs not taken yet.
func (b *batcher) held() (rows, bytes int) {
	for _, rs := range [][]*run{b.runs, b.ready} {
		for _, r := range rs {
			rows += r.rows
			bytes += r.bytes
		}
	}
	return rows, bytes
}

// touch records keys the run now touches, none of them collapsible.
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
// row in the table's open run with those of a later one, when the result is
// provably the same as applying both: neither changes the key, both set the
// same columns, and no trigger on the target would see the difference. Not
// on tables with unique indexes beyond the key, whose row-by-row fallback
// needs every step.
func (b *batcher) collapse(t *Table, part int32, key []byte, new parapply.Tuple) bool {
	r := b.openRun(t.Rel.ID, part)
	if t.Triggers || t.ExtraUnique || !b.fits(r, t, 'U') {
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
	b.collapsed.Add(1)
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
		switch {
		case v.Kind == parapply.ValueBinary && !t.binaryValues:
			return fmt.Errorf("%s of %s: column %s arrived in binary in a stream that asked for text (protocol error)", what, t.Name, t.Rel.Columns[i].Name)
		case v.Kind == parapply.ValueText && t.binaryValues:
			// pgoutput sends a type without a binary output function
			// as text, even in a binary stream.
			return fmt.Errorf("%w: %s of %s: column %s arrived as text in a binary stream", ErrBinaryUnfit, what, t.Name, t.Rel.Columns[i].Name)
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

// emptyRow stands for "no column" in an insert run whose rows carry no
// column the target takes: one NULL parameter per row counts them.
var emptyRow = []int{-1}

// insert adds an INSERT of tup into t; it returns the run it joined.
func (b *batcher) insert(t *Table, tup parapply.Tuple) *run {
	b.mask, b.cols = present(t, tup, nil, b.mask[:0], b.cols)
	part := t.part(tup)
	if len(b.cols) == 0 {
		r := b.start(t, part, 'I', nil, emptyRow)
		r.params[0] = append(r.params[0], nil)
	} else {
		r := b.start(t, part, 'I', nil, b.cols)
		r.push(0, tup, r.cols)
	}
	return b.added()
}

// update adds an UPDATE of t. oldKind is 0 (key unchanged, no old image),
// 'K' (old key) or 'O' (old row, REPLICA IDENTITY FULL). It returns the run
// the change joined, or nil when it needs no row of its own (it sets
// nothing, or collapsed into an earlier update).
func (b *batcher) update(t *Table, oldKind byte, old, new parapply.Tuple) (*run, error) {
	if t.Full {
		if oldKind != 'O' {
			return nil, fmt.Errorf("update of %s (REPLICA IDENTITY FULL) came without its old row (protocol error)", t.Name)
		}
		return b.full(t, 'F', old, new)
	}
	if len(t.Key) == 0 {
		return nil, fmt.Errorf("update of %s: the table has no replica identity key on the publisher; set REPLICA IDENTITY there", t.Name)
	}
	// Without an old image the key is unchanged: locate by the new row's
	// key and leave the key columns out of SET.
	// Columns GENERATED ALWAYS AS IDENTITY on the target stay out of SET.
	keySrc, skip := new, t.keyAndIdentity
	if oldKind != 0 {
		if t.moves(old, new) {
			return b.move(t, old, new)
		}
		keySrc, skip = old, t.setSkip
		if err := checkIdentityKept(t, old, new); err != nil {
			return nil, err
		}
	}
	b.mask, b.cols = present(t, new, skip, b.mask[:0], b.cols)
	if len(b.cols) == 0 {
		return nil, nil
	}
	b.keybuf = appendKey(b.keybuf, keySrc, t.Key)
	b.key2buf = b.key2buf[:0]
	part := t.part(keySrc)
	if oldKind != 0 {
		b.key2buf = appendKey(b.key2buf, new, t.Key)
	} else if b.collapse(t, part, b.keybuf, new) {
		return nil, nil
	}
	r := b.start(t, part, 'U', t.Key, b.cols, b.keybuf, b.key2buf)
	if oldKind == 0 {
		r.mark(b.keybuf, r.rows)
	} else {
		r.touch(b.keybuf, b.key2buf)
	}
	r.push(0, keySrc, t.Key)
	r.push(len(t.Key), new, b.cols)
	return b.added(), nil
}

// checkIdentityKept refuses an update that changes the value of a column
// that is GENERATED ALWAYS AS IDENTITY on the target, where the old image
// tells: PostgreSQL lets an UPDATE set such a column only to DEFAULT, and
// leaving the old value would leave a different row than the publisher's.
func checkIdentityKept(t *Table, old, new parapply.Tuple) error {
	for _, c := range t.AlwaysIdentity {
		if c >= len(old) || c >= len(new) {
			continue
		}
		o, oldOK := t.text(c, old[c])
		n, newOK := t.text(c, new[c])
		if oldOK && newOK && o != n {
			return fmt.Errorf("%w: an update changes column %s of %s from %s to %s, but the column is GENERATED ALWAYS AS IDENTITY on the target, which no UPDATE may set; make it GENERATED BY DEFAULT there (ALTER TABLE %s ALTER COLUMN %s SET GENERATED BY DEFAULT)",
				ErrSchema, colName(t, c), t.Name, o, n, t.Name, colName(t, c))
		}
	}
	return nil
}

// checkComparable refuses, as the built-in apply does, to locate a row by
// a non-NULL old value of a column whose type has no equality operator on
// the target (json, point, xml): there is no telling which row it names.
// The built-in fails only when it meets a candidate row whose earlier
// columns are equal; this fails on every such change.
func checkComparable(t *Table, kind byte, old parapply.Tuple, cols []int) error {
	for _, c := range cols {
		if e := t.columnEquality(c); !e.eq && old[c].Kind != parapply.ValueNull {
			what := "an update of"
			if kind == 'X' {
				what = "a delete from"
			}
			return fmt.Errorf("%w: could not identify an equality operator for type %s: %s %s (REPLICA IDENTITY FULL) locates its row by every old value, and column %s has no equality operator on the target, as with the built-in apply; give the table a replica identity key on the publisher (a primary key, or REPLICA IDENTITY USING INDEX), or change the column's type (json to jsonb, for example)",
				ErrSchema, e.typ, what, t.Name, colName(t, c))
		}
	}
	return nil
}

// full adds an update ('F') or delete ('X') under REPLICA IDENTITY FULL.
// The key of a row is its whole old image; an update also touches its new
// image, which the next change of the row names as old.
func (b *batcher) full(t *Table, kind byte, old, new parapply.Tuple) (*run, error) {
	var set []int
	b.mask = b.mask[:0]
	if kind == 'F' {
		if err := checkIdentityKept(t, old, new); err != nil {
			return nil, err
		}
		b.mask, b.cols = present(t, new, t.AlwaysIdentity, b.mask, b.cols)
		if len(b.cols) == 0 {
			return nil, nil
		}
		set = b.cols
	}
	b.mask, b.oldCols = present(t, old, nil, b.mask, b.oldCols)
	if err := checkComparable(t, kind, old, b.oldCols); err != nil {
		return nil, err
	}
	noCols := len(b.oldCols) == 0 // a table with no columns: any row will do
	if noCols {
		b.oldCols = append(b.oldCols, emptyRow...)
	}
	if len(b.all) != len(t.Rel.Columns) {
		b.all = b.all[:0]
		for i := range t.Rel.Columns {
			b.all = append(b.all, i)
		}
	}
	b.keybuf = appendKey(b.keybuf, old, b.all)
	r := b.start(t, t.part(old), kind, b.oldCols, set, b.keybuf)
	r.touch(b.keybuf)
	if noCols {
		r.params[0] = append(r.params[0], nil)
	} else {
		r.push(0, old, b.oldCols)
	}
	r.push(len(b.oldCols), new, set)
	if kind == 'F' {
		if slices.ContainsFunc(new, func(v parapply.Value) bool { return v.Kind == parapply.ValueUnchanged }) {
			// The next change of this row names an old image we cannot
			// spell out here: let it start a new statement.
			r.closed = true
		} else {
			b.keybuf = appendKey(b.keybuf, new, b.all)
			r.touch(b.keybuf)
		}
	}
	return b.added(), nil
}

// delete adds a DELETE of the row old identifies.
func (b *batcher) delete(t *Table, old parapply.Tuple) (*run, error) {
	if t.Full {
		return b.full(t, 'X', old, nil)
	}
	if len(t.Key) == 0 {
		return nil, fmt.Errorf("delete from %s: the table has no replica identity key on the publisher; set REPLICA IDENTITY there", t.Name)
	}
	b.mask = b.mask[:0]
	b.keybuf = appendKey(b.keybuf, old, t.Key)
	r := b.start(t, t.part(old), 'D', t.Key, nil, b.keybuf)
	r.touch(b.keybuf)
	r.push(0, old, t.Key)
	return b.added(), nil
}
