package subscriber

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/pgerr"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/tablesync"
)

// The slot's lifecycle. A slot holds WAL on the publisher from the moment
// it is created until it is dropped, whether anyone reads it or not: a
// start must not leave one behind that nothing will use. So a missing slot
// is created only once every check that can refuse the start cheaply has
// passed (tablesync.Sync creates it, after progress.Open and its own
// checks), and a start that created it and is refused later, for a reason
// another try would only repeat (a value the target rejects during the
// copy, say), drops it again together with everything its start recorded
// on the target (abandonSlot), so that the next start is a first start
// again; a start refused before it created the slot still removes the
// progress row it recorded. A fault (a lost connection) keeps the slot
// while Run rides it out: the next run continues from it and from what the
// target recorded, which agree; only when Run gives up, the slot never
// streamed from, is it abandoned.

// abandonTimeout bounds the undo of a refused start: the target's records
// and the slot's drop (which waits for the walsender of the failed run to
// let go of it).
const abandonTimeout = 30 * time.Second

// abandonSlot undoes the starts of a slot this process recorded on the
// target (and created, if it did), never streamed from, and gave up on:
// first what they recorded and copied on the target (see forgetSlot), then
// the slot, if they created it. If the target cannot be undone, the slot
// is kept: it and the target's records agree, and the
// next start resumes from them. If the slot cannot be dropped, the target
// is clean and the next start uses the slot as one found; the warning
// gives the statement that drops it.
func (s *Subscriber) abandonSlot() {
	slot := s.cfg.Source.Slot
	drop := "SELECT pg_drop_replication_slot(" + parapply.QuoteLiteral(slot) + ")"
	ctx, cancel := context.WithTimeout(context.Background(), abandonTimeout)
	defer cancel()
	left, err := s.forgetSlot(ctx)
	if err != nil && !s.runs.createdSlot {
		s.log.Warn("the start failed before it created the slot, and the progress row it recorded on the target could not be removed: parapply status lists the slot until it is; delete its row from parapply.progress on the target",
			"slot", slot, "error", err)
		return
	}
	if err != nil {
		s.log.Warn("the start failed, and what it recorded on the target could not be removed, so the slot it created is kept: the next start resumes from it; to start over instead, drop the slot on the publisher and delete its rows from parapply.progress and parapply.sync_state on the target",
			"slot", slot, "error", err, "drop_with", drop)
		return
	}
	if len(left) > 0 {
		s.log.Warn("the failed start's copy wrote into target tables that held rows before (existing_data = keep): its rows cannot be told from theirs, and stay; remove them before the next start, which copies these tables again",
			"slot", slot, "tables", strings.Join(left, ", "))
	}
	s.runs.createdRecord = false
	if !s.runs.createdSlot {
		s.log.Info("the start failed before it created the slot; removed what it had recorded on the target", "slot", slot)
		return
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
// and, if this process created the slot, its sync state and the rows its
// copy wrote (tablesync.Forget): with existing_data = error the tables were
// empty before, with truncate they would be emptied again by the next
// start anyway; with keep, tables that held rows keep the copied rows too
// (returned), as they cannot be told apart. A start that did not create
// the slot copied nothing: the sync state there is an earlier slot's, the
// very thing that refused it, and stays.
func (s *Subscriber) forgetSlot(ctx context.Context) ([]string, error) {
	cc, err := pgx.ParseConfig(s.cfg.Target.DSN)
	if err != nil {
		return nil, err
	}
	cc.RuntimeParams["application_name"] = s.targetName()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the target: %w", pgerr.Short(err))
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
	var left []string
	if s.runs.createdSlot {
		if left, err = tablesync.Forget(ctx, tx, s.cfg.Source.Slot, s.cfg.CopyData, s.runs.keptRows); err != nil {
			return nil, err
		}
	}
	if err := progress.Forget(ctx, tx, s.cfg.Source.Slot); err != nil {
		return nil, err
	}
	return left, tx.Commit(ctx)
}
