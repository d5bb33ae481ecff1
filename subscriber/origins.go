package subscriber

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/targetdb"
)

// Each target session that applies holds a replication origin of its own
// while it is open (targetdb.SetupOrigin; before PostgreSQL 19 an origin is
// active in one session at a time). Every origin that was ever set up in a
// session keeps one of the target cluster's origin state slots until it is
// dropped, whatever database it was used in, and the cluster has few:
// max_active_replication_origins, or max_replication_slots before
// PostgreSQL 18, 10 by default either way, shared with the cluster's own
// subscriptions and every other parapply. So before a run opens its
// sessions it reads which origins hold state slots
// (pg_show_replication_origin_status), drops those of its own that this
// run will not use (copy workers', workers' and stream sessions' above
// today's counts: targetdb.RetireOrigin), and sizes its workers, stream
// sessions and copy workers to the slots left: a run that would need more
// applies with fewer, and says which setting to raise, rather than fail
// when the pool opens or a large transaction arrives.

// prepareOrigins readies the target's origin state slots for this run
// (see the top of this file) and fits the run's sessions to them, from the
// counts configured (not those an earlier run fitted). migrated says it
// brought parapply's schema up to date (to record origins it retired).
func (s *Subscriber) prepareOrigins(ctx context.Context, conn *pgx.Conn) (migrated bool, err error) {
	slot := s.cfg.Source.Slot
	states, err := targetdb.ReadOriginStates(ctx, conn, slot)
	if err != nil {
		return migrated, err
	}
	limit, setting, held := states.Limit, states.Setting, states.Held
	if !states.Visible {
		if !s.origins.warned.Swap(true) {
			s.log.Warn("the target role may not read which replication origins hold state (pg_show_replication_origin_status), so parapply cannot size its sessions to what is free nor drop its origins no longer used; as a superuser on the target, GRANT EXECUTE ON FUNCTION pg_catalog.pg_show_replication_origin_status() TO <role>", "setting", setting, "limit", limit)
		}
		// As if no other origin held one.
		held = nil
	}
	plan, err := targetdb.PlanOrigins(limit, held, slot, states.Siblings, s.origins.want.workers, s.origins.want.streams, s.origins.want.copiers)
	if err != nil {
		return migrated, err
	}
	if len(plan.Retire) > 0 {
		// Retired numbers are kept in the schema: migrated here, before
		// the rest of setup, which then does not migrate again.
		if err := targetdb.Migrate(ctx, conn); err != nil {
			return migrated, err
		}
		migrated = true
	}
	for _, name := range plan.Retire {
		err := targetdb.RetireOrigin(ctx, conn, slot, name)
		switch {
		case errors.Is(err, targetdb.ErrOriginInUse):
			// Held by a session still ending; the next start drops it.
			s.log.Debug("a replication origin no longer used is still held; dropped at a later start", "origin", name)
		case err != nil:
			return migrated, err
		default:
			s.log.Info("dropped a replication origin this slot no longer uses, freeing its state on the target", "origin", name)
		}
	}
	if states.Visible {
		s.reportStrayOrigins(ctx, conn, held)
	}
	w, st, c := plan.Workers, plan.Streams, plan.Copiers
	if w != s.origins.want.workers || st != s.origins.want.streams || c != s.origins.want.copiers {
		// With workers = auto the pool is parapply's choice anyway: a
		// default target (10 origins) takes one worker fewer than
		// max_workers = 8, which is no cause for a warning at every
		// start; fewer copy workers only slow the copy.
		level := slog.LevelWarn
		if s.cfg.AutoWorkers && st == s.origins.want.streams && w > 0 || w == s.origins.want.workers && st == s.origins.want.streams {
			level = slog.LevelInfo
		}
		s.log.Log(ctx, level, fmt.Sprintf("the target allows %d replication origin states (%s), %d of them held by other origins, and parapply holds one per applying session: applying with fewer; raise %s on the target to at least %d (a restart is needed), or drop origins no longer used",
			limit, setting, len(plan.Others), setting, len(plan.Others)+1+max(s.origins.want.workers+s.origins.want.streams, s.origins.want.copiers)),
			"workers", w, "was", s.origins.want.workers, "stream_workers", st, "was_stream_workers", s.origins.want.streams, "copy_workers", c, "was_copy_workers", s.origins.want.copiers)
	}
	s.cfg.Workers, s.cfg.StreamWorkers, s.cfg.CopyWorkers = w, st, c
	return migrated, nil
}

// reportStrayOrigins warns, once per process, of parapply's replication
// origins holding state that belong to no slot recorded in any database of
// the target cluster (parapply.progress): left by a database dropped, a
// slot abandoned, or a run that never got as far as recording its slot.
// Only the cluster's superuser, or whoever holds those origins, may say
// they are unused, so they are named with the statement that drops them,
// not dropped.
func (s *Subscriber) reportStrayOrigins(ctx context.Context, conn *pgx.Conn, held []string) {
	if s.origins.strayReported.Swap(true) {
		return
	}
	var candidates []string
	for _, name := range held {
		if _, _, ok := targetdb.ParseOrigin(s.cfg.Source.Slot, name); !ok && strings.HasPrefix(name, "parapply_") {
			candidates = append(candidates, name)
		}
	}
	if len(candidates) == 0 {
		return
	}
	slots, unread := recordedSlots(ctx, conn, s.cfg.Target.DSN)
	var stray []string
	for _, name := range candidates {
		if !slices.ContainsFunc(slots, func(slot string) bool { _, _, ok := targetdb.ParseOrigin(slot, name); return ok }) {
			stray = append(stray, name)
		}
	}
	if len(stray) == 0 {
		return
	}
	drops := make([]string, len(stray))
	for i, name := range stray {
		drops[i] = "SELECT pg_replication_origin_drop('" + strings.ReplaceAll(name, "'", "''") + "');"
	}
	msg := "replication origins of parapply hold state on the target, but no slot recorded in the cluster's databases uses them (a database dropped, a slot abandoned): each takes one of the cluster's replication origin states, which this and every other subscriber of the cluster needs; if no parapply uses them, drop them as a superuser on the target"
	if len(unread) > 0 {
		msg += "; databases " + strings.Join(unread, ", ") + " could not be read, and a slot recorded there may still use them"
	}
	s.log.Warn(msg, "origins", stray, "drop", strings.Join(drops, " "))
}

// recordedSlots reads the slots recorded in parapply.progress in every
// database of the target cluster that accepts connections, connecting
// with the target's DSN to each; unread lists those that could not be
// read (no CONNECT privilege, say).
func recordedSlots(ctx context.Context, conn *pgx.Conn, dsn string) (slots, unread []string) {
	rows, _ := conn.Query(ctx, "SELECT datname FROM pg_catalog.pg_database WHERE datallowconn AND NOT datistemplate AND datname <> pg_catalog.current_database() ORDER BY 1")
	dbs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, []string{"(the list of databases: " + err.Error() + ")"}
	}
	read := func(c *pgx.Conn) ([]string, error) {
		rows, _ := c.Query(ctx, "SELECT slot_name FROM parapply.progress")
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == pgerrcode.UndefinedTable {
			return nil, nil
		}
		return got, err
	}
	if got, err := read(conn); err == nil {
		slots = append(slots, got...)
	} else {
		unread = append(unread, "(this one)")
	}
	for _, db := range dbs {
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			return slots, append(unread, db)
		}
		cfg.Database = db
		cfg.ConnectTimeout = strayConnectTimeout
		cctx, cancel := context.WithTimeout(ctx, strayConnectTimeout)
		c, err := pgx.ConnectConfig(cctx, cfg)
		if err == nil {
			var got []string
			if got, err = read(c); err == nil {
				slots = append(slots, got...)
			}
			c.Close(context.Background())
		}
		cancel()
		if err != nil {
			unread = append(unread, db)
		}
	}
	return slots, unread
}

// strayConnectTimeout bounds each connection and read of another
// database's parapply.progress when looking for origins no slot uses.
const strayConnectTimeout = 5 * time.Second
