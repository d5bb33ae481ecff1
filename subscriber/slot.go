package subscriber

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/parapply/parapply"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/tablesync"
)

// The slot's lifecycle. A slot holds WAL on the publisher from the moment
// it is created until it is dropped, whether anyone reads it or not: a
// start must not leave one behind that nothing will use. So a missing slot
// is created only once every check that can refuse the start cheaply has
// passed (createSlot), and a start that created it and is refused later,
// for a reason another try would only repeat (a value the target rejects
// during the copy, say), drops it again together with everything its start
// recorded on the target (abandonSlot), so that the next start is a first
// start again. A fault (a lost connection) keeps the slot while Run rides
// it out: the next run continues from it and from what the target recorded,
// which agree; only when Run gives up, the slot never streamed from, is it
// abandoned.

// abandonTimeout bounds the undo of a refused start: the target's records
// and the slot's drop (which waits for the walsender of the failed run to
// let go of it).
const abandonTimeout = 30 * time.Second

// createSlot creates the slot if the publisher has none of its name, after
// the checks that would otherwise refuse the start after its creation: the
// target recording an earlier slot of the name, and tables the copy would
// refuse (rows under existing_data = error, a foreign key from outside the
// copy under truncate).
func (s *Subscriber) createSlot(ctx context.Context, src *source.Source, conn *pgx.Conn, published []source.PublishedTable) error {
	if !src.Missing {
		return nil
	}
	slot := s.cfg.Source.Slot
	pos, found, err := progress.Read(ctx, conn, slot)
	if err != nil {
		return err
	}
	synced, err := tablesync.HasState(ctx, conn, slot)
	if err != nil {
		return fmt.Errorf("reading parapply.sync_state on the target: %w", err)
	}
	const fix = "changes made between that slot's loss and now never reached the target; to start over, delete the slot's rows from parapply.progress and parapply.sync_state on the target and run with existing_data = truncate"
	if found && pos.EndLSN != 0 {
		return fmt.Errorf("slot %s does not exist on the publisher, but the target records progress from an earlier slot of that name (last applied commit %s): %s", slot, pos.CommitLSN, fix)
	}
	if synced {
		return fmt.Errorf("slot %s does not exist on the publisher, but the target records tables copied for an earlier slot of that name (parapply.sync_state): %s", slot, fix)
	}
	if s.cfg.CopyData {
		held, err := tablesync.Check(ctx, conn, slot, s.cfg.ExistingData, syncTables(published))
		if err != nil {
			return err
		}
		if s.cfg.ExistingData == tablesync.ExistingKeep {
			s.runs.keptRows = held
		}
	}
	if err := src.CreateSlot(ctx); err != nil {
		return err
	}
	s.runs.createdSlot = true
	s.log.Info("created the slot", "slot", slot, "consistent_point", src.ConsistentPoint.String())
	return nil
}

// abandonSlot undoes the starts of a slot this process created, never
// streamed from, and gave up on: first what they recorded and copied on
// the target (see forgetSlot), then the slot. If the target cannot be
// undone, the slot is kept: it and the target's records agree, and the
// next start resumes from them. If the slot cannot be dropped, the target
// is clean and the next start uses the slot as one found; the warning
// gives the statement that drops it.
func (s *Subscriber) abandonSlot() {
	slot := s.cfg.Source.Slot
	drop := "SELECT pg_drop_replication_slot(" + parapply.QuoteLiteral(slot) + ")"
	ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
	defer cancel()
	left, err := s.forgetSlot(ctx)
	if err != nil {
		s.log.Warn("the start failed, and what it recorded on the target could not be removed, so the slot it created is kept: the next start resumes from it; to start over instead, drop the slot on the publisher and delete its rows from parapply.progress and parapply.sync_state on the target",
			"slot", slot, "error", err, "drop_with", drop)
		return
	}
	if len(left) > 0 {
		s.log.Warn("the failed start's copy wrote into target tables that held rows before (existing_data = keep): its rows cannot be told from theirs, and stay; remove them before the next start, which copies these tables again",
			"slot", slot, "tables", strings.Join(left, ", "))
	}
	if err := source.DropSlot(ctx, s.cfg.Source); err != nil {
		s.log.Warn("the start failed, and the slot it created could not be dropped: it holds WAL on the publisher until it is; drop it there",
			"slot", slot, "error", err, "drop_with", drop)
		return
	}
	s.runs.createdSlot = false
	s.log.Info("the start failed; dropped the slot it had created, and removed what it had recorded on the target", "slot", slot)
}

// forgetSlot removes, in one target transaction, the slot's progress row
// and sync state and the rows its copy wrote (tablesync.Forget): with
// existing_data = error the tables were empty before, with truncate they
// would be emptied again by the next start anyway; with keep, tables that
// held rows keep the copied rows too (returned), as they cannot be told
// apart.
func (s *Subscriber) forgetSlot(ctx context.Context) ([]string, error) {
	cc, err := pgx.ParseConfig(s.cfg.Target.DSN)
	if err != nil {
		return nil, err
	}
	cc.RuntimeParams["application_name"] = s.targetName()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the target: %w", err)
	}
	defer conn.Close(context.Background())
	// The failed run's sessions may still be ending; the bound keeps a
	// session outside parapply from holding the undo up.
	if _, err := conn.Exec(ctx, "SET lock_timeout = '10s'"); err != nil {
		return nil, err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback(context.Background())
	left, err := tablesync.Forget(ctx, tx, s.cfg.Source.Slot, s.cfg.CopyData, s.runs.keptRows)
	if err != nil {
		return nil, err
	}
	if err := progress.Forget(ctx, tx, s.cfg.Source.Slot); err != nil {
		return nil, err
	}
	return left, tx.Commit(ctx)
}
