package subscriber

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/tablesync"
	"github.com/parapply/parapply/targetdb"
)

// Tables that join the publication while parapply runs (ALTER PUBLICATION
// ... ADD TABLE, a table created in a FOR TABLES IN SCHEMA schema, a
// partition attached to a published table) are copied online, as the
// built-in's REFRESH PUBLICATION copies new tables, without a restart:
//
//   - the loop reads the publication's tables again when a relation
//     message names a table that is not synced (apply.Applier.Joined),
//     and every publicationRefreshEvery for tables that joined with rows
//     but see no change;
//   - between two source transactions, with everything taken before
//     committed, the tables the target has are copied under a temporary
//     slot's snapshot (tablesync.Sync, as at a start) and recorded as
//     synced at its consistent point, in the target transaction of the
//     copy;
//   - the stream is behind that point: its transactions that committed
//     before it are in the copy and skipped for those tables (as for the
//     initial copy); those after it are applied.
//
// A published table the target lacks is skipped, with a warning naming the
// fix, until the target has it; with schema = copy it is made first from
// the publisher's definition (makeJoined), its indexes built by its copy
// and its foreign keys, triggers and the like after it; with ddl = apply
// a table the publisher creates is created on the target by its DDL and
// synced from the start of the stream.
//
// A table that leaves the publication is forgotten as copied (left.go),
// so that it is copied again, as here, if it joins again.

// publicationRefreshEvery is how often the run reads the publication's
// tables when no relation message asks it to.
const publicationRefreshEvery = 30 * time.Second

// publicationRefreshTimeout bounds one read of the publication's tables.
const publicationRefreshTimeout = 30 * time.Second

// refresh copies the tables that joined the publication, if the applier
// met one or the interval has passed; it runs only between source
// transactions.
func (l *loop) refresh(ctx context.Context, now time.Time) error {
	if !l.core.Between() || len(l.streams) > 0 {
		return nil
	}
	forgot, err := l.forgetLeft(ctx)
	if err != nil {
		return err
	}
	met := l.app.Joined()
	if len(met) == 0 && !forgot && now.Before(l.refreshAt) {
		return nil
	}
	every := l.s.cfg.PublicationRefresh
	if every <= 0 {
		every = publicationRefreshEvery
	}
	l.refreshAt = now.Add(every)
	if l.deferredLeft {
		if err := l.commitTaken(ctx); err != nil {
			return err
		}
		if err := l.runDeferredJoined(ctx); err != nil {
			return err
		}
	}
	// Everything taken is committed only when there is a table to copy:
	// a wait for the workers here (a unit held by a lock on the target)
	// would stop the loop from handing over the units that may commit
	// meanwhile.
	pending, err := l.joinedTables(ctx)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, ErrPermanent) {
			return err
		}
		l.s.log.Warn("cannot read the publication's tables to find ones that joined it; trying again later", "error", err)
		return nil
	}
	if len(pending) == 0 {
		return nil
	}
	if err := l.commitTaken(ctx); err != nil {
		return err
	}
	return l.copyJoined(ctx, pending)
}

// joinedTables lists the published tables that are not synced and that
// the target has (with every published column); it warns, once a table,
// about those it lacks or cannot take.
func (l *loop) joinedTables(ctx context.Context) ([]source.PublishedTable, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, publicationRefreshTimeout)
	defer cancel()
	cc, err := pgx.ParseConfig(l.s.cfg.Source.DSN)
	if err != nil {
		return nil, err
	}
	cc.RuntimeParams["application_name"] = l.s.targetName() + " publication"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.Background())
	var gone []string
	if err := conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.array_agg(p ORDER BY p), '{}') FROM pg_catalog.unnest($1::text[]) p
		WHERE p NOT IN (SELECT pubname FROM pg_catalog.pg_publication)`, l.s.cfg.Source.Publications).Scan(&gone); err != nil {
		return nil, err
	}
	if len(gone) > 0 {
		// PostgreSQL 18 decodes on without it, sending nothing of its
		// tables (earlier versions fail the stream).
		return nil, Permanent(fmt.Errorf("publication %s was dropped on the publisher while parapply ran: nothing of its tables is sent any more; create it again as it was (CREATE PUBLICATION %s FOR ...) and start parapply again; changes made while it was missing are not replicated: find them with parapply verify",
			strings.Join(gone, ", "), parapply.QuoteIdent(gone[0])))
	}
	published, err := source.ListPublished(ctx, conn.PgConn(), l.s.cfg.Source.Publications)
	if err != nil {
		return nil, err
	}
	if err := l.noteLeft(ctx, conn, published); err != nil {
		return nil, err
	}
	l.s.log.Debug("read the publication's tables", "tables", len(published))
	if _, err := l.forgetLeft(ctx); err != nil { // those that came back
		return nil, err
	}
	if err := l.makeJoined(parent, conn, published); err != nil {
		return nil, err
	}
	return l.copyable(ctx, conn, published)
}

// copyable lists the published tables that are not synced and that the
// target has (with every published column), may write and, under
// existing_data = error, holds no rows of; it warns, once a table, about
// the others. conn is the publisher session.
func (l *loop) copyable(ctx context.Context, conn *pgx.Conn, published []source.PublishedTable) ([]source.PublishedTable, error) {
	synced := l.app.Synced()
	var out []source.PublishedTable
	for _, pt := range published {
		name := parapply.QuoteIdent(pt.Schema) + "." + parapply.QuoteIdent(pt.Name)
		if _, ok := synced[name]; ok {
			continue
		}
		rel := &parapply.Relation{Namespace: pt.Schema, Name: pt.Name}
		for _, c := range pt.Columns {
			rel.Columns = append(rel.Columns, parapply.Column{Name: c})
		}
		if _, err := targetdb.ReadTable(ctx, l.app.Conn(), rel); err != nil {
			if !errors.Is(err, targetdb.ErrSchema) && !errors.Is(err, targetdb.ErrNoTable) {
				return nil, err
			}
			l.warnJoined(name, pt, err)
			continue
		}
		var may bool
		var role string
		if err := l.app.Conn().QueryRow(ctx, `SELECT pg_catalog.has_table_privilege($1::regclass, 'SELECT, INSERT, UPDATE, DELETE'), current_user::text`, name).Scan(&may, &role); err != nil {
			return nil, err
		}
		if !may {
			l.warnJoined(name, pt, errNoGrant{role})
			continue
		}
		if held, err := l.holdsRows(ctx, name); err != nil || held {
			if err == nil {
				l.warnJoined(name, pt, errHeldRows{})
				continue
			}
			return nil, err
		}
		if l.s.cfg.CopyData {
			var may bool
			var role string
			if err := conn.QueryRow(ctx, `SELECT pg_catalog.has_table_privilege($1::regclass, 'SELECT'), current_user::text`, name).Scan(&may, &role); err != nil {
				return nil, err
			}
			if !may {
				l.warnJoined(name, pt, errNoSelect{role})
				continue
			}
		}
		out = append(out, pt)
	}
	return out, nil
}

// warnJoined warns, once a table, that a table that joined the
// publication cannot be copied yet. With ddl = apply a table the target
// lacks may be made by DDL still in the stream: the applier warns if its
// changes arrive with none.
func (l *loop) warnJoined(key string, pt source.PublishedTable, err error) {
	name, schema := parapply.TableName(pt.Schema, pt.Name), parapply.Ident(pt.Schema)
	var ns errNoSelect
	var ng errNoGrant
	var msg string
	switch {
	case errors.As(err, &ng):
		msg = fmt.Sprintf("table %s joined the publication, but the target role %s may not write it: its changes are skipped until it may; on the target: GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON %s TO %s; (and, for tables made later: ALTER DEFAULT PRIVILEGES IN SCHEMA %s GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON TABLES TO %s;), and parapply copies it without a restart",
			name, ng.role, name, parapply.Ident(ng.role), schema, parapply.Ident(ng.role))
	case errors.As(err, &ns):
		msg = fmt.Sprintf("table %s joined the publication, but the source role %s may not read it for its copy: its changes are skipped until it may; on the publisher: GRANT SELECT ON %s TO %s; (and, for tables made later: ALTER DEFAULT PRIVILEGES IN SCHEMA %s GRANT SELECT ON TABLES TO %s;), and parapply copies it without a restart",
			name, ns.role, name, parapply.Ident(ns.role), schema, parapply.Ident(ns.role))
	case errors.As(err, new(errHeldRows)):
		msg = fmt.Sprintf("table %s joined the publication, but the target's table already holds rows (existing_data = error): its changes are skipped until it is copied; empty it on the target (TRUNCATE %s;), and parapply copies it without a restart; or set existing_data = truncate (the copy replaces the rows) or keep (it copies on top of them) and start parapply again",
			name, name)
	case errors.Is(err, targetdb.ErrNoTable) && l.s.cfg.DDL == DDLApply:
		msg = "" // the applier warns if its changes come with no DDL that makes it
	case errors.Is(err, targetdb.ErrNoTable):
		msg = fmt.Sprintf("table %s joined the publication but does not exist on the target: its changes are skipped until it does; create it there as the publisher has it (for example: pg_dump --schema-only --table=%s on the publisher, run on the target), and parapply copies it without a restart", name, parapply.QuoteLiteral(name))
	default:
		msg = fmt.Sprintf("table %s joined the publication, but the target's table cannot take it: %v; its changes are skipped until it can, and parapply then copies it without a restart", name, err)
	}
	if l.joinWarned == nil {
		l.joinWarned = map[string]string{}
	}
	if l.joinWarned[key] == msg || msg == "" {
		return
	}
	l.joinWarned[key] = msg
	l.s.log.Warn(msg)
}

// holdsRows reports whether the target's table name holds rows that the
// copy of a table that joined would refuse: with copy_data on and
// existing_data = error, rows other than those an interrupted copy left
// (the copy empties those).
func (l *loop) holdsRows(ctx context.Context, name string) (bool, error) {
	if !l.s.cfg.CopyData || (l.s.cfg.ExistingData != "" && l.s.cfg.ExistingData != tablesync.ExistingError) {
		return false, nil
	}
	var held bool
	err := l.app.Conn().QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+name+`)
		AND NOT EXISTS (SELECT 1 FROM parapply.sync_state WHERE slot_name = $1 AND table_name = $2 AND state = 'copying')`, l.s.cfg.Source.Slot, name).Scan(&held)
	return held, err
}

// errHeldRows is a joined table whose target table holds rows that
// existing_data = error refuses to copy over.
type errHeldRows struct{}

func (errHeldRows) Error() string { return "the target's table holds rows" }

// errNoSelect is a joined table the source role may not read.
type errNoSelect struct{ role string }

func (e errNoSelect) Error() string { return "role " + e.role + " may not read the table" }

// errNoGrant is a joined table the target role may not write.
type errNoGrant struct{ role string }

func (e errNoGrant) Error() string { return "role " + e.role + " may not write the table" }

// copyJoined copies the tables that joined the publication, with
// everything before committed, and has every applier take them as synced.
func (l *loop) copyJoined(ctx context.Context, pending []source.PublishedTable) error {
	names := make([]string, len(pending))
	for i, pt := range pending {
		names[i] = pt.Schema + "." + pt.Name
	}
	l.s.log.Info("copying tables that joined the publication while parapply runs", "tables", names)
	started := time.Now()
	res, err := tablesync.Sync(ctx, l.app.Conn(), l.s.syncRequest(nil, pending))
	l.s.runs.state.Store(StateStreaming)
	if err != nil {
		return fmt.Errorf("copying tables that joined the publication (%v): %w", names, err)
	}
	l.app.SetSynced(res.Tables)
	l.afterDDL(res.Tables)
	if err := l.runDeferredJoined(ctx); err != nil {
		return err
	}
	for name := range l.joinWarned {
		if _, ok := res.Tables[name]; ok {
			delete(l.joinWarned, name)
		}
	}
	l.s.log.Info("copied tables that joined the publication; their changes are applied from their copy's snapshot on", "tables", names, "took", time.Since(started).Round(time.Millisecond))
	return nil
}
