package apply

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/targetdb"
)

type op struct {
	sql  string
	what string // for errors: "update of public.t (300 rows)"
	rows int    // expected rows affected, -1 when not checked
	kind byte   // for statements built from a run: the run's kind
	// For statements built from a run: the table and, per parameter, the
	// published column it carries, so a failure can name the column.
	table *Table
	cols  []int
	args  []any
	// applied, for statements built from a run, is the run's flag that
	// its statement has run (see prefetchJob.stale).
	applied *atomic.Bool
	// scan, when set, receives the single row the statement returns.
	scan []any
	// copy, when set, makes the statement a COPY FROM STDIN of these
	// bytes: it ends the pipelined batch before it (see sender.send).
	copy []byte
	// run is the run the statement applies, if any: a conflict makes
	// the group be applied again with the run's resolving statement.
	run *run
	// resolving marks a run's resolving statement.
	resolving bool
	// after, when set, is called once the statement's row is scanned.
	after func()
}

func (a *Applier) queue(sql string, what string, rows int, args ...any) {
	a.queueOp(op{sql: sql, what: what, rows: rows, args: args})
}

// queueOp queues o, after BEGIN when the target transaction is not begun.
func (a *Applier) queueOp(o op) {
	if !a.began {
		a.ops = append(a.ops, op{sql: "BEGIN", what: "BEGIN", rows: -1})
		if a.citus {
			a.ops = append(a.ops, op{sql: citusReplicaRole, what: "setting session_replication_role for the shards", rows: -1})
			if a.cfg.LockTimeout != "" {
				a.ops = append(a.ops, op{sql: "SET LOCAL lock_timeout = " + parapply.QuoteLiteral(a.cfg.LockTimeout), what: "setting lock_timeout for the shards", rows: -1})
			}
		}
		a.began = true
	}
	a.ops = append(a.ops, o)
}

// txns names the source transactions a round trip applies, for errors.
type txns struct {
	first, last Txn
	n           int
}

// String names the source transactions in an error's words.
func (d txns) String() string {
	if d.n <= 1 {
		return fmt.Sprintf("source transaction %d (commit %s)", d.last.XID, d.last.CommitLSN)
	}
	return fmt.Sprintf("source transactions %d to %d (commits %s to %s, applied as one group of %d)",
		d.first.XID, d.last.XID, d.first.CommitLSN, d.last.CommitLSN, d.n)
}

// wrap makes err a GroupError when the round trip applied several source
// transactions as one, else a TxnError.
func (d txns) wrap(err error) error {
	if d.n <= 1 {
		return &TxnError{Txn: d.last, Err: err}
	}
	return &GroupError{First: d.first, Last: d.last, Txns: d.n, Err: err}
}

// TxnError is an error a statement met applying one source transaction:
// on_error = skip_transaction skips that transaction.
type TxnError struct {
	Txn Txn
	Err error
}

// Error is the statement's error's text.
func (e *TxnError) Error() string { return e.Err.Error() }

// Unwrap lets errors.Is and As see the statement's error.
func (e *TxnError) Unwrap() error { return e.Err }

// GroupError is an error met applying several source transactions as one
// target transaction (a group, or a worker's batch of units): which of them
// caused it is not known, and a DBA who would skip one must be told which.
// The subscriber applies them again one at a time to find out.
type GroupError struct {
	First, Last Txn
	Txns        int
	Err         error
}

// Error is the statement's error's text.
func (e *GroupError) Error() string { return e.Err.Error() }

// Unwrap lets errors.Is and As see the statement's error.
func (e *GroupError) Unwrap() error { return e.Err }

// describe names the source transactions of the open group, or of the one
// just closed (its end is being sent): a group keeps its fields until the
// next Begin opens another.
func (a *Applier) describe() txns {
	g := a.grp
	if g.txns <= 1 || g.first.XID == a.txn.XID {
		return txns{first: a.txn, last: a.txn, n: 1}
	}
	return txns{first: g.first, last: a.txn, n: g.txns}
}

// Commit commits the open group: its last statements, the progress row
// (naming the group's last source transaction) and COMMIT go in one round
// trip. It returns what the Tracker needs to know of the commit.
func (a *Applier) Commit(ctx context.Context) (Committed, error) {
	var c Committed
	err := a.end(ctx, &c, "")
	return c, err
}

// end queues the end of the group (see queueEnd), waits for it and fills
// c. If the round trip fails, the group may have ended all the same (the
// connection died after COMMIT reached the target): the run then ends, and
// the next one reads the progress row to know.
func (a *Applier) end(ctx context.Context, c *Committed, gid string) error {
	if err := a.queueEnd(ctx, c, gid); err != nil {
		return err
	}
	if err := a.sendQueued(ctx); err != nil {
		a.rollback(ctx)
		return err
	}
	return c.finish(a)
}

// Committed describes a committed group, for the Tracker.
type Committed struct {
	End        parapply.LSN // end LSN of the group's last source transaction
	CommitTime time.Time    // its source commit time
	// Local and Flushed are the target's WAL insert position after the
	// commit and its flush position.
	Local, Flushed parapply.LSN
	// Durable is true when the commit was synchronous: it is on the
	// target's disk, and so is everything committed before it.
	Durable bool
	txns    int
	ins, fl string
	tallies []pendingTally
	a       *Applier
	// arrays are the group's array parameters, free again once it has
	// committed.
	arrays [][]byte
}

func (c *Committed) finish(a *Applier) error {
	a.Stats.Txns.Add(int64(c.txns))
	a.Stats.Groups.Add(1)
	// The group's rows, counted per table as they were queued.
	for _, t := range c.tallies {
		t.addTo()
		a.Stats.Inserts.Add(t.n[tallyInsert])
		a.Stats.Updates.Add(t.n[tallyUpdate])
		a.Stats.Deletes.Add(t.n[tallyDelete])
	}
	if c.a != nil {
		c.a.detector.reportConflicts(c.a.Warn)
		c.a.arrays.release(c.arrays)
		c.arrays = nil
	}
	var err error
	c.Local, c.Flushed, err = parseWALPositions(c.ins, c.fl)
	return err
}

// CommitAsync queues the open group's commit like Commit, but returns once
// it is sent: the next group is built while the target commits this one,
// and done receives the positions (from another goroutine) once it has. A
// failure is returned by the next call that uses the connection. Until
// then Busy reports true.
func (a *Applier) CommitAsync(ctx context.Context, done func(Committed)) error {
	c := &Committed{}
	if err := a.queueEnd(ctx, c, ""); err != nil {
		return err
	}
	return a.sendQueuedAsync(ctx, func() error {
		if err := c.finish(a); err != nil {
			return err
		}
		done(*c)
		return nil
	})
}

// PrepareTransaction ends the open group, which holds one source
// transaction prepared for two-phase commit, with PREPARE TRANSACTION gid.
func (a *Applier) PrepareTransaction(ctx context.Context, gid string) (Committed, error) {
	var c Committed
	err := a.end(ctx, &c, gid)
	return c, err
}

// FinishPrepared commits (or rolls back) the prepared transaction gid; a
// commit records txn, ending at end, in the progress row. A gid the target no
// longer has was finished before a restart: a commit is then checked
// against parapply.prepared (its row exists only if the prepared
// transaction committed); a rollback has nothing left to do.
func (a *Applier) FinishPrepared(ctx context.Context, gid string, commit bool, txn Txn, end parapply.LSN) (Committed, error) {
	var c Committed
	if err := a.wait(); err != nil {
		return c, err
	}
	verb := "ROLLBACK PREPARED "
	if commit {
		verb = "COMMIT PREPARED "
	}
	if _, err := a.conn.Exec(ctx, verb+parapply.QuoteLiteral(gid)); err != nil {
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != pgerrcode.UndefinedObject {
			return c, fmt.Errorf("%sof source transaction %d on the target: %w", verb, txn.XID, err)
		}
		if commit {
			done, err := progress.PreparedDone(ctx, a.conn, a.cfg.Slot, gid)
			if err != nil {
				return c, err
			}
			if !done {
				return c, fmt.Errorf("source transaction %d (%s) is to be committed, but the target holds no prepared transaction %s and never committed it: it was lost (was it rolled back by hand with ROLLBACK PREPARED?); re-sync the target", txn.XID, txn.CommitLSN, gid)
			}
		}
	}
	if !commit {
		// Nothing committed: the progress row stays as it is.
		return c, nil
	}
	a.Begin(txn)
	a.End(end)
	a.queueProgress(progress.ForgetPrepared(a.cfg.Slot, gid), "forgetting the prepared transaction")
	err := a.end(ctx, &c, "")
	return c, err
}

// Wait waits for the round trip in flight, if any, and returns its error.
func (a *Applier) Wait() error { return a.wait() }

// Busy reports whether a round trip is still in flight, and the error of
// one that has finished (taking it, as Wait does).
func (a *Applier) Busy() (bool, error) { return a.sender.busy() }

// queueProgress queues a statement of package progress.
func (a *Applier) queueProgress(st progress.Statement, what string) {
	a.queue(st.SQL, what, -1, st.Args...)
}

// queueEnd queues the group's last statements and its end: the progress
// row and COMMIT, or, with a gid, a row of parapply.prepared and PREPARE
// TRANSACTION (the progress row is left alone: its lock would be held until
// COMMIT PREPARED); then the WAL positions. It closes the group.
func (a *Applier) queueEnd(ctx context.Context, c *Committed, gid string) error {
	g := a.grp
	if !g.open || a.inTxn {
		return fmt.Errorf("commit without a finished source transaction (internal error)")
	}
	if err := a.flushRuns(ctx); err != nil {
		a.rollback(ctx)
		return err
	}
	if a.origin != "" {
		// The commit (or PREPARE) record carries the source transaction's
		// end LSN and commit time as its origin's, as the built-in apply
		// worker's do.
		a.queue("SELECT pg_catalog.pg_replication_origin_xact_setup($1::text::pg_lsn, $2)", "setting the commit's replication origin position", -1, g.end.String(), g.last.CommitTime)
	}
	if gid != "" {
		a.queueProgress(progress.RecordPrepared(a.cfg.Slot, gid, g.last.XID, g.last.CommitLSN, g.end), "recording the prepared transaction")
		a.ops = append(a.ops, op{sql: "PREPARE TRANSACTION " + parapply.QuoteLiteral(gid), what: "PREPARE TRANSACTION", rows: -1})
		c.Durable = true // a PREPARE is flushed before it returns
	} else {
		if len(g.skips) > 0 {
			a.queueProgress(progress.SkipDone(a.cfg.Slot, g.skips), "recording the skipped transactions")
		}
		if a.cfg.AheadOfOrder {
			a.queueProgress(progress.RecordApplied(a.cfg.Slot, g.first.CommitLSN, g.last.CommitLSN, g.end), "recording the applied transactions")
		} else {
			a.queueProgress(progress.Update(a.cfg.Slot, g.last.CommitLSN, g.end, g.last.XID, g.last.CommitTime), "progress update")
		}
		c.Durable = a.syncCommit
		if !c.Durable && a.cfg.SyncStandby != nil && a.cfg.SyncStandby.Load() {
			// The publisher waits for this commit: flush it now rather
			// than when the target's WAL writer gets to it.
			a.queue("SET LOCAL synchronous_commit = on", "synchronous commit", -1)
			c.Durable = true
		}
		a.ops = append(a.ops, op{sql: "COMMIT", what: "COMMIT", rows: -1})
	}
	// The WAL positions ride in the same round trip, right after COMMIT.
	a.ops = append(a.ops, op{sql: walPositionsSQL, what: "reading the target's WAL position", scan: []any{&c.ins, &c.fl}})
	c.End, c.CommitTime, c.txns = g.end, g.last.CommitTime, g.txns
	c.tallies = a.takeCounts()
	c.a = a
	c.arrays = a.arrays.takeHeld()
	a.grp.open = false // the next Begin opens a new group, with its own BEGIN
	return nil
}

const walPositionsSQL = "SELECT pg_catalog.pg_current_wal_insert_lsn()::text, pg_catalog.pg_current_wal_flush_lsn()::text"

func parseWALPositions(i, f string) (insert, flush parapply.LSN, err error) {
	if insert, err = parapply.ParseLSN(i); err != nil {
		return 0, 0, err
	}
	flush, err = parapply.ParseLSN(f)
	return insert, flush, err
}

// WALPositions reads the target's WAL insert and flush positions.
func (a *Applier) WALPositions(ctx context.Context) (insert, flush parapply.LSN, err error) {
	var i, f string
	if err := a.wait(); err != nil {
		return 0, 0, err
	}
	if err := a.conn.QueryRow(ctx, walPositionsSQL).Scan(&i, &f); err != nil {
		return 0, 0, fmt.Errorf("reading the target's WAL position: %w", err)
	}
	return parseWALPositions(i, f)
}

// rollback abandons the open group: what is queued, its runs and counts,
// and on the target its transaction.
func (a *Applier) rollback(ctx context.Context) {
	a.sender.forget()
	a.ops, a.qbytes, a.qrows = nil, 0, 0
	a.batcher.reset()
	a.takeCounts()
	a.detector.rolledBack()
	a.arrays.drop()
	if !a.conn.IsClosed() {
		// Also after a failed COMMIT round trip: the server may be left
		// in an aborted transaction block. Outside a transaction,
		// ROLLBACK only warns.
		_, _ = a.conn.Exec(ctx, "ROLLBACK")
	}
	a.began, a.inTxn, a.grp = false, false, group{}
}

// Abort abandons the transaction being applied.
func (a *Applier) Abort(ctx context.Context) { a.rollback(ctx) }

// Prepare sends every statement of the open group, so that only the
// progress row and COMMIT are left for Commit.
func (a *Applier) Prepare(ctx context.Context) error {
	if err := a.flushRuns(ctx); err != nil {
		a.rollback(ctx)
		return err
	}
	if err := a.sendQueued(ctx); err != nil {
		a.rollback(ctx)
		return err
	}
	return nil
}

// Closed reports whether the target connection is gone, without waiting
// for statements in flight.
func (a *Applier) Closed() bool { return a.conn.IsClosed() }

// SetupOrigin makes every later commit of the session one of the
// replication origin name (created on the target if missing), and every
// group's commit carries its last source transaction's end LSN and commit
// time as the origin's (pg_replication_origin_xact_setup).
func (a *Applier) SetupOrigin(ctx context.Context, name string) error {
	if err := a.wait(); err != nil {
		return err
	}
	err := targetdb.SetupOrigin(ctx, a.conn, name)
	if err == nil {
		a.origin = name
	}
	return err
}
