package apply

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/parapply/parapply"
)

// Tables that join the publication while parapply runs. A relation message
// for a table not among the synced ones is noted (Joined), for the loop to
// copy it online; until then its changes are skipped (they are in the
// copy). A table the target does not have is skipped with a warning that
// names the fix, or, with HoldMissing, its changes are held until the
// source transaction ends: a DDL later in the same transaction may create
// it (CREATE TABLE AS decodes its rows before the DDL that made the table),
// and the held changes are then applied to it, in order.

// maxHeldBytes bounds the changes held for tables the target lacks in one
// source transaction.
const maxHeldBytes = 256 << 20

// heldChange is one change of a table the target lacks.
type heldChange struct {
	rel  uint32
	kind int
	tups []parapply.Tuple
}

// heldChanges are the open source transaction's held changes.
type heldChanges struct {
	list  []heldChange
	bytes int
}

// noteJoined records a table met that is not synced.
func (a *Applier) noteJoined(name string) {
	if a.joined == nil {
		a.joined = map[string]bool{}
	}
	a.joined[name] = true
}

// Joined returns, and forgets, the tables met since the last call that are
// not among the synced ones: tables that joined a publication since the
// start (or partitions reached through their root), for the loop to copy
// online.
func (a *Applier) Joined() []string {
	if len(a.joined) == 0 {
		return nil
	}
	out := slices.Sorted(maps.Keys(a.joined))
	clear(a.joined)
	return out
}

// HasJoined reports whether Joined has tables to return (a check cheap
// enough for every message).
func (a *Applier) HasJoined() bool { return len(a.joined) > 0 }

// hold keeps a change of t, a table the target lacks, with HoldMissing; it
// reports whether it did (false: the change is skipped).
func (a *Applier) hold(t *Table, kind int, tups []parapply.Tuple) (bool, error) {
	if !a.cfg.HoldMissing {
		a.warnMissing(t)
		return false, nil
	}
	c := heldChange{rel: t.Rel.ID, kind: kind, tups: make([]parapply.Tuple, len(tups))}
	for i, tup := range tups {
		c.tups[i] = make(parapply.Tuple, len(tup))
		for j, v := range tup {
			c.tups[i][j] = parapply.Value{Kind: v.Kind, Data: slices.Clone(v.Data)}
			a.held.bytes += len(v.Data) + 8
		}
	}
	if a.held.bytes > maxHeldBytes {
		return false, fmt.Errorf("source transaction %d (commit %s) holds more than %d MB of changes of %s, a table the target does not have, before any DDL of it: create the table on the target (as the publisher has it) and start parapply again", a.txn.XID, a.txn.CommitLSN, maxHeldBytes>>20, t.Name)
	}
	a.held.list = append(a.held.list, c)
	return true, nil
}

// warnMissing warns, once a table, that t's changes are skipped.
func (a *Applier) warnMissing(t *Table) {
	if a.warned == nil {
		a.warned = map[string]bool{}
	}
	if a.warned[t.Name] {
		return
	}
	a.warned[t.Name] = true
	a.Warn(fmt.Sprintf("table %s is published but does not exist on the target: its changes are skipped until it does; create it there as the publisher has it (for example: pg_dump --schema-only --table=%s on the publisher, run on the target), and parapply copies it without a restart", t.Name, parapply.QuoteLiteral(t.Name)))
}

// replayHeld applies the held changes of tables the target now has (a DDL
// created them), in order, and keeps the rest.
func (a *Applier) replayHeld(ctx context.Context) error {
	if len(a.held.list) == 0 {
		return nil
	}
	list := a.held.list
	a.held = heldChanges{}
	for _, c := range list {
		t := a.tables[c.rel]
		if t.missing && t.reload {
			if err := a.Relation(ctx, t.Rel); err != nil {
				return err
			}
			t = a.tables[c.rel]
		}
		if t.missing {
			if _, err := a.hold(t, c.kind, c.tups); err != nil {
				return err
			}
			continue
		}
		var err error
		switch {
		case c.kind == tallyInsert:
			err = a.Insert(ctx, c.rel, c.tups[0])
		case c.kind == tallyDelete:
			err = a.Delete(ctx, c.rel, oldKindOf(t), c.tups[0])
		case len(c.tups) == 1:
			err = a.Update(ctx, c.rel, 0, nil, c.tups[0])
		default:
			err = a.Update(ctx, c.rel, oldKindOf(t), c.tups[1], c.tups[0])
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// oldKindOf is the kind of old image pgoutput sends for t's rows: the whole
// row (REPLICA IDENTITY FULL) or the key.
func oldKindOf(t *Table) byte {
	if t.Full {
		return 'O'
	}
	return 'K'
}

// dropHeld skips what is still held as the source transaction ends: no
// DDL of it created the table.
func (a *Applier) dropHeld() {
	for _, c := range a.held.list {
		a.Skipped.Add(1)
		a.warnMissing(a.tables[c.rel])
	}
	a.held = heldChanges{}
}
