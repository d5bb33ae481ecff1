package source

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/preflight/judge"
)

// check reads what the run needs of the publisher and refuses, as
// package preflight's judgements word it, what would fail later: the
// version the settings need, wal_level, the publications and the slot.
func (s *Source) check(ctx context.Context) error {
	v, err := s.serverVersion(ctx)
	if err != nil {
		return err
	}
	s.ServerVersion = v
	if f := judge.PublisherVersion(v, s.cfg.Origin == OriginNone); f != nil {
		return f
	}
	s.Proto = s.cfg.ProtoVersion
	if s.Proto == 0 {
		switch {
		case v >= 160000:
			s.Proto = 4
		case v >= 150000:
			s.Proto = 3
		default:
			s.Proto = 2
		}
	}
	sys, err := pglogrepl.IdentifySystem(ctx, s.conn)
	if err != nil {
		return fmt.Errorf("IDENTIFY_SYSTEM on the source: %w", err)
	}
	s.SystemID = sys.SystemID
	s.WALAtConnect = parapply.LSN(sys.XLogPos)
	// effective_wal_level (PostgreSQL 19 on) reads NULL, so "", before it.
	rows, err := s.query(ctx, "SELECT pg_catalog.current_setting('wal_level'), pg_catalog.current_setting('effective_wal_level', true)")
	if err != nil {
		return fmt.Errorf("reading wal_level on the source: %w", err)
	}
	if len(rows) == 1 && len(rows[0]) == 2 {
		if f := judge.WALLevel(string(rows[0][0]), string(rows[0][1])); f != nil {
			return f
		}
	}
	if err := s.checkPublications(ctx); err != nil {
		return err
	}
	if s.Published, err = s.publishedTables(ctx); err != nil {
		return err
	}
	return s.checkSlot(ctx)
}

// serverVersion is the publisher's server_version_num: reported at the
// connection's start from PostgreSQL 16 on, asked for before.
func (s *Source) serverVersion(ctx context.Context) (int, error) {
	if v, err := strconv.Atoi(s.conn.ParameterStatus("server_version_num")); err == nil && v != 0 {
		return v, nil
	}
	rows, err := s.query(ctx, "SHOW server_version_num")
	if err != nil {
		// Wrapped: a lost connection here is a fault to ride out.
		return 0, fmt.Errorf("reading the source's server version: %w", err)
	}
	if len(rows) != 1 {
		return 0, fmt.Errorf("reading the source's server version: SHOW server_version_num returned %d rows", len(rows))
	}
	v, _ := strconv.Atoi(string(rows[0][0]))
	return v, nil
}

// checkSlot reads the slot of the name: Missing when there is none (the
// caller creates it), else refused unless the run may stream from it.
func (s *Source) checkSlot(ctx context.Context) error {
	failover := "false"
	if s.ServerVersion >= failoverVersion {
		failover = "failover"
	}
	rows, err := s.query(ctx, `SELECT slot_type, coalesce(plugin, ''), coalesce(database, ''), active_pid, confirmed_flush_lsn, `+failover+`,
		(SELECT coalesce(a.application_name, '') FROM pg_catalog.pg_stat_activity a WHERE a.pid = s.active_pid)
		FROM pg_catalog.pg_replication_slots s WHERE slot_name = `+parapply.QuoteLiteral(s.cfg.Slot))
	if err != nil {
		return fmt.Errorf("looking up slot %s: %w", s.cfg.Slot, err)
	}
	if len(rows) == 0 {
		s.Missing = true
		return nil
	}
	r := rows[0]
	if f := judge.Slot(s.cfg.Slot, string(r[0]), string(r[1]), string(r[2]), s.Database); f != nil {
		return f
	}
	if r[3] != nil {
		pid, _ := strconv.Atoi(string(r[3]))
		return slotBusy{judge.SlotInUse(s.cfg.Slot, pid, string(r[6]))}
	}
	if r[4] != nil {
		if s.Confirmed, err = parapply.ParseLSN(string(r[4])); err != nil {
			return fmt.Errorf("slot %s: %w", s.cfg.Slot, err)
		}
	}
	s.FailoverSlot = string(r[5]) == "t"
	return nil
}

// ErrSlotBusy is wrapped by the error of a start that found the slot held
// by a walsender: a subscriber that was just killed may still hold it for a
// moment, so a caller may wait and try again.
var ErrSlotBusy = errors.New("slot in use")

// checkPublications refuses publications the source database lacks.
func (s *Source) checkPublications(ctx context.Context) error {
	if len(s.cfg.Publications) == 0 {
		return judge.NoPublication()
	}
	rows, err := s.query(ctx, "SELECT pubname FROM pg_catalog.pg_publication ORDER BY 1")
	if err != nil {
		return fmt.Errorf("looking up publications %s: %w", strings.Join(s.cfg.Publications, ", "), err)
	}
	existing := make([]string, len(rows))
	for i, r := range rows {
		existing[i] = string(r[0])
	}
	if f := judge.Publications(s.cfg.Publications, existing); f != nil {
		return f
	}
	return nil
}

// slotBusy is the refusal of a slot a walsender streams from.
type slotBusy struct{ *judge.Finding }

func (e slotBusy) Is(target error) bool { return target == ErrSlotBusy }
