package subscriber

import (
	"context"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/tablesync"
)

// copyProgress keeps the copy's progress for Status and passes it on.
func (s *Subscriber) copyProgress(p tablesync.Progress) {
	s.copied.Store(&p)
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
	var pending []tablesync.Table
	for _, t := range syncTables(published) {
		if state[t.QualifiedName()].State != "done" {
			pending = append(pending, t)
		}
	}
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
			s.state.Store(StateCopying)
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

// syncTables are the published tables, as the copy takes them.
func syncTables(published []source.PublishedTable) []tablesync.Table {
	out := make([]tablesync.Table, len(published))
	for i, pt := range published {
		out[i] = tablesync.Table{Schema: pt.Schema, Name: pt.Name, Columns: pt.Columns, RowFilter: pt.RowFilter}
	}
	return out
}
