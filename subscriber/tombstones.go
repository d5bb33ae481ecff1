package subscriber

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/targetdb"
)

// setupTombstones installs, with detect_update_deleted, the tombstone
// trigger on every published table that has a replica identity key (the
// records are looked up by it), and otherwise removes triggers and records
// an earlier run left. It reports whether records are kept.
func (s *Subscriber) setupTombstones(ctx context.Context, conn *pgx.Conn, published []source.PublishedTable) (bool, error) {
	if !s.cfg.DetectConflicts || !s.cfg.DetectUpdateDeleted {
		n, others, err := targetdb.RemoveTombstones(ctx, conn, s.cfg.Source.Slot)
		switch {
		case err != nil:
			// Left in place, they cost deletes a little and decide
			// nothing: not worth stopping for.
			s.log.Warn("detect_update_deleted is off, but the tombstone triggers could not be removed from the target", "error", err)
		case len(others) > 0:
			s.log.Info("detect_update_deleted is off for this slot; the tombstone triggers stay for other slots that keep them", "slots", others)
		case n > 0:
			s.log.Info("detect_update_deleted is off: removed the tombstone triggers and parapply.tombstones from the target", "tables", n)
		}
		return false, nil
	}
	var tables []targetdb.TombstoneTable
	for _, pt := range published {
		if len(pt.Key) == 0 {
			continue // no key to look rows up by (REPLICA IDENTITY FULL or NOTHING)
		}
		tables = append(tables, targetdb.TombstoneTable{Name: parapply.QuoteIdent(pt.Schema) + "." + parapply.QuoteIdent(pt.Name), Key: pt.Key})
	}
	n, skipped, err := targetdb.InstallTombstones(ctx, conn, s.cfg.Source.Slot, tables)
	if errors.Is(err, targetdb.ErrTombstoneLocked) {
		return false, errLockStall{err}
	}
	if err != nil {
		return false, err
	}
	for t, why := range skipped {
		s.log.Warn("detect_update_deleted: this table takes no tombstone trigger; an update whose row was deleted there is reported as update_missing", "table", t, "reason", why)
	}
	if n > 0 {
		s.log.Info("detect_update_deleted: tombstone triggers installed", "tables", n)
	}
	return true, nil
}

// quietMark is a keepalive received while nothing was in flight: once
// everything before its WAL end is applied, every remote transaction that
// committed before the publisher sent it is applied.
type quietMark struct {
	end parapply.LSN
	at  time.Time
}

// pruneHorizon is the source commit time up to which every remote
// transaction is applied: the last one applied in order, or a quiet
// keepalive's time once its position is applied (an idle publisher).
func (s *Subscriber) pruneHorizon(tr *progress.Tracker) time.Time {
	applied, _, last := tr.Positions()
	if q := s.stats.quiet.Load(); q != nil && applied >= q.end && q.at.After(last) {
		return q.at
	}
	return last
}

// Pruning: every pruneInterval, each round bounded by pruneTimeout.
const (
	pruneInterval = time.Second
	pruneTimeout  = 30 * time.Second
)

// keepTombstones prunes the records of deletes, on a connection of its
// own, while the run streams: those no remote transaction still to come
// can have been concurrent with (their commit time, plus max_clock_skew,
// is before the horizon), and those older than max_retention_duration.
// A failure is logged once and tried again; never fatal.
func (s *Subscriber) keepTombstones(ctx context.Context, tr *progress.Tracker, commitTimestamps bool) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	t := time.NewTicker(pruneInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		conn, err = s.pruneTombstones(ctx, conn, tr, commitTimestamps)
		if err != nil {
			if conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
			if !failing && ctx.Err() == nil {
				s.log.Warn("pruning parapply.tombstones on the target failed; trying again every second", "error", err)
			}
			failing = true
			continue
		}
		if failing {
			s.log.Info("pruning parapply.tombstones works again")
		}
		failing = false
	}
}

// pruneTombstones is one round of keepTombstones, within pruneTimeout: on
// conn, or on a new connection if conn is nil or closed; it returns the
// connection it used (or made), to be closed after an error.
func (s *Subscriber) pruneTombstones(ctx context.Context, conn *pgx.Conn, tr *progress.Tracker, commitTimestamps bool) (*pgx.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, pruneTimeout)
	defer cancel()
	if conn == nil || conn.IsClosed() {
		c, err := sequences.Connect(ctx, s.cfg.Target.DSN, s.targetName()+" tombstones")
		if err != nil {
			return conn, err
		}
		conn = c
		// Pruning skips locked records; a lock on the table itself (an
		// ALTER) is waited for only so long.
		if _, err := conn.Exec(ctx, "SET lock_timeout = '1s'"); err != nil {
			return conn, err
		}
	}
	horizon := s.pruneHorizon(tr)
	if !horizon.IsZero() {
		horizon = horizon.Add(-s.cfg.MaxClockSkew)
	}
	pruned, expired, err := targetdb.PruneTombstones(ctx, conn, horizon, s.cfg.MaxRetention, commitTimestamps)
	s.stats.tombPruned.Add(pruned)
	s.stats.tombExpired.Add(expired)
	return conn, err
}
