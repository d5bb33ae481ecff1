package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/targetdb"
)

// DropCommand retires a slot, as DROP SUBSCRIPTION does: its replication
// origins, its rows in parapply's tables and its delete-record triggers on
// the target, the parapply schema once no slot is left in it, and, with
// --source, the slot on the publisher, which otherwise holds WAL there for
// good. It refuses while parapply runs on the slot, and while the target
// holds what only the slot's next run can finish (prepared transactions,
// indexes a copy dropped and has not rebuilt yet). --dry-run says what it
// would do and changes nothing.
type DropCommand struct {
	out io.Writer
	dry bool
}

// Run is parapply drop: a line for each thing dropped (or, with
// --dry-run, that would be), the target's first, then the publisher's.
func (cmd *DropCommand) Run(ctx context.Context, args []string) error {
	out := cmd.out
	fs := flag.NewFlagSet("drop", flag.ContinueOnError)
	fs.BoolVar(&cmd.dry, "dry-run", false, "say what would be dropped and deleted, change nothing")
	usageFor(fs, "parapply drop --target DSN --slot NAME [--source DSN] [--dry-run] [--config FILE]")
	o, err := loadOptions(fs, args, "target", "source", "slot", "application_name")
	if err != nil {
		return err
	}
	slot := o.Slot
	if o.Target == "" {
		return fmt.Errorf("drop needs --target and --slot (default %q); with --source it drops the slot on the publisher too", "parapply")
	}
	// A target made read-only (default_transaction_read_only) is written
	// all the same; dropping the slot on the publisher writes nothing a
	// read-only transaction refuses.
	connect := connector("parapply drop", !cmd.dry)
	conn, err := connect(ctx, o.Target, "target", o.ApplicationName+" drop")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	// The publisher is reached before anything changes: it also tells
	// which other slots recorded on the target never applied anything.
	var src *pgx.Conn
	if o.Source != "" {
		if src, err = connectPlain(ctx, o.Source, "source", o.ApplicationName+" drop"); err != nil {
			return err
		}
		defer src.Close(context.Background())
	}
	if err := lockSlot(ctx, conn, slot); err != nil {
		return err
	}
	if err := dropBlockers(ctx, conn, slot); err != nil {
		return err
	}
	if err := cmd.dropOnTarget(ctx, conn, src, slot); err != nil {
		return err
	}
	if src == nil {
		fmt.Fprintf(out, "publisher: not asked (no --source); if slot %s is still there, it holds WAL: SELECT pg_drop_replication_slot('%s') on the publisher\n", slot, slot)
		return nil
	}
	return cmd.dropOnPublisher(ctx, src, slot)
}

// would says what drop did, or with --dry-run what it would do.
func (cmd *DropCommand) would(future, past string) string {
	if cmd.dry {
		return "would " + future
	}
	return past
}

// lockSlot takes the slot's lock on the target, held while dropping: no
// run of the slot starts meanwhile. The sessions of a run that just
// stopped may take a moment to end.
func lockSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	for deadline := time.Now().Add(dropLockWait); ; time.Sleep(100 * time.Millisecond) {
		var free bool
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_try_advisory_lock("+targetdb.LockKey+")", slot).Scan(&free); err != nil {
			return fmt.Errorf("taking slot %s's lock on the target: %w", slot, err)
		}
		if free {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slot %s is in use: parapply runs on it (target sessions hold its lock, still after %s); stop it first", slot, dropLockWait)
		}
	}
}

// dropOnTarget drops what the target holds of the slot: its origins, its
// rows, its delete records, what slots that never applied left, and the
// parapply schema if no slot is left in it.
func (cmd *DropCommand) dropOnTarget(ctx context.Context, conn, src *pgx.Conn, slot string) error {
	out := cmd.out
	origins, err := slotOrigins(ctx, conn, slot)
	if err != nil {
		return err
	}
	if !cmd.dry {
		if err := dropOrigins(ctx, conn, origins); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "target: %s %d replication origins of slot %s%s\n", cmd.would("drop", "dropped"), len(origins), slot, listed(origins))
	for _, t := range targetdb.SlotTables {
		n, err := slotRows(ctx, conn, t, slot, cmd.dry)
		if err != nil {
			return err
		}
		if n > 0 {
			fmt.Fprintf(out, "target: %s %d rows of slot %s from parapply.%s\n", cmd.would("delete", "deleted"), n, slot, t)
		}
	}
	if err := dropTombstones(ctx, conn, slot, cmd.dry, out); err != nil {
		return err
	}
	gone, err := dropNeverApplied(ctx, conn, src, slot, cmd.dry, out)
	if err != nil {
		return err
	}
	return dropSchemaIfLast(ctx, conn, append(gone, slot), cmd.dry, out)
}

// dropOnPublisher drops the slot on the publisher, unless a walsender
// streams from it.
func (cmd *DropCommand) dropOnPublisher(ctx context.Context, src *pgx.Conn, slot string) error {
	var active *bool
	err := src.QueryRow(ctx, "SELECT active FROM pg_catalog.pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		fmt.Fprintf(cmd.out, "publisher: no slot %s\n", slot)
		return nil
	case err != nil:
		return fmt.Errorf("reading slot %s on the publisher: %w", slot, err)
	case active != nil && *active:
		return fmt.Errorf("slot %s is in use on the publisher (a walsender streams from it): stop what reads it, then drop it with SELECT pg_drop_replication_slot('%s')", slot, slot)
	}
	if !cmd.dry {
		if _, err := src.Exec(ctx, "SELECT pg_catalog.pg_drop_replication_slot($1)", slot); err != nil {
			return fmt.Errorf("dropping slot %s on the publisher: %w", slot, err)
		}
	}
	fmt.Fprintf(cmd.out, "publisher: %s slot %s\n", cmd.would("drop", "dropped"), slot)
	return nil
}

// dropNeverApplied removes, with the slot dropped, what the target holds
// of other slots no run resumes from: starts refused by their checks (a
// typo'd slot name, a missing publication) recorded before this release
// left such rows, each of which kept the parapply schema alive until
// dropped on its own. A slot qualifies when it has no progress row,
// nothing only its next run can finish, no parapply holding it (its lock
// is free; taken here until drop ends, so that no start of it begins
// meanwhile), and no slot on the publisher (without --source, which
// says, they are named and kept).
func dropNeverApplied(ctx context.Context, conn, src *pgx.Conn, slot string, dry bool, out io.Writer) ([]string, error) {
	names, err := neverApplied(ctx, conn, slot)
	if err != nil || len(names) == 0 {
		return nil, err
	}
	gone, err := lockUnused(ctx, conn, names)
	if err != nil {
		return nil, err
	}
	if src == nil {
		if len(gone) > 0 {
			fmt.Fprintf(out, "target: kept the rows of slots %s, which have no progress row (no run resumes from them): with --source, drop removes them too once the publisher is seen to have no such slot\n", strings.Join(gone, ", "))
		}
		return nil, nil
	}
	rows, _ := src.Query(ctx, "SELECT slot_name::text FROM pg_catalog.pg_replication_slots WHERE slot_name = ANY ($1) ORDER BY 1", gone)
	onPublisher, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading the publisher's slots: %w", err)
	}
	gone = slices.DeleteFunc(gone, func(n string) bool { return slices.Contains(onPublisher, n) })
	for _, name := range gone {
		if err := dropLeftovers(ctx, conn, name, dry, out); err != nil {
			return nil, err
		}
	}
	return gone, nil
}

// lockUnused takes the target's lock of each of names, and returns those
// whose lock was free (no parapply runs them; the lock is kept until drop
// ends) and whose rows are no more than a record of a refused start.
func lockUnused(ctx context.Context, conn *pgx.Conn, names []string) ([]string, error) {
	var unused []string
	for _, name := range names {
		var free bool
		if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_try_advisory_lock("+targetdb.LockKey+")", name).Scan(&free); err != nil {
			return nil, fmt.Errorf("taking slot %s's lock on the target: %w", name, err)
		}
		if !free || dropBlockers(ctx, conn, name) != nil {
			continue // a start of it runs, or its rows are more than a record
		}
		unused = append(unused, name)
	}
	return unused, nil
}

// dropLeftovers deletes (or, dry, counts) what slot name, which no run
// resumes from, left on the target: its replication origins and its rows
// in parapply's tables, and says so on out.
func dropLeftovers(ctx context.Context, conn *pgx.Conn, name string, dry bool, out io.Writer) error {
	origins, err := slotOrigins(ctx, conn, name)
	if err != nil {
		return err
	}
	if !dry {
		if err := dropOrigins(ctx, conn, origins); err != nil {
			return err
		}
	}
	var parts []string
	for _, t := range targetdb.SlotTables {
		n, err := slotRows(ctx, conn, t, name, dry)
		if err != nil {
			return err
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d from parapply.%s", n, t))
		}
	}
	if len(origins) > 0 {
		parts = append(parts, fmt.Sprintf("%d replication origins%s", len(origins), listed(origins)))
	}
	verb := "deleted"
	if dry {
		verb = "would delete"
	}
	fmt.Fprintf(out, "target: %s what slot %s left (%s): no run resumes from it (no progress row on the target, no slot on the publisher)\n", verb, name, strings.Join(parts, ", "))
	return nil
}

// neverApplied lists the slots other than slot that have rows in
// parapply's tables on the target but no progress row.
func neverApplied(ctx context.Context, conn *pgx.Conn, slot string) ([]string, error) {
	var names []string
	for _, t := range targetdb.SlotTables {
		if t == "progress" {
			continue
		}
		rows, _ := conn.Query(ctx, "SELECT DISTINCT r.slot_name::text FROM parapply."+t+` AS r WHERE r.slot_name <> $1
			AND NOT EXISTS (SELECT FROM parapply.progress AS p WHERE p.slot_name = r.slot_name)`, slot)
		more, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if missingRelation(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading parapply.%s on the target: %w", t, err)
		}
		for _, n := range more {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// slotRows deletes (or, dry, counts) slot's rows in one of parapply's
// tables; a table a later release made, or never made here, has none.
func slotRows(ctx context.Context, conn *pgx.Conn, table, slot string, dry bool) (int64, error) {
	var n int64
	var err error
	if dry {
		err = conn.QueryRow(ctx, "SELECT count(*) FROM parapply."+table+" WHERE slot_name = $1", slot).Scan(&n)
	} else {
		var tag pgconn.CommandTag
		tag, err = conn.Exec(ctx, "DELETE FROM parapply."+table+" WHERE slot_name = $1", slot)
		n = tag.RowsAffected()
	}
	if missingRelation(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("deleting slot %s's rows from parapply.%s on the target: %w", slot, table, err)
	}
	return n, nil
}

// dropTombstones takes the slot off the delete records
// (detect_update_deleted): the triggers on published tables, the
// function and the records go with the last slot that keeps them.
func dropTombstones(ctx context.Context, conn *pgx.Conn, slot string, dry bool, out io.Writer) error {
	if dry {
		var keeps bool
		err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM parapply.tombstone_slots WHERE slot_name = $1)", slot).Scan(&keeps)
		if missingRelation(err) {
			return nil // never installed
		}
		if err != nil {
			return fmt.Errorf("reading parapply.tombstone_slots on the target: %w", err)
		}
		if keeps {
			fmt.Fprintf(out, "target: would take slot %s off the records of deletes (detect_update_deleted), and drop their triggers if no other slot keeps them\n", slot)
		}
		return nil
	}
	removed, others, err := targetdb.RemoveTombstones(ctx, conn, slot)
	if err != nil {
		return fmt.Errorf("removing slot %s's records of deletes (detect_update_deleted) on the target: %w", slot, err)
	}
	switch {
	case len(others) > 0:
		fmt.Fprintf(out, "target: the records of deletes (detect_update_deleted) and their triggers are kept for slots %s\n", strings.Join(others, ", "))
	case removed > 0:
		fmt.Fprintf(out, "target: dropped the records of deletes (detect_update_deleted) and their triggers on %d tables\n", removed)
	}
	return nil
}

// dropSchemaIfLast drops the parapply schema once no slot but those
// dropped has rows left in it, unless parapply.conflicts holds the record
// of conflicts resolved (then it says how to drop it).
func dropSchemaIfLast(ctx context.Context, conn *pgx.Conn, dropped []string, dry bool, out io.Writer) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = 'parapply')").Scan(&exists); err != nil || !exists {
		return err
	}
	var others []string
	for _, t := range targetdb.SlotTables {
		rows, _ := conn.Query(ctx, "SELECT DISTINCT slot_name::text FROM parapply."+t+" WHERE slot_name <> ALL ($1)", dropped)
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if missingRelation(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading parapply.%s on the target: %w", t, err)
		}
		for _, n := range names {
			if !slices.Contains(others, n) {
				others = append(others, n)
			}
		}
	}
	if len(others) > 0 {
		slices.Sort(others)
		fmt.Fprintf(out, "target: schema parapply kept: slots %s still use it\n", strings.Join(others, ", "))
		return nil
	}
	var conflicts int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM parapply.conflicts").Scan(&conflicts); err != nil && !missingRelation(err) {
		return fmt.Errorf("reading parapply.conflicts on the target: %w", err)
	}
	if conflicts > 0 {
		fmt.Fprintf(out, "target: schema parapply kept: no slot uses it, but parapply.conflicts holds the record of %d conflicts resolved; DROP SCHEMA parapply CASCADE removes it\n", conflicts)
		return nil
	}
	if dry {
		fmt.Fprintln(out, "target: would drop schema parapply: no slot uses it any more")
		return nil
	}
	if _, err := conn.Exec(ctx, "DROP SCHEMA parapply CASCADE"); err != nil {
		return fmt.Errorf("dropping schema parapply on the target, which no slot uses any more: %w (its owner can: DROP SCHEMA parapply CASCADE)", err)
	}
	fmt.Fprintln(out, "target: dropped schema parapply: no slot uses it any more")
	return nil
}

// missingRelation tells an error of a table of parapply's schema that a
// later release made, or that was never made here (nor its schema).
func missingRelation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == pgerrcode.UndefinedTable || pe.Code == pgerrcode.InvalidSchemaName)
}

// dropBlockers refuses to drop a slot whose next run has work only it can
// finish on the target.
func dropBlockers(ctx context.Context, conn *pgx.Conn, slot string) error {
	count := func(table string) (int, error) {
		var n int
		err := conn.QueryRow(ctx, "SELECT count(*) FROM parapply."+table+" WHERE slot_name = $1", slot).Scan(&n)
		if missingRelation(err) {
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

// slotOrigins lists the slot's replication origins on the target.
func slotOrigins(ctx context.Context, conn *pgx.Conn, slot string) ([]string, error) {
	rows, _ := conn.Query(ctx, "SELECT roname FROM pg_catalog.pg_replication_origin WHERE roname ~ $1 ORDER BY 1", targetdb.OriginPattern(slot))
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("reading slot %s's replication origins on the target: %w", slot, err)
	}
	return names, nil
}

// dropOrigins drops replication origins on the target, giving a session
// of a run that just ended a moment to let go of its own.
func dropOrigins(ctx context.Context, conn *pgx.Conn, names []string) error {
	for _, name := range names {
		deadline := time.Now().Add(originDropWait)
		for {
			_, err := conn.Exec(ctx, "SELECT pg_catalog.pg_replication_origin_drop($1)", name)
			if err == nil {
				break
			}
			if !errors.Is(targetdb.OriginError(name, err), targetdb.ErrOriginInUse) || time.Now().After(deadline) {
				return targetdb.OriginError(name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
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
