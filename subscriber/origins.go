package subscriber

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Each target session that applies holds a replication origin of its own
// while it is open (apply.SetupOrigin; before PostgreSQL 19 an origin is
// active in one session at a time), and the target allows so many at once:
// max_active_replication_origins, or max_replication_slots before
// PostgreSQL 18, 10 by default either way. The stream reader needs one, each
// worker one and each session of a streamed transaction one; a run that
// would need more applies with fewer workers, then fewer stream sessions,
// and says which setting to raise, rather than fail when the pool opens or
// a large transaction arrives.

// fitOrigins returns the workers and stream sessions a run may open when the
// target allows limit active origins, of which the reader takes one:
// workers give way first (down to one), then stream sessions.
func fitOrigins(limit, workers, streams int) (w, st int) {
	free := max(limit-1, 0)
	w = min(workers, max(free-streams, min(workers, 1)), free)
	return w, min(streams, free-w)
}

// originLimit reads how many replication origins the target lets be active
// at once.
func originLimit(ctx context.Context, conn *pgx.Conn) (int, string, error) {
	var v, name string
	err := conn.QueryRow(ctx, `SELECT coalesce(current_setting('max_active_replication_origins', true), current_setting('max_replication_slots')),
		CASE WHEN current_setting('max_active_replication_origins', true) IS NULL THEN 'max_replication_slots' ELSE 'max_active_replication_origins' END`).Scan(&v, &name)
	if err != nil {
		return 0, "", fmt.Errorf("reading the target's limit on active replication origins: %w", err)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, "", fmt.Errorf("reading the target's limit on active replication origins: %s = %q", name, v)
	}
	return n, name, nil
}

// fitToOrigins lowers the run's workers and stream sessions to what the
// target's limit on active replication origins allows, with a warning
// naming the setting.
func (s *Subscriber) fitToOrigins(ctx context.Context, conn *pgx.Conn) error {
	limit, name, err := originLimit(ctx, conn)
	if err != nil {
		return err
	}
	w, st := fitOrigins(limit, s.cfg.Workers, s.cfg.StreamWorkers)
	if w == s.cfg.Workers && st == s.cfg.StreamWorkers {
		return nil
	}
	// With workers = auto the pool is parapply's choice anyway: a default
	// target (10 origins) takes one worker fewer than max_workers = 8,
	// which is no cause for a warning at every start.
	level := slog.LevelWarn
	if s.cfg.AutoWorkers && st == s.cfg.StreamWorkers && w > 0 {
		level = slog.LevelInfo
	}
	s.log.Log(ctx, level, fmt.Sprintf("the target allows %d active replication origins (%s) and parapply holds one per applying session: applying with fewer; raise %s on the target to at least %d (a restart is needed), beside what its own subscriptions use",
		limit, name, name, 1+s.cfg.Workers+s.cfg.StreamWorkers), "workers", w, "was", s.cfg.Workers, "stream_workers", st, "was_stream_workers", s.cfg.StreamWorkers)
	s.cfg.Workers, s.cfg.StreamWorkers = w, st
	return nil
}
