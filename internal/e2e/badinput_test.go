package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/internal/pgtest"
)

// runOnce runs the parapply binary to completion (bounded) and returns its
// output and exit error.
func runOnce(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, parapplyBinary(t), args...).CombinedOutput()
	return string(out), err
}

// TestBadInput checks that each setup mistake ends parapply at once with a
// non-zero exit and one line that names the object and the fix, and that
// nothing was applied.
func TestBadInput(t *testing.T) {
	e := newEnv(t, `CREATE TABLE items (id int PRIMARY KEY, name text, qty int)`)
	e.exec(e.pub, `CREATE TABLE only_on_publisher (id int PRIMARY KEY); CREATE PUBLICATION pub_missing FOR TABLE only_on_publisher`)
	e.exec(e.pub, `CREATE TABLE typed (id int PRIMARY KEY, v text); CREATE PUBLICATION pub_typed FOR TABLE typed`)
	e.exec(e.pub, `CREATE TABLE widgets (id int PRIMARY KEY); CREATE PUBLICATION pub_widgets FOR TABLE widgets`)
	e.exec(e.sub, `CREATE TABLE widget (id int PRIMARY KEY)`)
	e.exec(e.sub, `CREATE TABLE typed (id int PRIMARY KEY, v int)`)
	e.exec(e.pub, `CREATE TABLE narrow (id int PRIMARY KEY, a int, b int); CREATE PUBLICATION pub_narrow FOR TABLE narrow`)
	e.exec(e.sub, `CREATE TABLE narrow (id int PRIMARY KEY, a int)`)
	e.exec(e.pub, `CREATE ROLE norepl LOGIN`)
	e.exec(e.sub, `CREATE ROLE plain LOGIN; GRANT ALL ON SCHEMA public TO plain`)
	e.exec(e.sub, `CREATE ROLE noorigin LOGIN; GRANT ALL ON SCHEMA public TO noorigin; GRANT SET ON PARAMETER session_replication_role TO noorigin`)
	e.exec(e.pub, `CREATE PUBLICATION pub_origin FOR TABLE items`)
	src, dst := e.sourceDSN(), e.targetDSN()
	// A target database of its own, where a role that may apply does not
	// own the published table (created by a superuser).
	e.exec(e.pub, `CREATE TABLE owned (id int PRIMARY KEY); CREATE PUBLICATION pub_owned FOR TABLE owned`)
	e.exec(e.pub, `CREATE SCHEMA locked; CREATE TABLE locked.kept (id int PRIMARY KEY); CREATE PUBLICATION pub_locked FOR TABLE locked.kept`)
	e.exec(e.sub, `CREATE ROLE notowner LOGIN; GRANT SET ON PARAMETER session_replication_role TO notowner`)
	e.exec(e.sub, `CREATE DATABASE notowner OWNER notowner`)
	other, err := pgx.Connect(context.Background(), e.pair.Subscriber.DSN("notowner"))
	if err != nil {
		t.Fatal(err)
	}
	e.exec(other, `CREATE TABLE owned (id int PRIMARY KEY); GRANT ALL ON owned TO notowner;
		GRANT EXECUTE ON FUNCTION pg_replication_origin_create(text), pg_replication_origin_oid(text), pg_replication_origin_session_setup,
			pg_replication_origin_xact_setup(pg_lsn, timestamp with time zone), pg_replication_origin_drop(text),
			pg_replication_origin_session_reset(), pg_replication_origin_progress(text, boolean) TO notowner;
		CREATE SCHEMA locked; GRANT USAGE ON SCHEMA locked TO notowner; CREATE TABLE locked.kept (id int PRIMARY KEY); ALTER TABLE locked.kept OWNER TO notowner`)
	other.Close(context.Background())
	notOwner := strings.Replace(e.pair.Subscriber.DSN("notowner"), "user=postgres", "user=notowner", 1)

	replica, err := pgtest.StartPublisher(context.Background(), pgtest.Options{Name: "replica-level", Settings: map[string]string{"wal_level": "replica"}})
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Stop()
	// From PostgreSQL 19 on, wal_level = replica serves (logical decoding
	// turns on with the first logical slot): the run gets past it, to the
	// publication that server lacks.
	replicaWant := []string{"wal_level", "logical"}
	if replica.Version >= 19 {
		replicaWant = []string{"publication pub does not exist"}
	}

	cases := []struct {
		name string
		args []string
		want []string // every fragment must appear in the one-line error
	}{
		{"unreachable source", []string{"--source", "host=127.0.0.1 port=1 user=postgres dbname=postgres connect_timeout=5", "--target", dst, "--publication", "pub"},
			[]string{"connecting to the source", "port 1"}},
		{"unreachable target", []string{"--source", src, "--target", "host=127.0.0.1 port=1 user=postgres dbname=postgres connect_timeout=5", "--publication", "pub", "--slot", "bad_target"},
			[]string{"connecting to the target", "port 1"}},
		{"wrong database", []string{"--source", strings.Replace(src, "dbname=postgres", "dbname=nosuchdb", 1), "--target", dst, "--publication", "pub"},
			[]string{"nosuchdb"}},
		{"missing publication", []string{"--source", src, "--target", dst, "--publication", "nosuchpub"},
			[]string{"publication nosuchpub does not exist", "CREATE PUBLICATION"}},
		{"misspelt publication", []string{"--source", src, "--target", dst, "--publication", "pub_typd"},
			[]string{"publication pub_typd does not exist; did you mean pub_typed? (fix: set publication = pub_typed (or, if pub_typd is meant: CREATE PUBLICATION pub_typd"}},
		{"table misspelt on target", []string{"--source", src, "--target", dst, "--publication", "pub_widgets", "--slot", "s_widgets"},
			[]string{"public.widgets: does not exist on the target, but public.widget does: did you mean it?", "ALTER TABLE public.widget RENAME TO widgets;"}},
		{"table missing on target", []string{"--source", src, "--target", dst, "--publication", "pub_missing", "--slot", "s_missing"},
			[]string{"public.only_on_publisher: does not exist on the target", "create it"}},
		{"column missing on target", []string{"--source", src, "--target", dst, "--publication", "pub_narrow", "--slot", "s_narrow"},
			[]string{"column b is missing on the target", "ADD COLUMN b integer"}},
		{"source role without replication", []string{"--source", strings.Replace(src, "user="+replRole, "user=norepl", 1), "--target", dst, "--publication", "pub"},
			[]string{"REPLICATION"}},
		{"target role without privileges", []string{"--source", src, "--target", strings.Replace(dst, "user="+applyRole, "user=plain", 1), "--publication", "pub", "--slot", "s_plain"},
			[]string{"session_replication_role", "GRANT SET ON PARAMETER"}},
		{"target role without replication origins", []string{"--source", src, "--target", strings.Replace(dst, "user="+applyRole, "user=noorigin", 1), "--publication", "pub_origin", "--slot", "s_noorigin"},
			[]string{"replication origins", "GRANT EXECUTE ON FUNCTION", "pg_replication_origin_session_setup"}},
		{"bad origin", []string{"--source", src, "--target", dst, "--publication", "pub", "--origin", "local"},
			[]string{"origin", "any or none"}},
		{"unknown conflict type", []string{"--source", src, "--target", dst, "--publication", "pub", "--conflict-resolution", "insert_exist=apply_remote"},
			[]string{"conflict_resolution", `unknown conflict type "insert_exist"`, "insert_exists"}},
		{"policy that does not apply", []string{"--source", src, "--target", dst, "--publication", "pub", "--conflict-resolution", "delete_missing=apply_remote"},
			[]string{"conflict_resolution", "apply_remote does not apply to delete_missing", "skip, error"}},
		{"policy without commit timestamps", []string{"--source", src, "--target", dst, "--publication", "pub_origin", "--slot", "s_lww", "--conflict-resolution", "update_origin_differs=last_update_wins"},
			[]string{"update_origin_differs=last_update_wins", "track_commit_timestamp is off on the target"}},
		{"policy for a table not published", []string{"--source", src, "--target", dst, "--publication", "pub_origin", "--slot", "s_notpub", "--conflict-resolution", "public.typed:insert_exists=skip"},
			[]string{"conflict_resolution names table public.typed", "does not publish"}},
		{"policies with detection off", []string{"--source", src, "--target", dst, "--publication", "pub", "--detect-conflicts", "off", "--conflict-resolution", "insert_exists=skip"},
			[]string{"conflict_resolution is set, but detect_conflicts is off"}},
		{"update_deleted with detection off", []string{"--source", src, "--target", dst, "--publication", "pub", "--detect-conflicts", "off", "--detect-update-deleted", "on"},
			[]string{"detect_update_deleted is on, but detect_conflicts is off"}},
		{"update_deleted on a table the target role does not own", []string{"--source", src, "--target", notOwner, "--publication", "pub_owned", "--slot", "s_owned", "--detect-update-deleted", "on"},
			[]string{"detect_update_deleted", "public.owned", "must own the table", "OWNER TO"}},
		{"wal_level not logical", []string{"--source", replica.DSN("postgres"), "--target", dst, "--publication", "pub"},
			replicaWant},
		{"no publication flag", []string{"--source", src, "--target", dst},
			[]string{"--publication"}},
		{"two_phase without prepared transactions on the target", []string{"--source", src, "--target", dst, "--publication", "pub_typed", "--slot", "s_2pc", "--two-phase", "on"},
			[]string{"two_phase", "max_prepared_transactions"}},
		{"bad setting", []string{"--source", src, "--target", dst, "--publication", "pub", "--batch-rows", "zero"},
			[]string{"batch_rows"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := runOnce(t, append([]string{"run"}, c.args...)...)
			if err == nil {
				t.Fatalf("exit 0, want an error; output:\n%s", out)
			}
			ee, ok := errors.AsType[*exec.ExitError](err)
			if !ok {
				t.Fatalf("did not exit by itself: %v", err)
			}
			// A server that cannot be reached may be reachable at the next
			// start (status 1); every other refusal would be met again
			// (status 3: a supervisor is not to restart on it).
			want := 3
			if strings.HasPrefix(c.name, "unreachable") {
				want = 1
			}
			if ee.ExitCode() != want {
				t.Errorf("exit status %d, want %d; output:\n%s", ee.ExitCode(), want, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "parapply: ") {
				t.Fatalf("last line is not the error: %q", last)
			}
			for _, w := range c.want {
				if !strings.Contains(last, w) {
					t.Errorf("error %q lacks %q", last, w)
				}
			}
			if strings.Contains(out, "password=") {
				t.Errorf("output shows a connection secret: %s", out)
			}
			// A failed start leaves no slot behind to hold WAL.
			var slots []string
			rows, err := e.pub.Query(context.Background(), `SELECT slot_name FROM pg_replication_slots`)
			if err == nil {
				slots, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil || len(slots) != 0 {
				t.Errorf("replication slots on the publisher after the failed start: %v (%v), want none", slots, err)
			}
		})
	}

	t.Run("slot in use", func(t *testing.T) {
		e.exec(e.pub, `CREATE PUBLICATION pub_items FOR TABLE items`)
		holder := e.runProcess(t, "--publication", "pub_items", "--slot", "busy")
		e.waitSlotExists(t, "busy", holder)
		defer holder.signal(syscall.SIGTERM)
		out, err := runOnce(t, "run", "--source", src, "--target", dst, "--publication", "pub_items", "--slot", "busy")
		// Refused by the publisher (the holder streams), or, when the
		// holder is still copying (its slot not yet streamed from), by
		// the slot's lock on the target, naming the holder.
		busy := strings.Contains(out, "slot busy is in use") || strings.Contains(out, "slot busy is held by another parapply pid")
		if err == nil || !busy || !strings.Contains(out, "another --slot") {
			t.Fatalf("want a slot-in-use error, got %v: %s", err, out)
		}
	})

	// A key the target already holds: the error names the source
	// transaction (xid and commit LSN), the table and the key.
	t.Run("key the target already holds", func(t *testing.T) {
		e.exec(e.pub, `CREATE TABLE dup (id int PRIMARY KEY, v text); CREATE PUBLICATION pub_dup FOR TABLE dup`)
		e.exec(e.sub, `CREATE TABLE dup (id int PRIMARY KEY, v text); INSERT INTO dup VALUES (5, 'on the target')`)
		e.exec(e.pub, `SELECT pg_create_logical_replication_slot('s_dup', 'pgoutput')`)
		tx, err := e.pub.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var xid int64
		if err := tx.QueryRow(context.Background(), `INSERT INTO dup VALUES (4, 'a'), (5, 'b') RETURNING txid_current()`).Scan(&xid); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		out, err := runOnce(t, "run", "--source", src, "--target", dst, "--publication", "pub_dup", "--slot", "s_dup", "--copy-data", "off")
		if err == nil {
			t.Fatalf("exit 0, want an error; output:\n%s", out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		last := lines[len(lines)-1]
		t.Logf("the stop's last line: %s", last)
		for _, w := range []string{fmt.Sprintf("source transaction %d (commit ", xid), `"public"."dup"`, `conflict insert_exists on public.dup, key {"id": "5"}`, "parapply skip --target '" + dst + "' --slot s_dup --lsn "} {
			if !strings.Contains(last, w) {
				t.Errorf("error %q lacks %q", last, w)
			}
		}
	})

	// A value the target column cannot take: the transaction is refused
	// whole, the error names table and column, and nothing of it is applied.
	t.Run("value the target cannot accept", func(t *testing.T) {
		e.exec(e.pub, `SELECT pg_create_logical_replication_slot('s_typed', 'pgoutput')`)
		e.exec(e.pub, `BEGIN; INSERT INTO typed VALUES (1, '10'), (2, 'twenty'); INSERT INTO typed VALUES (3, '30'); COMMIT`)
		out, err := runOnce(t, "run", "--source", src, "--target", dst, "--publication", "pub_typed", "--slot", "s_typed", "--copy-data", "off")
		if err == nil {
			t.Fatalf("exit 0, want an error; output:\n%s", out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		last := lines[len(lines)-1]
		for _, w := range []string{`"public"."typed"`, `column "v"`, "twenty"} {
			if !strings.Contains(last, w) {
				t.Errorf("error %q lacks %q", last, w)
			}
		}
		var n int
		if err := e.sub.QueryRow(context.Background(), "SELECT count(*) FROM typed").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("%d rows of the refused transaction were applied", n)
		}
	})

	// The same two mistakes in long insert runs, which go to the target by
	// COPY: the error still names the transaction, table, column or key.
	t.Run("long insert runs", func(t *testing.T) {
		e.exec(e.pub, `CREATE TABLE typed_long (id int PRIMARY KEY, v text); CREATE PUBLICATION pub_typed_long FOR TABLE typed_long`)
		e.exec(e.sub, `CREATE TABLE typed_long (id int PRIMARY KEY, v int)`)
		e.exec(e.pub, `SELECT pg_create_logical_replication_slot('s_typed_long', 'pgoutput')`)
		e.exec(e.pub, `INSERT INTO typed_long SELECT g, CASE WHEN g = 250 THEN 'twenty' ELSE g::text END FROM generate_series(1, 400) g`)
		e.exec(e.pub, `CREATE TABLE dup_long (id int PRIMARY KEY, v text); CREATE PUBLICATION pub_dup_long FOR TABLE dup_long`)
		e.exec(e.sub, `CREATE TABLE dup_long (id int PRIMARY KEY, v text); INSERT INTO dup_long VALUES (300, 'on the target')`)
		e.exec(e.pub, `SELECT pg_create_logical_replication_slot('s_dup_long', 'pgoutput')`)
		e.exec(e.pub, `INSERT INTO dup_long SELECT g, 'x' FROM generate_series(1, 400) g`)
		for _, c := range []struct {
			pub, table string
			want       []string
		}{
			{"typed_long", "typed_long", []string{`insert of 400 rows in "public"."typed_long"`, "column v", "twenty", "invalid input syntax"}},
			{"dup_long", "dup_long", []string{`insert of 400 rows in "public"."dup_long"`, `conflict insert_exists on public.dup_long, key {"id": "300"}`}},
		} {
			out, err := runOnce(t, "run", "--source", src, "--target", dst, "--publication", "pub_"+c.pub, "--slot", "s_"+c.pub, "--copy-data", "off")
			if err == nil {
				t.Fatalf("%s: exit 0, want an error; output:\n%s", c.pub, out)
			}
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			for _, w := range c.want {
				if !strings.Contains(last, w) {
					t.Errorf("error %q lacks %q", last, w)
				}
			}
			var n int
			if err := e.sub.QueryRow(context.Background(), "SELECT count(*) FROM "+c.table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if want := map[string]int{"typed_long": 0, "dup_long": 1}[c.table]; n != want {
				t.Fatalf("%s holds %d rows after the refused transaction, want %d", c.table, n, want)
			}
		}
	})
}
