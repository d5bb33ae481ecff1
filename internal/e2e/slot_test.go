package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/parapply/parapply/subscriber"
)

// failStart runs a start that is to be refused and returns its error.
func (e *env) failStart(cfg subscriber.Config) error {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := subscriber.New(cfg).Run(ctx)
	if err == nil {
		e.t.Fatal("the start was not refused")
	}
	return err
}

// slots lists the publisher's replication slots whose name starts with
// prefix (temporary copy slots included).
func (e *env) slots(prefix string) []string {
	e.t.Helper()
	rows, err := e.pub.Query(context.Background(), `SELECT slot_name FROM pg_replication_slots WHERE starts_with(slot_name, $1) ORDER BY 1`, prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// count runs a count query on the target.
func (e *env) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.sub.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// TestRefusedStartDropsSlot: a start refused for good leaves no slot on the
// publisher holding WAL (it is created only after the cheap checks, and a
// start that created it and is refused later drops it), and a second start
// after the cause is fixed succeeds, the target equal to the publisher.
func TestRefusedStartDropsSlot(t *testing.T) {
	cases := []struct {
		name  string
		setup func(e *env, cfg *subscriber.Config) // makes the start fail
		want  string                               // in the start's error
		or    string                               // or this instead
		// undone: the refused start's records and copied rows are gone
		// from the target (not so for an earlier slot's).
		undone bool
		// left, if set, checks what the refused start left instead.
		left func(e *env)
		fix  func(e *env, cfg *subscriber.Config)
	}{
		{
			name:   "table already holds rows",
			setup:  func(e *env, _ *subscriber.Config) { e.exec(e.sub, `INSERT INTO b VALUES (-1, 'mine')`) },
			want:   `target table "public"."b" already holds rows`,
			undone: true,
			fix:    func(e *env, _ *subscriber.Config) { e.exec(e.sub, `DELETE FROM b`) },
		},
		{
			// Table a is copied (and may be done) before b's values
			// fail: a's rows go too, else the next start, with
			// existing_data = error, would find them.
			name:   "copy type error",
			setup:  func(e *env, _ *subscriber.Config) { e.exec(e.sub, `ALTER TABLE b ALTER v TYPE varchar(3)`) },
			want:   "value too long for type character varying(3)",
			undone: true,
			fix:    func(e *env, _ *subscriber.Config) { e.exec(e.sub, `ALTER TABLE b ALTER v TYPE varchar(50)`) },
		},
		{
			// A fault (the copy's target session ends) at the first
			// start: Run gives up at once, as on a setup mistake, and
			// the slot goes with what the start recorded.
			name: "fault during the first start's copy",
			setup: func(e *env, cfg *subscriber.Config) {
				cfg.ReconnectTimeout = time.Minute
				e.exec(e.sub, `CREATE FUNCTION die() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$;
					CREATE TRIGGER die BEFORE INSERT ON b FOR EACH ROW EXECUTE FUNCTION die();
					ALTER TABLE b ENABLE ALWAYS TRIGGER die`)
			},
			want: "terminating connection due to administrator command",
			// (When the copy's write meets the closed socket before
			// the server's message is read.)
			or:     "write: broken pipe",
			undone: true,
			fix:    func(e *env, _ *subscriber.Config) { e.exec(e.sub, `DROP TRIGGER die ON b`) },
		},
		{
			name: "earlier slot's name recorded on the target",
			setup: func(e *env, cfg *subscriber.Config) {
				r := e.start(*cfg)
				e.exec(e.pub, `INSERT INTO a VALUES (5001, 'streamed')`)
				e.waitCaughtUp(r)
				if err := r.stop(); err != nil {
					e.t.Fatal(err)
				}
				e.waitSlotReleased(e.t, cfg.Source.Slot)
				e.exec(e.pub, `SELECT pg_drop_replication_slot($1)`, cfg.Source.Slot)
				e.exec(e.pub, `INSERT INTO a VALUES (5002, 'lost')`)
			},
			want: "the target records progress from an earlier slot of that name",
			fix: func(e *env, cfg *subscriber.Config) {
				e.exec(e.sub, `DELETE FROM parapply.progress WHERE slot_name = $1`, cfg.Source.Slot)
				e.exec(e.sub, `DELETE FROM parapply.sync_state WHERE slot_name = $1`, cfg.Source.Slot)
				cfg.ExistingData = "truncate"
			},
		},
		{
			// Only the progress row removed by hand: the start records
			// its own, is refused by the earlier copy's sync state, and
			// removes its row again, but neither that sync state nor the
			// rows it copied (they are the earlier slot's, not its own).
			name: "earlier slot's copy recorded on the target",
			setup: func(e *env, cfg *subscriber.Config) {
				r := e.start(*cfg)
				e.waitCaughtUp(r)
				if err := r.stop(); err != nil {
					e.t.Fatal(err)
				}
				e.waitSlotReleased(e.t, cfg.Source.Slot)
				e.exec(e.pub, `SELECT pg_drop_replication_slot($1)`, cfg.Source.Slot)
				e.exec(e.sub, `DELETE FROM parapply.progress WHERE slot_name = $1`, cfg.Source.Slot)
			},
			want: "the target records tables copied for an earlier slot of that name",
			left: func(e *env) {
				if n := e.count(`SELECT count(*) FROM parapply.progress WHERE slot_name = 'refused'`); n != 0 {
					e.t.Fatalf("the refused start left the progress row it recorded (%d rows)", n)
				}
				if n := e.count(`SELECT count(*) FROM parapply.sync_state WHERE slot_name = 'refused'`); n != 2 {
					e.t.Fatalf("the refused start changed the earlier slot's sync state (%d rows, want 2)", n)
				}
				if n := e.count(`SELECT count(*) FROM a`); n != 5000 {
					e.t.Fatalf("the refused start emptied rows the earlier slot copied: %d rows in a, want 5000", n)
				}
			},
			fix: func(e *env, cfg *subscriber.Config) {
				e.exec(e.sub, `DELETE FROM parapply.sync_state WHERE slot_name = $1`, cfg.Source.Slot)
				cfg.ExistingData = "truncate"
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, `CREATE TABLE a (id int PRIMARY KEY, v varchar(50)); CREATE TABLE b (id int PRIMARY KEY, v varchar(50))`)
			e.exec(e.pub, `INSERT INTO a SELECT g, 'row ' || g FROM generate_series(1, 5000) g;
				INSERT INTO b SELECT g, repeat('x', 10 + g % 30) FROM generate_series(1, 2000) g`)
			cfg := e.config("refused")
			cfg.CopyData = true
			c.setup(e, &cfg)
			err := e.failStart(cfg)
			t.Logf("refused: %v", err)
			if !strings.Contains(err.Error(), c.want) && (c.or == "" || !strings.Contains(err.Error(), c.or)) {
				t.Fatalf("the start failed with %q, want it to say %q", err, c.want)
			}
			if s := e.slots("refused"); len(s) != 0 {
				t.Fatalf("the refused start left slots %v on the publisher", s)
			}
			switch {
			case c.left != nil:
				c.left(e)
			case c.undone:
				for _, table := range []string{"parapply.progress", "parapply.sync_state"} {
					if e.count(`SELECT count(*) FROM pg_class WHERE oid = to_regclass($1)`, table) == 0 {
						continue // the start was refused before creating it
					}
					if n := e.count(`SELECT count(*) FROM ` + table + ` WHERE slot_name = 'refused'`); n != 0 {
						t.Fatalf("the refused start left %d rows of its slot in %s", n, table)
					}
				}
				if n := e.count(`SELECT count(*) FROM a`); n != 0 {
					t.Fatalf("the refused start left %d copied rows in a", n)
				}
			default:
				if n := e.count(`SELECT count(*) FROM parapply.progress WHERE slot_name = 'refused'`); n != 1 {
					t.Fatalf("the refused start changed the earlier slot's progress row (%d rows)", n)
				}
			}
			c.fix(e, &cfg)
			r := e.start(cfg)
			e.exec(e.pub, `UPDATE a SET v = 'after' WHERE id <= 10; INSERT INTO b VALUES (9001, 'after')`)
			e.waitCaughtUp(r)
			e.verify("public.a", "public.b")
		})
	}
}
