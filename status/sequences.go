package status

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/targetdb"
)

// RecordSequenceSync records a parapply sync-sequences run (its results,
// or the error it ended with) as the slot's last, where Read finds it: the
// running parapply's record of the slot keeps its own syncs, and a
// separate table is never overwritten by it.
func RecordSequenceSync(ctx context.Context, conn *pgx.Conn, slot string, rs []sequences.Result, syncErr error) error {
	msg := ""
	if syncErr != nil {
		msg = syncErr.Error()
	}
	q := SequenceSync(sequences.Summarize(rs), rs, SyncedByCommand, msg)
	b, err := json.Marshal(q)
	if err != nil {
		return err
	}
	if err := targetdb.Migrate(ctx, conn); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, `INSERT INTO parapply.sequence_sync (slot_name, synced_at, sync) VALUES ($1, $2, $3)
		ON CONFLICT (slot_name) DO UPDATE SET synced_at = excluded.synced_at, sync = excluded.sync`, slot, q.At, string(b))
	if err != nil {
		return fmt.Errorf("recording the sync in parapply.sequence_sync: %w", err)
	}
	return nil
}

// readSequenceSyncs returns the last parapply sync-sequences run of each
// slot (none if the command never ran against this target).
func readSequenceSyncs(ctx context.Context, conn *pgx.Conn) (map[string]*Sequences, error) {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT pg_catalog.to_regclass('parapply.sequence_sync') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	rows, err := conn.Query(ctx, `SELECT slot_name, sync::text FROM parapply.sequence_sync`)
	if err != nil {
		return nil, fmt.Errorf("reading parapply.sequence_sync: %w", err)
	}
	defer rows.Close()
	out := map[string]*Sequences{}
	for rows.Next() {
		var slot, js string
		if err := rows.Scan(&slot, &js); err != nil {
			return nil, fmt.Errorf("reading parapply.sequence_sync: %w", err)
		}
		q := &Sequences{}
		if err := json.Unmarshal([]byte(js), q); err != nil {
			return nil, fmt.Errorf("parapply.sequence_sync of slot %s: %w", slot, err)
		}
		out[slot] = q
	}
	return out, rows.Err()
}
