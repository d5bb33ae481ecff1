package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
)

// change looks up the table of a row change and checks its tuples; it
// returns nil (and the error, if any) when the change is not to be applied
// (see skip), else counts it in the open group (Stats and the table's
// tally hear of it when the group commits).
func (a *Applier) change(rel uint32, what string, kind int, tups ...parapply.Tuple) (*Table, error) {
	t, err := a.table(rel)
	if err != nil {
		return nil, err
	}
	if t.missing {
		if held, err := a.hold(t, kind, tups); held || err != nil {
			return nil, err
		}
	}
	for _, tup := range tups {
		if err := checkTuple(t, tup, what); err != nil {
			return nil, err
		}
	}
	if a.skip(t) {
		return nil, nil
	}
	if a.txn.Failed != "" {
		a.logFailed(t, what, tups...)
		return nil, nil
	}
	a.count(t, kind)
	a.grp.changes++
	return t, nil
}

// Insert queues an INSERT of tup into relation rel.
func (a *Applier) Insert(ctx context.Context, rel uint32, tup parapply.Tuple) error {
	t, err := a.change(rel, "insert", tallyInsert, tup)
	if t == nil {
		return err
	}
	r := a.batcher.insert(t, tup)
	if a.detector.config != nil {
		r.noteTxn(a.txn)
	}
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
	r, err := a.batcher.update(t, oldKind, old, new)
	if err != nil {
		return err
	}
	return a.added(ctx, r)
}

// Delete queues a DELETE of the row old identifies.
func (a *Applier) Delete(ctx context.Context, rel uint32, oldKind byte, old parapply.Tuple) error {
	t, err := a.change(rel, "delete", tallyDelete, old)
	if t == nil {
		return err
	}
	r, err := a.batcher.delete(t, old)
	if err != nil {
		return err
	}
	return a.added(ctx, r)
}

// added sends what the batcher closed and offers the rows of r, the run a
// change joined (nil if none), to the prefetcher.
func (a *Applier) added(ctx context.Context, r *run) error {
	if r != nil && a.detector.config != nil {
		r.noteTxn(a.txn)
	}
	if err := a.maybeFlush(ctx); err != nil {
		return err
	}
	if r != nil {
		a.readAhead.offer(r, false)
	}
	return nil
}

// Truncate queues a TRUNCATE of the given relations with the publisher's
// options.
func (a *Applier) Truncate(ctx context.Context, rels []uint32, cascade, restart bool) error {
	if err := a.flushRuns(ctx); err != nil {
		return err
	}
	names := make([]string, 0, len(rels))
	oids := make([]uint32, 0, len(rels))
	onCitus := false
	for _, id := range rels {
		t, err := a.table(id)
		if err != nil {
			return err
		}
		if a.skip(t) {
			continue
		}
		if a.txn.Failed != "" {
			a.logFailed(t, "truncate")
			continue
		}
		names = append(names, t.Target())
		oids = append(oids, t.OID)
		a.count(t, tallyTruncate)
		onCitus = onCitus || t.Citus != nil
	}
	if len(names) == 0 {
		return nil
	}
	if onCitus {
		// Citus truncates the shards from a trigger of its own, which
		// session_replication_role = replica keeps from firing.
		a.queue(citusOriginRole, "letting Citus truncate the shards", -1)
	}
	resets := false
	if restart && !onCitus {
		// RESTART IDENTITY needs the tables' owner; a role that applies
		// without owning them (docs/operations.md) restarts their
		// sequences with setval, which UPDATE on them allows.
		owns := true
		if err := a.wait(); err != nil {
			return err
		}
		if err := a.conn.QueryRow(ctx, `SELECT coalesce(bool_and(pg_catalog.pg_has_role(relowner, 'USAGE')), true) FROM pg_catalog.pg_class WHERE oid = ANY ($1::oid[])`, oids).Scan(&owns); err != nil {
			return failed(a, fmt.Errorf("reading the owners of the tables a TRUNCATE ... RESTART IDENTITY truncates: %w", err))
		}
		restart, resets = owns, !owns
	}
	a.queue(TruncateSQL(names, cascade, restart), "truncate", -1)
	if resets {
		a.queue(restartSequencesSQL, "restarting the sequences of truncated tables (RESTART IDENTITY, without their owner)", -1, oids)
	}
	if onCitus {
		a.queue(citusReplicaRole, "setting session_replication_role for the shards", -1)
	}
	a.Stats.Truncates.Add(1)
	return nil
}

// restartSequencesSQL restarts the sequences the tables $1 own (serial and
// identity columns), as TRUNCATE ... RESTART IDENTITY does, with setval.
const restartSequencesSQL = `SELECT pg_catalog.setval(d.objid::regclass, s.seqstart, false)
	FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_sequence s ON s.seqrelid = d.objid
	WHERE d.classid = 'pg_catalog.pg_class'::regclass AND d.refclassid = 'pg_catalog.pg_class'::regclass
	AND d.refobjid = ANY ($1::oid[]) AND d.deptype IN ('a', 'i')`

// maybeFlush queues the statements of the runs the batcher closed, and
// sends them once enough parameter bytes wait.
func (a *Applier) maybeFlush(ctx context.Context) error {
	if err := a.queueReady(ctx); err != nil {
		return err
	}
	rows, bytes := a.batcher.held()
	if a.qbytes+bytes >= a.cfg.PipelineBytes || a.readAhead.roundFull(a.qrows+rows) {
		if err := a.flushRuns(ctx); err != nil {
			return err
		}
		return a.sendQueuedAsync(ctx, nil)
	}
	return nil
}

var kindNames = map[byte]string{'I': "insert", 'U': "update", 'F': "update", 'D': "delete", 'X': "delete"}

// flushRuns closes every open run and queues its statement, in the order
// they were opened.
func (a *Applier) flushRuns(ctx context.Context) error {
	a.batcher.closeAll()
	return a.queueReady(ctx)
}

// queueReady queues the statements of the runs the batcher closed.
func (a *Applier) queueReady(ctx context.Context) error {
	for _, r := range a.batcher.take() {
		if err := a.queueStatement(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// queueStatement turns the closed run r into a queued statement.
func (a *Applier) queueStatement(ctx context.Context, r *run) error {
	a.readAhead.offer(r, true)
	what := fmt.Sprintf("%s of %d rows in %s", kindNames[r.kind], r.rows, r.table.Name)
	a.grp.bytes += r.bytes
	a.qbytes += r.bytes
	a.qrows += r.rows
	if r.kind == 'I' && r.rows >= copyMinRows && r.cols[0] >= 0 && !r.table.NoCopy {
		a.queueRun(r, CopySQL(r.table, r.cols), what, -1).copy = r.table.encodeCopy(r.params, r.rows, r.bytes)
		return nil
	}
	args, err := r.encode(&a.arrays)
	if err != nil {
		return err
	}
	expect := r.rows
	if r.kind == 'I' {
		expect = -1
	}
	if r.fallback {
		return a.withFallback(ctx, r, args, what, expect)
	}
	return a.queueRunStatement(r, what, expect, args)
}

// queueRunStatement queues the statement of run r: the run's own, or with
// conflict detection on, for an update or delete run, the checked one
// (which fails on a conflict, and the transaction is applied again with
// resolving statements), or soon after a conflict the fast one, which resolves what
// conflicts it meets by itself (see resolve.go).
func (a *Applier) queueRunStatement(r *run, what string, expect int, args []any) error {
	if a.detector.on(r.table) && (r.kind == 'U' || r.kind == 'D') {
		if time.Now().UnixNano() < a.detector.resolvingUntil.Load() {
			o, err := a.detector.resolvingOp(r, a.detector.statement(r, fastStatement), what)
			if err != nil {
				return err
			}
			o.resolving = false // a replay makes it resolving
			a.queueOp(o)
			return nil
		}
		o := a.queueRun(r, a.detector.statement(r, checkedStatement), what, -1, args...)
		n := new(int64)
		o.scan, o.after = []any{n}, func() {
			a.Stats.Statements.Add(1)
			a.Stats.Executed.Add(*n)
		}
		return nil
	}
	if r.kind != 'I' && r.table.suppresses(r.kind) {
		a.countedOp(r, what, expect, args)
		return nil
	}
	a.queueRun(r, r.sql, what, expect, args...)
	return nil
}

// queueRun queues a statement built from run r and returns its op, which
// names r's table and columns for errors.
func (a *Applier) queueRun(r *run, sql, what string, expect int, args ...any) *op {
	a.queue(sql, what, expect, args...)
	o := &a.ops[len(a.ops)-1]
	o.table, o.cols, o.kind, o.applied, o.run = r.table, r.cols, r.kind, &r.applied, r
	return o
}

// withFallback runs an UPDATE on a table with unique indexes beyond its key
// under a savepoint: if the set-based statement hits a unique violation that
// row order would have avoided, it is rolled back and replayed row by row.
func (a *Applier) withFallback(ctx context.Context, r *run, args []any, what string, expect int) error {
	a.queue("SAVEPOINT parapply_run", "savepoint", -1)
	if err := a.queueRunStatement(r, what, expect, args); err != nil {
		return err
	}
	a.queue("RELEASE SAVEPOINT parapply_run", "savepoint", -1)
	// A violation of one row is no transient duplicate: a conflict.
	a.detector.setBasedTry = r.rows > 1
	err := a.sendQueued(ctx)
	a.detector.setBasedTry = false
	var pe *pgconn.PgError
	if err == nil || !errors.As(err, &pe) || pe.Code != pgerrcode.UniqueViolation || r.rows == 1 {
		return err
	}
	a.Stats.Replays.Add(1)
	if _, rerr := a.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT parapply_run"); rerr != nil {
		// The violation came from a statement queued before the
		// savepoint (which then never existed): that error is the one
		// to report, and to retry on.
		return err
	}
	// What the set-based try did is undone: a replay after a conflict
	// starts from the savepoint too.
	a.detector.keep.backToSavepoint("SAVEPOINT parapply_run")
	for i := 0; i < r.rows; i++ {
		one := r.row(i)
		args, err := one.encode(&a.arrays)
		if err != nil {
			return err
		}
		if err := a.queueRunStatement(one, fmt.Sprintf("%s of 1 row in %s", kindNames[r.kind], r.table.Name), 1, args); err != nil {
			return err
		}
	}
	a.queue("RELEASE SAVEPOINT parapply_run", "savepoint", -1)
	return a.sendQueued(ctx)
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
		if v.Kind == parapply.ValueNull {
			m[t.Rel.Columns[i].Name] = nil
		} else if s, ok := t.text(i, v); ok {
			m[t.Rel.Columns[i].Name] = s
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
