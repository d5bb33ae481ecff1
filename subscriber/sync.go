package subscriber

import (
	"context"
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

// sync copies the published tables this target has not synced yet, then
// tells the applier each table's sync position.
func (s *Subscriber) sync(ctx context.Context, src *source.Source, app *apply.Applier, published []source.PublishedTable) error {
	slot := s.cfg.Source.Slot
	state, err := tablesync.LoadState(ctx, app.Conn(), slot)
	if err != nil {
		return err
	}
	pending := tablesync.Pending(syncTables(published), state)
	if len(pending) > 0 {
		if !s.cfg.CopyData {
			s.log.Info("taking tables as already in sync (copy_data = off)", "tables", len(pending))
			if err := tablesync.MarkSynced(ctx, app.Conn(), slot, pending, 0); err != nil {
				return err
			}
		} else {
			snapshot, lsn := src.Snapshot, src.ConsistentPoint
			if snapshot == "" {
				// The slot existed: copy under a temporary slot's snapshot.
				tmp, err := source.NewSnapshotSlot(ctx, s.cfg.Source)
				if err != nil {
					return err
				}
				defer tmp.Close()
				snapshot, lsn = tmp.Snapshot, tmp.ConsistentPoint
			}
			stopWatch := s.watchSlotWAL(ctx)
			defer stopWatch()
			s.runs.state.Store(StateCopying)
			s.log.Info("copying existing rows", "tables", len(pending), "snapshot_lsn", lsn.String(), "workers", s.cfg.CopyWorkers)
			err := tablesync.Copy(ctx, tablesync.Config{
				SourceDSN: s.cfg.Source.DSN, TargetDSN: s.cfg.Target.DSN,
				Snapshot: snapshot, SyncLSN: lsn, Slot: slot, Origins: true,
				Workers: s.cfg.CopyWorkers, Existing: s.cfg.ExistingData, DeferIndexes: s.cfg.CopyDeferIndexes,
				Log: s.log, Progress: s.copyProgress,
			}, pending)
			if err != nil {
				return err
			}
		}
		if state, err = tablesync.LoadState(ctx, app.Conn(), slot); err != nil {
			return err
		}
	}
	synced := map[string]parapply.LSN{}
	for name, st := range state {
		if st.State == "done" {
			synced[name] = st.SyncLSN
		}
	}
	app.SetSynced(synced)
	app.Warn = func(msg string) { s.log.Warn(msg) }
	return nil
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
