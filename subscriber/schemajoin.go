package subscriber

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/schemacopy"
	"github.com/parapply/parapply/source"
)

// makeJoined makes, with schema = copy, the tables that joined the
// publication while parapply runs and that the target lacks, as a start
// makes them (makeTables: what waits for their rows goes to
// parapply.deferred_index, built by their copy, and
// parapply.deferred_ddl, run after it), so that the copy of joined tables
// takes them. With ddl = apply, DDL in the stream makes them instead. A
// failure is warned, once for each wording, and the tables are left to
// the warning copyable gives of tables the target lacks; pub is the
// publisher session, ctx without the publication read's timeout (pg_dump
// waits for the tables' locks).
func (l *loop) makeJoined(ctx context.Context, pub *pgx.Conn, published []source.PublishedTable) error {
	if l.s.cfg.Schema != schemacopy.Copy || l.s.cfg.DDL == DDLApply {
		return nil
	}
	synced := l.app.Synced()
	var pending []source.PublishedTable
	for _, pt := range published {
		if _, ok := synced[parapply.QuoteIdent(pt.Schema)+"."+parapply.QuoteIdent(pt.Name)]; !ok {
			pending = append(pending, pt)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	present, err := onTarget(ctx, l.app.Conn(), pending)
	if err != nil {
		return err
	}
	missing := absent(pending, present)
	if len(missing) == 0 {
		return nil
	}
	var version int
	if err := pub.QueryRow(ctx, `SELECT pg_catalog.current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return err
	}
	l.s.log.Info("schema = copy: making tables that joined the publication", "tables", qualifiedNames(missing))
	err = l.s.makeTables(ctx, l.app.Conn(), version/10000, missing)
	if err != nil && ctx.Err() == nil {
		l.warnOnce("schema copy", fmt.Sprintf("schema = copy cannot make tables that joined the publication (%s): %v; their changes are skipped until the target has them, and parapply tries again at each read of the publication", qualifiedNames(missing), err))
		return nil
	}
	return err
}

// runDeferredJoined runs what the schema copy of joined tables left for
// after their copy (parapply.deferred_ddl): a foreign key to a table the
// stream has not yet brought up to the copy's snapshot may find its rows
// missing, so a failure is warned, once for each wording, and run again
// at each read of the publication (retryDeferred) until it passes.
func (l *loop) runDeferredJoined(ctx context.Context) error {
	n, err := schemacopy.RunDeferred(ctx, l.app.Conn(), l.s.cfg.Source.Slot)
	l.deferredLeft = err != nil
	switch {
	case err != nil && ctx.Err() != nil:
		return err
	case err != nil:
		l.warnOnce("deferred ddl", fmt.Sprintf("%v; parapply runs it again at each read of the publication (the stream may not have brought the table it refers to up to the copy yet)", err))
	case n > 0:
		l.s.log.Info("schema = copy: ran what waited for the copy of tables that joined the publication (foreign keys, triggers, rules, policies)", "statements", n)
		delete(l.joinWarned, "deferred ddl")
	}
	return nil
}

// warnOnce warns msg unless it is what was last said under key.
func (l *loop) warnOnce(key, msg string) {
	if l.joinWarned == nil {
		l.joinWarned = map[string]string{}
	}
	if l.joinWarned[key] != msg {
		l.joinWarned[key] = msg
		l.s.log.Warn(msg)
	}
}
