package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/parapply/parapply/target"
)

// dropCommand retires a slot, as DROP SUBSCRIPTION does: its replication
// origins and its rows in parapply's tables on the target, and, with
// --source, the slot on the publisher, which otherwise holds WAL there for
// good. It refuses while parapply runs on the slot, and while the target
// holds what only the slot's next run can finish (prepared transactions,
// indexes a copy dropped and has not rebuilt yet).
func dropCommand(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("drop", flag.ContinueOnError)
	usageFor(fs, "parapply drop --target DSN --slot NAME [--source DSN] [--config FILE]")
	c, err := loadConfig(fs, args, "target", "source", "slot", "application_name")
	if err != nil {
		return err
	}
	slot := c["slot"]
	if c["target"] == "" {
		return fmt.Errorf("drop needs --target and --slot (default %q); with --source it drops the slot on the publisher too", "parapply")
	}
	conn, err := connectAs(ctx, c["target"], c["application_name"]+" drop", "target")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// Held while dropping: no run of the slot starts meanwhile. The
	// sessions of a run that just stopped may take a moment to end.
	for deadline := time.Now().Add(dropLockWait); ; time.Sleep(100 * time.Millisecond) {
		var free bool
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_try_advisory_lock("+target.LockKey+")", slot).Scan(&free); err != nil {
			return fmt.Errorf("taking slot %s's lock on the target: %w", slot, err)
		}
		if free {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slot %s is in use: parapply runs on it (target sessions hold its lock, still after %s); stop it first", slot, dropLockWait)
		}
	}
	if err := dropBlockers(ctx, conn, slot); err != nil {
		return err
	}
	origins, err := dropOrigins(ctx, conn, slot)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "target: dropped %d replication origins of slot %s%s\n", len(origins), slot, listed(origins))
	for _, t := range target.SlotTables {
		tag, err := conn.Exec(ctx, "DELETE FROM parapply."+t+" WHERE slot_name = $1", slot)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == pgerrcode.UndefinedTable {
			continue // made by a later release, or never used here
		}
		if err != nil {
			return fmt.Errorf("deleting slot %s's rows from parapply.%s on the target: %w", slot, t, err)
		}
		if n := tag.RowsAffected(); n > 0 {
			fmt.Fprintf(out, "target: deleted %d rows of slot %s from parapply.%s\n", n, slot, t)
		}
	}
	if c["source"] == "" {
		fmt.Fprintf(out, "publisher: not asked (no --source); if slot %s is still there, it holds WAL: SELECT pg_drop_replication_slot('%s') on the publisher\n", slot, slot)
		return nil
	}
	src, err := connectAs(ctx, c["source"], c["application_name"]+" drop", "source")
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	var active *bool
	err = src.QueryRow(ctx, "SELECT active FROM pg_catalog.pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		fmt.Fprintf(out, "publisher: no slot %s\n", slot)
		return nil
	case err != nil:
		return fmt.Errorf("reading slot %s on the publisher: %w", slot, err)
	case active != nil && *active:
		return fmt.Errorf("slot %s is in use on the publisher (a walsender streams from it): stop what reads it, then drop it with SELECT pg_drop_replication_slot('%s')", slot, slot)
	}
	if _, err := src.Exec(ctx, "SELECT pg_catalog.pg_drop_replication_slot($1)", slot); err != nil {
		return fmt.Errorf("dropping slot %s on the publisher: %w", slot, err)
	}
	fmt.Fprintf(out, "publisher: dropped slot %s\n", slot)
	return nil
}

// connectAs connects to one side, naming it in the error.
func connectAs(ctx context.Context, dsn, app, side string) (*pgx.Conn, error) {
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("%s DSN: %w", side, err)
	}
	cc.RuntimeParams["application_name"] = app
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the %s (host %s port %d database %s user %s): %w", side, cc.Host, cc.Port, cc.Database, cc.User, err)
	}
	return conn, nil
}

// dropBlockers refuses to drop a slot whose next run has work only it can
// finish on the target.
func dropBlockers(ctx context.Context, conn *pgx.Conn, slot string) error {
	count := func(table string) (int, error) {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM parapply."+table+" WHERE slot_name = $1", slot).Scan(&n)
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == pgerrcode.UndefinedTable {
			return 0, nil
		}
		return n, err
	}
	if n, err := count("prepared"); err != nil {
		return err
	} else if n > 0 {
		return fmt.Errorf("slot %s has %d transactions prepared on the target (parapply.prepared, pg_prepared_xacts): let parapply finish them, or COMMIT PREPARED / ROLLBACK PREPARED them, before dropping the slot", slot, n)
	}
	if n, err := count("deferred_index"); err != nil {
		return err
	} else if n > 0 {
		return fmt.Errorf("slot %s's initial copy dropped %d indexes it has not rebuilt yet (their definitions are in parapply.deferred_index): start parapply to finish the copy, or create them from that table and delete its rows, before dropping the slot", slot, n)
	}
	return nil
}

// dropOrigins drops the slot's replication origins on the target, giving a
// session of a run that just ended a moment to let go of its own.
func dropOrigins(ctx context.Context, conn *pgx.Conn, slot string) ([]string, error) {
	rows, _ := conn.Query(ctx, "SELECT roname FROM pg_catalog.pg_replication_origin WHERE roname ~ $1 ORDER BY 1", target.OriginPattern(slot))
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading slot %s's replication origins on the target: %w", slot, err)
	}
	for _, name := range names {
		deadline := time.Now().Add(originDropWait)
		for {
			_, err := conn.Exec(ctx, "SELECT pg_catalog.pg_replication_origin_drop($1)", name)
			if err == nil {
				break
			}
			if !errors.Is(target.OriginError(name, err), target.ErrOriginInUse) || time.Now().After(deadline) {
				return nil, target.OriginError(name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return names, nil
}

// originDropWait bounds the wait for a session still holding an origin,
// and dropLockWait the wait for the sessions of a run to let go of the
// slot's lock.
const (
	originDropWait = 10 * time.Second
	dropLockWait   = 5 * time.Second
)

// listed formats names for a message: " (a, b)", or nothing.
func listed(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return " (" + strings.Join(names, ", ") + ")"
}
