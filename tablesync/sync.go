package tablesync

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/targetdb"
)

// Publisher is the publisher side of a run's sync: the run's slot, which
// Sync creates only once every check that can refuse the start has passed
// (a slot holds WAL from its creation on), and the snapshots the copy
// reads under.
type Publisher interface {
	// CreateSlot creates the run's slot, which the publisher lacks, and
	// returns the snapshot it exported ("" if none) and its consistent
	// point.
	CreateSlot(ctx context.Context) (snapshot string, lsn parapply.LSN, err error)
	// Snapshot exports a snapshot for a copy when the slot existed (a
	// temporary slot's), with its consistent point and what ends it.
	Snapshot(ctx context.Context) (snapshot string, lsn parapply.LSN, end func(), err error)
}

// Request is what a run's sync is told: the copy's Config (Sync fills in
// Snapshot and SyncLSN), the tables published, and the slot.
type Request struct {
	Config
	Tables []Table
	// CopyData copies the tables not synced yet; without it they are
	// taken as in sync already.
	CopyData bool
	// SlotMissing: the publisher has no slot of the name; Sync creates it
	// through Publisher after its checks.
	SlotMissing bool
	Publisher   Publisher
	// Copying, if set, is called as a copy begins, with the number of
	// tables and the snapshot's LSN; what it returns, as the copy ends.
	Copying func(tables int, lsn parapply.LSN) (done func())
}

// Synced is what a run's sync leaves.
type Synced struct {
	// Tables are the sync positions of the tables done, by qualified
	// name: changes to a table at or below its position are in the copy.
	Tables map[string]parapply.LSN
	// Held are the tables that held rows before a first start's copy
	// (existing_data = keep): undoing a refused start cannot tell their
	// rows from the copied ones. Set even when Sync fails after creating
	// the slot.
	Held []string
}

// Sync is a run's one step of table synchronisation on the reader's
// target session conn: a first start's checks (nothing recorded of an
// earlier slot of the name; no table the existing-data policy refuses),
// the slot's creation, then the copy of the tables the target does not
// record as synced, or with CopyData off their marking as synced.
func Sync(ctx context.Context, conn *pgx.Conn, req Request) (Synced, error) {
	var out Synced
	var snapshot string
	var lsn parapply.LSN
	state, err := LoadState(ctx, conn, req.Slot)
	if err != nil {
		return out, err
	}
	if req.SlotMissing {
		if out.Held, err = checkFirstStart(ctx, conn, req, state); err != nil {
			return out, err
		}
		if snapshot, lsn, err = req.Publisher.CreateSlot(ctx); err != nil {
			return out, err
		}
	}
	if pending := Pending(req.Tables, state); len(pending) > 0 {
		if err := copyPending(ctx, conn, req, pending, snapshot, lsn); err != nil {
			return out, err
		}
		if state, err = LoadState(ctx, conn, req.Slot); err != nil {
			return out, err
		}
	}
	out.Tables = map[string]parapply.LSN{}
	for name, st := range state {
		if st.State == "done" {
			out.Tables[name] = st.SyncLSN
		}
	}
	return out, nil
}

// checkFirstStart refuses, before the slot is created, a first start the
// target's records (state, the slot's sync state) or rows would refuse
// later, and returns the tables holding rows (see heldRows).
func checkFirstStart(ctx context.Context, conn *pgx.Conn, req Request, state map[string]State) ([]string, error) {
	if len(state) > 0 {
		return nil, fmt.Errorf("slot %s does not exist on the publisher, but the target records tables copied for an earlier slot of that name (parapply.sync_state): %s", req.Slot, targetdb.LostSlotFix)
	}
	if !req.CopyData {
		return nil, nil
	}
	return heldRows(ctx, conn, req.Existing, req.Tables, state)
}

// copyPending copies the tables pending under snapshot (a temporary one
// when the slot existed), or marks them synced with CopyData off.
func copyPending(ctx context.Context, conn *pgx.Conn, req Request, pending []Table, snapshot string, lsn parapply.LSN) error {
	if !req.CopyData {
		if req.Log != nil {
			req.Log.Info("taking tables as already in sync (copy_data = off)", "tables", len(pending))
		}
		return MarkSynced(ctx, conn, req.Slot, pending, 0)
	}
	if snapshot == "" {
		var end func()
		var err error
		if snapshot, lsn, end, err = req.Publisher.Snapshot(ctx); err != nil {
			return err
		}
		defer end()
	}
	if req.Copying != nil {
		defer req.Copying(len(pending), lsn)()
	}
	cfg := req.Config
	cfg.Snapshot, cfg.SyncLSN = snapshot, lsn
	return Copy(ctx, cfg, pending)
}
