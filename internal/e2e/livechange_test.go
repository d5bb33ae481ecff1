package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestTargetChangesMidRun changes the target's tables while parapply
// applies a load of updates: a BEFORE UPDATE trigger enabled for
// replicated changes (ENABLE REPLICA) that suppresses the changes of
// every seventh row, a unique index, a column with a default. parapply
// must read the target's description again and go on: never stop, no
// conflict and no missing row counted for the changes the trigger
// suppressed, those rows left as they were when the trigger came, every
// other row the publisher's. At workers 0 and 4, values in binary and in
// text, with conflict detection on and off.
func TestTargetChangesMidRun(t *testing.T) {
	for _, c := range []struct {
		workers        int
		binary, detect bool
	}{
		{0, true, true}, {0, false, true}, {4, true, true}, {4, false, true},
		// Without conflict detection a statement's rows not found are
		// counted missing: not those a trigger suppressed.
		{4, true, false},
	} {
		t.Run(fmt.Sprintf("workers=%d/binary=%v/detect_conflicts=%v", c.workers, c.binary, c.detect), func(t *testing.T) {
			testTargetChangesMidRun(t, c.workers, c.binary, c.detect)
		})
	}
}

func testTargetChangesMidRun(t *testing.T, workers int, binary, detect bool) {
	e := newEnv(t, `CREATE TABLE items (id int PRIMARY KEY, v int NOT NULL, u int NOT NULL)`)
	ctx := context.Background()
	cfg := e.config("live")
	cfg.Workers, cfg.AutoWorkers, cfg.Binary, cfg.DetectConflicts = workers, false, binary, detect
	// As parapply runs by default (10s and 5min): a DDL on the target
	// waits for a worker's transaction held open until an earlier one
	// commits, which waits behind the DDL; lock_timeout ends the wait in
	// a retry, or a new run from the target's record.
	cfg.Target.LockTimeout, cfg.ReconnectTimeout = "1s", time.Minute
	r := e.start(cfg)
	const rows = 210
	e.exec(e.pub, fmt.Sprintf(`INSERT INTO items SELECT g, 0, g FROM generate_series(1, %d) g`, rows))
	e.waitCaughtUp(r)

	// The load: single-row and multi-row updates, some moving u (kept
	// distinct: id + 1000 k), from one writer on the publisher.
	s := seed(t)
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var writeErr error
	var writes int
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(s, 1))
		c, err := pgx.Connect(ctx, e.pair.Publisher.DSN("postgres"))
		if err != nil {
			writeErr = err
			return
		}
		defer c.Close(ctx)
		for wctx.Err() == nil {
			var q string
			switch rng.IntN(4) {
			case 0:
				q = fmt.Sprintf(`UPDATE items SET v = v + 1 WHERE id %% 10 = %d`, rng.IntN(10))
			case 1:
				q = fmt.Sprintf(`UPDATE items SET u = u + 1000, v = v + 1 WHERE id = %d`, 1+rng.IntN(rows))
			default:
				q = fmt.Sprintf(`UPDATE items SET v = v + 1 WHERE id IN (%d, %d)`, 1+rng.IntN(rows), 1+rng.IntN(rows))
			}
			if _, err := c.Exec(ctx, q); err != nil {
				writeErr = err
				return
			}
			writes++
			time.Sleep(2 * time.Millisecond)
		}
	}()
	pause := func() {
		select {
		case err := <-r.done:
			r.done <- err
			stop()
			wg.Wait()
			t.Fatalf("parapply stopped while the target changed: %v", err)
		case <-time.After(400 * time.Millisecond):
		}
	}

	pause()
	// The trigger, and in the same transaction (which holds the table's
	// lock from ALTER TABLE on: no change of parapply's in between) what
	// the rows it suppresses hold when it comes.
	e.exec(e.sub, `BEGIN;
		CREATE FUNCTION skip_sevenths() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.id % 7 = 0 THEN
				RETURN NULL;
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER skip_sevenths BEFORE UPDATE ON items FOR EACH ROW EXECUTE FUNCTION skip_sevenths();
		ALTER TABLE items ENABLE REPLICA TRIGGER skip_sevenths;
		CREATE TABLE frozen AS SELECT id, v, u FROM items WHERE id % 7 = 0;
		COMMIT`)
	pause()
	e.exec(e.sub, `CREATE UNIQUE INDEX items_u ON items (u)`)
	pause()
	e.exec(e.sub, `ALTER TABLE items ADD COLUMN extra text NOT NULL DEFAULT 'target'`)
	pause()
	stop()
	wg.Wait()
	if writeErr != nil {
		t.Fatalf("the publisher's writer: %v", writeErr)
	}
	t.Logf("%d transactions written on the publisher", writes)
	e.waitCaughtUp(r)

	// The rows the trigger suppressed: as they were when it came, and
	// some were changed on the publisher since.
	var frozen, unchanged int
	if err := e.sub.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE (i.v, i.u) = (f.v, f.u)) FROM frozen f LEFT JOIN items i USING (id)`).Scan(&frozen, &unchanged); err != nil {
		t.Fatal(err)
	}
	if frozen != rows/7 || unchanged != frozen {
		t.Fatalf("%d of the %d rows the trigger suppresses are as they were when it came, want all %d", unchanged, frozen, rows/7)
	}
	pubRows := func(where string) map[int][2]int {
		t.Helper()
		out := map[int][2]int{}
		rs, err := e.pub.Query(ctx, `SELECT id, v, u FROM items `+where)
		if err != nil {
			t.Fatal(err)
		}
		for rs.Next() {
			var id, v, u int
			if err := rs.Scan(&id, &v, &u); err != nil {
				t.Fatal(err)
			}
			out[id] = [2]int{v, u}
		}
		if rs.Err() != nil {
			t.Fatal(rs.Err())
		}
		return out
	}
	moved := 0
	sevenths := pubRows(`WHERE id % 7 = 0`)
	rs, err := e.sub.Query(ctx, `SELECT id, v, u FROM frozen`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var id, v, u int
		if err := rs.Scan(&id, &v, &u); err != nil {
			t.Fatal(err)
		}
		if sevenths[id] != [2]int{v, u} {
			moved++
		}
	}
	if rs.Err() != nil {
		t.Fatal(rs.Err())
	}
	if moved == 0 {
		t.Fatalf("no row the trigger suppresses changed on the publisher after it came: the test tested nothing")
	}
	// Every other row: the publisher's, and the new column's default.
	want := pubRows(`WHERE id % 7 <> 0`)
	got := map[int][2]int{}
	rs, err = e.sub.Query(ctx, `SELECT id, v, u, extra FROM items WHERE id % 7 <> 0`)
	if err != nil {
		t.Fatal(err)
	}
	for rs.Next() {
		var id, v, u int
		var extra string
		if err := rs.Scan(&id, &v, &u, &extra); err != nil {
			t.Fatal(err)
		}
		if extra != "target" {
			t.Fatalf("row %d: extra = %q, want the target's default", id, extra)
		}
		got[id] = [2]int{v, u}
	}
	if rs.Err() != nil {
		t.Fatal(rs.Err())
	}
	if len(got) != len(want) {
		t.Fatalf("the target holds %d rows beside those the trigger suppresses, the publisher %d", len(got), len(want))
	}
	for id, w := range want {
		if got[id] != w {
			t.Fatalf("row %d: (v, u) = %v on the target, %v on the publisher", id, got[id], w)
		}
	}
	st := r.s.Status()
	var logged int
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM parapply.conflicts`).Scan(&logged); err != nil {
		t.Fatal(err)
	}
	t.Logf("runs started again after a fault, by cause: %v", st.Reconnects)
	if st.Conflicts != 0 || st.Missing != 0 || logged != 0 {
		t.Fatalf("%d conflicts, %d rows counted missing, %d rows in parapply.conflicts: a change a trigger suppressed is none of these", st.Conflicts, st.Missing, logged)
	}
	if err := r.stop(); err != nil {
		t.Fatalf("parapply ended with %v", err)
	}
}
