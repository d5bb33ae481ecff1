package subscriber

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/tablesync"
)

// copyProgress keeps the copy's progress for Status and passes it on.
func (s *Subscriber) copyProgress(p tablesync.Progress) {
	s.stats.copied.Store(&p)
	if s.cfg.CopyProgress != nil {
		s.cfg.CopyProgress(p)
	}
}

// sync is the setup's step of table synchronisation (tablesync.Sync): a
// first start's checks, the slot's creation once they pass, and the copy
// of the tables not synced yet; then it tells the applier each table's
// sync position.
func (s *Subscriber) sync(ctx context.Context, src *source.Source, app *apply.Applier, published []source.PublishedTable) error {
	if s.cfg.DDL == DDLApply {
		var err error
		if published, err = onTarget(ctx, app.Conn(), published); err != nil {
			return err
		}
	}
	res, err := tablesync.Sync(ctx, app.Conn(), s.syncRequest(src, published))
	if src.Missing && s.cfg.ExistingData == tablesync.ExistingKeep {
		s.runs.keptRows = res.Held
	}
	if err != nil {
		return err
	}
	if err := s.runDeferredDDL(ctx, app.Conn()); err != nil {
		return err
	}
	app.SetSynced(res.Tables)
	app.Warn = func(msg string) { s.log.Warn(msg) }
	return nil
}

// onTarget keeps the published tables the target has: with ddl = apply,
// one it lacks is made by DDL still in the stream (which records it as
// synced from the start of the stream), not copied now.
func onTarget(ctx context.Context, conn *pgx.Conn, published []source.PublishedTable) ([]source.PublishedTable, error) {
	schemas, names := make([]string, len(published)), make([]string, len(published))
	for i, pt := range published {
		schemas[i], names[i] = pt.Schema, pt.Name
	}
	var present []bool
	if err := conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.array_agg(EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = t.s AND c.relname = t.n) ORDER BY t.i), '{}') FROM ROWS FROM (pg_catalog.unnest($1::text[]), pg_catalog.unnest($2::text[])) WITH ORDINALITY t(s, n, i)`,
		schemas, names).Scan(&present); err != nil {
		return nil, fmt.Errorf("reading which published tables the target has: %w", err)
	}
	var out []source.PublishedTable
	for i, pt := range published {
		if present[i] {
			out = append(out, pt)
		}
	}
	return out, nil
}

// syncRequest is what tablesync.Sync is asked for the published tables: at
// a start (src the run's source, whose slot may be missing) or for tables
// that joined the publication since (src nil: the slot exists).
func (s *Subscriber) syncRequest(src *source.Source, published []source.PublishedTable) tablesync.Request {
	return tablesync.Request{
		Config: tablesync.Config{
			SourceDSN: s.cfg.Source.DSN, TargetDSN: s.cfg.Target.DSN, Slot: s.cfg.Source.Slot, Origins: true,
			Workers: s.cfg.CopyWorkers, Existing: s.cfg.ExistingData, DeferIndexes: s.cfg.CopyDeferIndexes,
			Text: !s.cfg.Binary, Log: s.log, Progress: s.copyProgress,
		},
		Tables: syncTables(published), CopyData: s.cfg.CopyData, SlotMissing: src != nil && src.Missing,
		Publisher: publisher{s, src}, Copying: s.copying,
	}
}

// copying shows the copy in Status while it runs, with the WAL the slot
// retains meanwhile (watchSlotWAL).
func (s *Subscriber) copying(tables int, lsn parapply.LSN) (done func()) {
	s.runs.state.Store(StateCopying)
	s.log.Info("copying existing rows", "tables", tables, "snapshot_lsn", lsn.String(), "workers", s.cfg.CopyWorkers)
	return s.watchSlotWAL(context.Background())
}

// publisher is the run's publisher side as tablesync.Sync asks for it.
type publisher struct {
	s   *Subscriber
	src *source.Source
}

// CreateSlot creates the run's slot, noting it for the undo of a start
// refused later (see abandonSlot).
func (p publisher) CreateSlot(ctx context.Context) (string, parapply.LSN, error) {
	if err := p.src.CreateSlot(ctx); err != nil {
		return "", 0, onPublisher(err)
	}
	p.s.runs.createdSlot = true
	p.s.log.Info("created the slot", "slot", p.s.cfg.Source.Slot, "consistent_point", p.src.ConsistentPoint.String())
	return p.src.Snapshot, p.src.ConsistentPoint, nil
}

// Snapshot exports a temporary slot's snapshot for a copy of tables when
// the run's slot existed.
func (p publisher) Snapshot(ctx context.Context) (string, parapply.LSN, func(), error) {
	tmp, err := source.NewSnapshotSlot(ctx, p.s.cfg.Source)
	if err != nil {
		return "", 0, nil, onPublisher(err)
	}
	return tmp.Snapshot, tmp.ConsistentPoint, func() { tmp.Close() }, nil
}

// slotWALEvery is how often the copy reads the WAL its slot retains.
const slotWALEvery = time.Second

// watchSlotWAL reads how much WAL the slot retains on the publisher, now
// and then every slotWALEvery until the returned stop is called, for
// Status during the copy: the stream is not read then, and the slot holds
// every change made since its snapshot. A failure to read is logged once
// and leaves the figure as it was.
func (s *Subscriber) watchSlotWAL(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	warned := false
	var conn *pgx.Conn
	read := func() {
		err := func() error {
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			defer rcancel()
			if conn == nil {
				cc, err := pgx.ParseConfig(s.cfg.Source.DSN)
				if err != nil {
					return err
				}
				cc.RuntimeParams["application_name"] = s.targetName() + " status"
				if conn, err = pgx.ConnectConfig(rctx, cc); err != nil {
					return err
				}
			}
			var now string
			var retained int64
			err := conn.QueryRow(rctx, `SELECT pg_catalog.pg_current_wal_lsn()::text,
				coalesce(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), restart_lsn), 0)::bigint
				FROM pg_catalog.pg_replication_slots WHERE slot_name = $1`, s.cfg.Source.Slot).Scan(&now, &retained)
			if err != nil {
				conn.Close(context.Background())
				conn = nil
				return err
			}
			lsn, err := parapply.ParseLSN(now)
			if err != nil {
				return err
			}
			s.kept.walNow.Store(uint64(lsn))
			s.kept.retained.Store(retained)
			return nil
		}()
		if err != nil && !warned && ctx.Err() == nil {
			warned = true
			s.log.Warn("cannot read on the publisher how much WAL the slot retains; status shows no lag during the copy", "slot", s.cfg.Source.Slot, "error", err)
		}
	}
	read()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		every(ctx, slotWALEvery, read)
	}()
	return func() {
		cancel()
		wg.Wait()
	}
}

// syncTables are the published tables, as the copy takes them.
func syncTables(published []source.PublishedTable) []tablesync.Table {
	out := make([]tablesync.Table, len(published))
	for i, pt := range published {
		out[i] = tablesync.Table{Schema: pt.Schema, Name: pt.Name, Columns: pt.Columns, RowFilter: pt.RowFilter}
	}
	return out
}
