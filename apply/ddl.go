package apply

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/parapply/parapply"
)

// DDL is a schema change from the publisher, as the target runs it.
type DDL struct {
	// SetSearchPath gives the statements the publisher's search_path.
	SetSearchPath string
	// Statements run in order, in the open target transaction.
	Statements []string
	// OnlyIfPresent, when set, are indexes the statements drop: they run
	// only if the target has one of them (the publisher cannot say which
	// table a dropped index was on).
	OnlyIfPresent []string
	// Created names the tables (as pg_event_trigger_ddl_commands does)
	// whose creation the target takes as their sync; nil with AllCreated.
	Created []string
	// AllCreated takes every table the statements create as synced
	// (parapply.replicate_ddl, which names none).
	AllCreated bool
}

// ResetSearchPath gives the session back parapply's own search_path after
// a DDL ran with the publisher's.
const ResetSearchPath = "SET LOCAL search_path TO pg_catalog"

// createdSQL lists the tables the open target transaction created, by
// parapply's name (always quoted) and PostgreSQL's object identity.
const createdSQL = `SELECT '"' || replace(n.nspname, '"', '""') || '"."' || replace(c.relname, '"', '""') || '"',
	pg_catalog.quote_ident(n.nspname) || '.' || pg_catalog.quote_ident(c.relname)
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND pg_catalog.age(c.xmin) = 0`

// markSyncedSQL records a table created by a replicated DDL as synced from
// the start of the stream: every row it holds arrives as a change.
const markSyncedSQL = `INSERT INTO parapply.sync_state (slot_name, table_name, state, sync_lsn, finished_at) VALUES ($1, $2, 'done', '0/0', now())
	ON CONFLICT (slot_name, table_name) DO UPDATE SET state = 'done', sync_lsn = '0/0', finished_at = now()`

// DDL runs d at its place in the open source transaction: the changes
// before it are sent first, the statements run with the publisher's
// search_path, and the tables it created are recorded as synced in the
// same target transaction. Every table loaded so far is loaded again at
// its next relation message (a change of an index, a default or a
// constraint leaves the publisher's description as it was); changes held
// for tables the target lacked (see HoldMissing) are applied to those it
// now has. It returns the tables taken as synced, for the appliers of
// workers.
func (a *Applier) DDL(ctx context.Context, d DDL) (map[string]parapply.LSN, error) {
	synced, err := a.ddl(ctx, d)
	if err != nil {
		return nil, err
	}
	return synced, a.replayHeld(ctx)
}

func (a *Applier) ddl(ctx context.Context, d DDL) (map[string]parapply.LSN, error) {
	if err := a.flushRuns(ctx); err != nil {
		return nil, err
	}
	a.queue(d.SetSearchPath, "setting the DDL's search_path", -1)
	if err := a.sendQueued(ctx); err != nil {
		return nil, err
	}
	if len(d.OnlyIfPresent) > 0 {
		var present bool
		if err := a.conn.QueryRow(ctx, `SELECT bool_or(pg_catalog.to_regclass(i) IS NOT NULL) FROM unnest($1::text[]) i`, d.OnlyIfPresent).Scan(&present); err != nil {
			return nil, failed(a, fmt.Errorf("looking for the dropped indexes %s on the target: %w", strings.Join(d.OnlyIfPresent, ", "), err))
		}
		if !present {
			a.queue(ResetSearchPath, "resetting search_path after a DDL", -1)
			return nil, nil
		}
	}
	for _, s := range d.Statements {
		a.queue(s, fmt.Sprintf("DDL statement %.200q", s), -1)
	}
	a.queue(ResetSearchPath, "resetting search_path after a DDL", -1)
	if err := a.sendQueued(ctx); err != nil {
		return nil, fmt.Errorf("%w; fix the target so that the DDL runs there, or run it (or what stands for it) by hand and have parapply pass over it with: %s", err, a.cfg.Skip(a.txn.CommitLSN, true))
	}
	a.Reload()
	if !d.AllCreated && len(d.Created) == 0 {
		return nil, nil
	}
	rows, err := a.conn.Query(ctx, createdSQL)
	if err != nil {
		return nil, failed(a, fmt.Errorf("listing the tables a DDL created on the target: %w", err))
	}
	want := map[string]bool{}
	for _, c := range d.Created {
		want[c] = true
	}
	var names []string
	for rows.Next() {
		var name, identity string
		if err := rows.Scan(&name, &identity); err != nil {
			rows.Close()
			return nil, err
		}
		if d.AllCreated || want[identity] {
			names = append(names, name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, failed(a, fmt.Errorf("listing the tables a DDL created on the target: %w", err))
	}
	if len(names) == 0 || a.synced == nil {
		return nil, nil
	}
	synced := maps.Clone(a.synced)
	for _, n := range names {
		synced[n] = 0
		a.queue(markSyncedSQL, "recording a table the DDL created as synced", -1, a.cfg.Slot, n)
	}
	a.SetSynced(synced)
	return synced, nil
}

// failed names the source transaction in an error met outside a round trip.
func failed(a *Applier, err error) error { return a.describe().wrap(err) }
