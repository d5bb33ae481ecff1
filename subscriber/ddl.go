package subscriber

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/ddl"
	"github.com/parapply/parapply/pgoutput"
	"github.com/parapply/parapply/subscriber/flow"
)

// Schema changes (ddl = apply). A parapply.ddl message is part of its
// source transaction, at its place among the row changes; its statements
// run there, on the reader's connection, in the target transaction that
// applies the source transaction:
//
//   - without workers, in the open group, after the changes before it;
//   - with workers, the unit being built gives back the transaction's
//     changes taken so far, everything handed over before is committed
//     (a barrier: no worker applies anything meanwhile), and the rest of
//     the transaction is the reader's, as a prepared transaction's is;
//     the workers load every table again at its next relation message;
//   - a streamed transaction that holds one is applied at its commit from
//     its spill file, not in flight (its later relation messages describe
//     tables the target has not changed yet);
//   - CREATE INDEX CONCURRENTLY (and the other commands that refuse a
//     transaction block) arrive alone in a source transaction of their
//     own: everything before is committed, and the statement runs on its
//     own, outside a transaction, before the source transaction is taken.
//
// A statement the target refuses stops parapply, naming the statement and
// the source transaction, as any change it cannot apply does.

// wantsDDL reports whether m is a DDL message parapply is to run.
func (l *loop) wantsDDL(m *pgoutput.LogicalMessage) bool {
	return l.s.cfg.DDL == DDLApply && m.Transactional && m.Prefix == ddl.Prefix
}

// ddlStatements decodes a DDL message into what the target runs.
func (l *loop) ddlStatements(m *pgoutput.LogicalMessage, txn apply.Txn) (ddl.Message, []string, error) {
	msg, err := ddl.Parse(m.Content)
	if err == nil {
		var stmts []string
		if stmts, err = msg.Statements(); err == nil {
			return msg, stmts, nil
		}
	}
	// Not m.XID: pgoutput sends a message's transaction only within a
	// streamed transaction (0 otherwise).
	return msg, nil, fmt.Errorf("source transaction %d (commit %s): %w; run the DDL on the target by hand, then have parapply pass over it with %s", txn.XID, txn.CommitLSN, err, l.s.cfg.Target.Skip(txn.CommitLSN, true))
}

// ddlAlone runs a DDL that cannot run in a transaction block, when it is
// the first message of its source transaction (the BEGIN still held):
// everything taken before is committed first. It reports whether it ran it;
// the transaction then goes on as an empty one, which records it as done.
// A statement found done already (an earlier run ran it, then stopped
// before recording it) counts as run.
func (l *loop) ddlAlone(ctx context.Context, m *pgoutput.LogicalMessage) (bool, error) {
	txn := apply.Txn(l.core.Held())
	msg, stmts, err := l.ddlStatements(m, txn)
	if err != nil || len(stmts) != 1 || !ddl.Concurrently(stmts[0]) {
		return false, nil // ddl() applies it, or stops with the error
	}
	if !l.core.MayRunAlone() {
		return false, nil
	}
	if err := l.commitTaken(ctx); err != nil {
		return false, err
	}
	conn := l.app.Conn().PgConn()
	run := func(sql string) error { _, err := conn.Exec(ctx, sql).ReadAll(); return err }
	if err := run("SET " + strings.TrimPrefix(msg.SetSearchPath(), "SET LOCAL ")); err != nil {
		return false, fmt.Errorf("setting the search_path of a DDL on the target: %w", err)
	}
	err = run(stmts[0])
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == pgerrcode.DuplicateTable {
		// Left by an earlier run: built (then taken as done below), or
		// left invalid by a build that stopped (then built again).
		for _, o := range msg.Objects {
			var invalid bool
			if o.Type != "index" {
				continue
			}
			qerr := l.app.Conn().QueryRow(ctx, `SELECT NOT indisvalid FROM pg_catalog.pg_index WHERE indexrelid = pg_catalog.to_regclass($1)`, o.Identity).Scan(&invalid)
			if qerr == nil && invalid {
				l.s.log.Warn("an index an earlier run began to build is invalid; building it again", "index", o.Identity)
				if err = run("DROP INDEX CONCURRENTLY " + o.Identity); err == nil {
					err = run(stmts[0])
				}
				break
			}
		}
	}
	if rerr := run(strings.Replace(apply.ResetSearchPath, " LOCAL", "", 1)); err == nil && rerr != nil {
		err = rerr
	}
	if errors.As(err, &pe) && (pe.Code == pgerrcode.DuplicateTable || pe.Code == pgerrcode.UndefinedObject) {
		l.s.log.Warn("a DDL statement run outside a transaction was found done on the target already (an earlier run ran it before it stopped); taken as done", "statement", stmts[0], "commit_lsn", txn.CommitLSN.String(), "error", err)
		err = nil
	}
	if err != nil {
		return false, fmt.Errorf("DDL statement %.200q of source transaction %d (commit %s) failed on the target: %w; fix the target so that it can run, or run it (or what stands for it) by hand and have parapply pass over it with %s", stmts[0], txn.XID, txn.CommitLSN, err, l.s.cfg.Target.Skip(txn.CommitLSN, true))
	}
	l.s.stats.ddl.Add(1)
	l.app.Reload()
	l.afterDDL(nil)
	l.s.log.Info("applied a DDL statement outside a transaction", "tag", msg.Tag, "statement", stmts[0], "commit_lsn", txn.CommitLSN.String())
	return true, l.beginHeld(ctx, nil)
}

// ddl runs a DDL message of the open source transaction.
func (l *loop) ddl(ctx context.Context, m *pgoutput.LogicalMessage) error {
	step := l.core.DDL()
	if step == flow.DDLDrop {
		return nil
	}
	txn := apply.Txn(l.core.Txn())
	msg, stmts, err := l.ddlStatements(m, txn)
	if step == flow.DDLPassOver {
		l.s.log.Warn("passed over a DDL message, as parapply skip --ddl asked", "tag", msg.Tag, "statement", msg.SQL, "commit_lsn", txn.CommitLSN.String())
		return nil
	}
	if err != nil {
		return err
	}
	if step == flow.DDLNotRun {
		l.s.log.Warn("a DDL statement of a transaction on_error skips is not run", "statement", msg.SQL, "commit_lsn", txn.CommitLSN.String())
		return nil
	}
	for _, s := range stmts {
		if ddl.Concurrently(s) {
			return fmt.Errorf("source transaction %d (commit %s) holds %.200q, which cannot run inside a transaction, among other changes; run it on the target by hand, then %s", txn.XID, txn.CommitLSN, s, l.s.cfg.Target.Skip(txn.CommitLSN, true))
		}
	}
	if ps, ok := l.sink.(*poolSink); ok {
		if err := l.ddlToReader(ctx, ps); err != nil {
			return err
		}
	}
	d := apply.DDL{SetSearchPath: msg.SetSearchPath(), Statements: stmts, OnlyIfPresent: msg.DroppedIndexes(),
		Created: msg.CreatedTables(), AllCreated: msg.Tag == "replicate_ddl" || len(stmts) > 1}
	synced, err := l.app.DDL(ctx, d)
	if err != nil {
		return err
	}
	l.s.stats.ddl.Add(1)
	l.core.DDLRan()
	l.afterDDL(synced)
	l.s.log.Info("applied a DDL statement", "tag", msg.Tag, "role", msg.Role, "statement", msg.SQL, "commit_lsn", txn.CommitLSN.String())
	return nil
}

// ddlToReader moves the open transaction from the workers to the reader:
// the unit being built gives back its changes, the units before it are
// committed, and the reader takes the transaction from its start. The
// workers take the transactions after it once it has committed (commitTxn
// calls ddlBack).
func (l *loop) ddlToReader(ctx context.Context, ps *poolSink) error {
	var mine []pgoutput.Message
	if u := ps.cur; u != nil {
		from := 0
		if n := len(u.txns); n > 0 {
			from = u.txns[n-1].upto
		}
		mine = slices.Clone(u.msgs[from:])
		u.msgs = u.msgs[:from]
	}
	if err := ps.commitGroup(ctx); err != nil {
		return err
	}
	if err := ps.drain(); err != nil {
		return err
	}
	l.held, l.sink = l.sink, l.reader
	l.core.MovedToReader()
	l.reader.begin(apply.Txn(l.core.Txn()))
	for _, m := range mine {
		if _, ok := m.(*pgoutput.RelationMessage); ok {
			continue // loaded by the reader's applier when it came
		}
		if err := l.reader.change(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

// ddlBack commits the transaction ddlToReader moved and gives the stream
// back to the workers.
func (l *loop) ddlBack(ctx context.Context) error {
	if err := l.commitGroup(ctx); err != nil {
		return err
	}
	if err := l.sink.drain(); err != nil {
		return err
	}
	l.sink, l.held = l.held, nil
	return nil
}

// afterDDL tells the other holders of table descriptions that the target's
// catalog changed (the reader's applier knows: it ran the DDL): the
// workers (now or when the tuner opens them), and the kept connections of
// streamed transactions, which are closed. synced, when set, is the
// applier's new list of synced tables.
func (l *loop) afterDDL(synced map[string]parapply.LSN) {
	l.streamConns.close()
	for _, s := range []sink{l.sink, l.held} {
		if ps, ok := s.(*poolSink); ok {
			ps.p.targetChanged(synced)
			return
		}
	}
	if p := l.aupoolSink.Load(); p != nil {
		p.targetChanged(synced)
	}
}
