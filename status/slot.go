package status

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
)

// Slot is what the publisher says of a slot and of the connection streaming
// from it (pg_replication_slots joined with pg_stat_replication).
type Slot struct {
	Name          string       `json:"slot_name"`
	Active        bool         `json:"active"`
	ActivePID     int          `json:"active_pid,omitempty"`
	ConfirmedLSN  parapply.LSN `json:"confirmed_flush_lsn"`
	RestartLSN    parapply.LSN `json:"restart_lsn"`
	CurrentLSN    parapply.LSN `json:"current_wal_lsn"`
	WALStatus     string       `json:"wal_status,omitempty"`
	RetainedBytes int64        `json:"retained_bytes"`
	// From pg_stat_replication, while a client streams from the slot.
	ApplicationName  string     `json:"application_name,omitempty"`
	ReplicationState string     `json:"replication_state,omitempty"`
	SyncState        string     `json:"sync_state,omitempty"`
	ReplyTime        *time.Time `json:"reply_time,omitempty"`
}

// ErrNoSlot means the publisher has no slot of that name.
var ErrNoSlot = errors.New("no such replication slot on the publisher")

// ReadSlot reads slot's state from the publisher over an ordinary
// connection.
func ReadSlot(ctx context.Context, conn *pgx.Conn, slot string) (Slot, error) {
	var s Slot
	var pid *int32
	var confirmed, restart, current string
	var walStatus, app, state, sync *string
	err := conn.QueryRow(ctx, `SELECT s.slot_name, s.active, s.active_pid, coalesce(s.confirmed_flush_lsn, '0/0')::text,
		coalesce(s.restart_lsn, '0/0')::text, pg_catalog.pg_current_wal_lsn()::text, s.wal_status,
		coalesce(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), s.restart_lsn), 0)::bigint,
		r.application_name, r.state, r.sync_state, r.reply_time
		FROM pg_catalog.pg_replication_slots s LEFT JOIN pg_catalog.pg_stat_replication r ON r.pid = s.active_pid
		WHERE s.slot_name = $1`, slot).
		Scan(&s.Name, &s.Active, &pid, &confirmed, &restart, &current, &walStatus, &s.RetainedBytes, &app, &state, &sync, &s.ReplyTime)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("slot %s: %w (check --slot and --source)", slot, ErrNoSlot)
	}
	if err != nil {
		return s, fmt.Errorf("reading slot %s on the publisher: %w", slot, err)
	}
	if pid != nil {
		s.ActivePID = int(*pid)
	}
	for _, p := range []struct {
		s   string
		lsn *parapply.LSN
	}{{confirmed, &s.ConfirmedLSN}, {restart, &s.RestartLSN}, {current, &s.CurrentLSN}} {
		if *p.lsn, err = parapply.ParseLSN(p.s); err != nil {
			return s, err
		}
	}
	for _, p := range []struct {
		from *string
		to   *string
	}{{walStatus, &s.WALStatus}, {app, &s.ApplicationName}, {state, &s.ReplicationState}, {sync, &s.SyncState}} {
		if p.from != nil {
			*p.to = *p.from
		}
	}
	return s, nil
}
