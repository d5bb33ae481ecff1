package status

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	// Failover is the slot's failover flag (PostgreSQL 17 and later; nil
	// before); SyncStandbySlots the publisher's synchronized_standby_slots.
	Failover         *bool  `json:"failover,omitempty"`
	SyncStandbySlots string `json:"synchronized_standby_slots,omitempty"`
	// Standbys are the other hosts the source names, as each sees the
	// slot (see ReadStandby).
	Standbys []Standby `json:"standbys,omitempty"`
}

// Standby is what a host the source names besides the primary says of
// the slot: whether it is a standby and keeps a synchronized copy.
type Standby struct {
	Host         string       `json:"host"`
	InRecovery   bool         `json:"in_recovery"`
	Synced       bool         `json:"synced"`
	ConfirmedLSN parapply.LSN `json:"confirmed_flush_lsn,omitempty"`
	Error        string       `json:"error,omitempty"`
}

// ReadStandby reads, on a host the source names, whether it is a standby
// and whether it holds a synchronized copy of slot (not temporary: a
// copy the standby cannot use yet is kept temporary).
func ReadStandby(ctx context.Context, conn *pgx.Conn, host, slot string) Standby {
	sb := Standby{Host: host}
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_is_in_recovery()").Scan(&sb.InRecovery); err != nil {
		sb.Error = err.Error()
		return sb
	}
	var confirmed *string
	err := conn.QueryRow(ctx, `SELECT coalesce((pg_catalog.to_jsonb(s) ->> 'synced')::bool, false) AND NOT s.temporary, s.confirmed_flush_lsn::text
		FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = $1`, slot).Scan(&sb.Synced, &confirmed)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		sb.Error = err.Error()
	case confirmed != nil:
		sb.ConfirmedLSN, _ = parapply.ParseLSN(*confirmed)
	}
	return sb
}

// ErrNoSlot means the publisher has no slot of that name.
var ErrNoSlot = errors.New("no such replication slot on the publisher")

// ReadSlot reads slot's state from the publisher over an ordinary
// connection.
func ReadSlot(ctx context.Context, conn *pgx.Conn, slot string) (Slot, error) {
	slots, err := readSlots(ctx, conn, `s.slot_name = $1`, slot)
	if err != nil {
		return Slot{}, fmt.Errorf("reading slot %s on the publisher: %w", slot, err)
	}
	if len(slots) == 0 {
		return Slot{}, fmt.Errorf("slot %s: %w (check --slot and --source)", slot, ErrNoSlot)
	}
	return slots[0], nil
}

// InactiveSlots lists the logical pgoutput slots of the publisher named in
// names (the slots parapply has used on a target: see SlotNames) that no
// one streams from: each keeps its WAL on the publisher until it is used
// again or dropped.
func InactiveSlots(ctx context.Context, conn *pgx.Conn, names []string) ([]Slot, error) {
	slots, err := readSlots(ctx, conn, `NOT s.active AND s.slot_type = 'logical' AND s.plugin = 'pgoutput' AND s.slot_name = ANY($1::text[])`, names)
	if err != nil {
		return nil, fmt.Errorf("reading the inactive slots on the publisher: %w", err)
	}
	return slots, nil
}

// SlotNames returns the slot names parapply has used on the target: those
// of its status and progress rows.
func SlotNames(ctx context.Context, conn *pgx.Conn) ([]string, error) {
	var names []string
	for _, table := range []string{"parapply.status", "parapply.progress"} {
		var more []string
		err := conn.QueryRow(ctx, `SELECT coalesce(pg_catalog.array_agg(slot_name::text), '{}') FROM `+table).Scan(&more)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == pgerrcode.UndefinedTable {
			continue // no such table: parapply never got that far
		}
		if err != nil {
			return nil, fmt.Errorf("reading the slot names parapply used on the target (%s): %w", table, err)
		}
		for _, n := range more {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names, nil
}

// readSlots reads the slots where cond (on pg_replication_slots s) holds,
// by name.
func readSlots(ctx context.Context, conn *pgx.Conn, cond string, args ...any) ([]Slot, error) {
	rows, err := conn.Query(ctx, `SELECT s.slot_name, s.active, s.active_pid, coalesce(s.confirmed_flush_lsn, '0/0')::text,
		coalesce(s.restart_lsn, '0/0')::text, pg_catalog.pg_current_wal_lsn()::text, s.wal_status,
		coalesce(pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), s.restart_lsn), 0)::bigint,
		r.application_name, r.state, r.sync_state, r.reply_time, (pg_catalog.to_jsonb(s) ->> 'failover')::bool,
		coalesce(pg_catalog.current_setting('synchronized_standby_slots', true), '')
		FROM pg_catalog.pg_replication_slots s LEFT JOIN pg_catalog.pg_stat_replication r ON r.pid = s.active_pid
		WHERE `+cond+` ORDER BY s.slot_name`, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Slot
	for rows.Next() {
		var s Slot
		var pid *int32
		var confirmed, restart, current string
		var walStatus, app, state, sync *string
		if err := rows.Scan(&s.Name, &s.Active, &pid, &confirmed, &restart, &current, &walStatus, &s.RetainedBytes, &app, &state, &sync, &s.ReplyTime, &s.Failover, &s.SyncStandbySlots); err != nil {
			return nil, err
		}
		if pid != nil {
			s.ActivePID = int(*pid)
		}
		for _, p := range []struct {
			s   string
			lsn *parapply.LSN
		}{{confirmed, &s.ConfirmedLSN}, {restart, &s.RestartLSN}, {current, &s.CurrentLSN}} {
			if *p.lsn, err = parapply.ParseLSN(p.s); err != nil {
				return nil, err
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
		out = append(out, s)
	}
	return out, rows.Err()
}
