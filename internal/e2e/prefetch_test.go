package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestPrefetch applies updates and deletes to a table larger than the
// target's shared_buffers with prefetch on, on one applier and on a pool of
// workers sharing one prefetcher: rows are read ahead, and the target ends
// equal to the publisher.
func TestPrefetch(t *testing.T) {
	for _, workers := range []int{0, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			e := newEnvSettings(t, `CREATE TABLE wide (id int PRIMARY KEY, n int, pad text)`, nil, map[string]string{"shared_buffers": "2MB"})
			e.both(`INSERT INTO wide SELECT g, 0, repeat('p', 200) FROM generate_series(1, 20000) g`)
			cfg := e.config("prefetch")
			cfg.Workers = workers
			cfg.Target.Prefetch = true
			r := e.start(cfg)
			e.exec(e.pub, `UPDATE wide SET n = n + 1 WHERE id % 3 = 0`)
			e.exec(e.pub, `DELETE FROM wide WHERE id % 7 = 0`)
			e.exec(e.pub, `UPDATE wide SET id = id + 100000 WHERE id % 11 = 0`)
			e.exec(e.pub, `BEGIN; UPDATE wide SET n = n + 5 WHERE id BETWEEN 1000 AND 3000; DELETE FROM wide WHERE id BETWEEN 2000 AND 2100; COMMIT`)
			e.waitCaughtUp(r)
			e.verify("public.wide")
			st := r.s.Status()
			if st.Prefetched == 0 {
				t.Fatalf("no row was read ahead (%d dropped)", st.PrefetchDropped)
			}
			t.Logf("prefetched %d rows, dropped %d", st.Prefetched, st.PrefetchDropped)
		})
	}
}

// TestPrefetchInsertProbes inserts into a table whose secondary index is
// larger than a quarter of the target's shared_buffers: the prefetcher
// looks up each new row's value in that index first (the leaf page the
// insert will write), on one applier and on workers; the target ends equal
// to the publisher.
func TestPrefetchInsertProbes(t *testing.T) {
	for _, workers := range []int{0, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			e := newEnvSettings(t, `CREATE TABLE ins (id int PRIMARY KEY, sk int, pad text); CREATE INDEX ins_sk ON ins (sk)`, nil, map[string]string{"shared_buffers": "2MB"})
			e.both(`INSERT INTO ins SELECT g, (g * 7919) % 60000, repeat('p', 200) FROM generate_series(1, 60000) g`)
			cfg := e.config("probes")
			cfg.Workers = workers
			cfg.Target.Prefetch = true
			r := e.start(cfg)
			e.exec(e.pub, `INSERT INTO ins SELECT g, (g::bigint * 104729) % 60000, 'new' FROM generate_series(60001, 66000) g`)
			e.exec(e.pub, `BEGIN; INSERT INTO ins SELECT g, NULL, 'null' FROM generate_series(66001, 66500) g; INSERT INTO ins (id) VALUES (70000); COMMIT`)
			e.waitCaughtUp(r)
			e.verify("public.ins")
			st := r.s.Status()
			t.Logf("looked up %d values ahead, dropped %d", st.Prefetched, st.PrefetchDropped)
			if st.Prefetched == 0 {
				t.Fatalf("no inserted value was looked up ahead (%d dropped)", st.PrefetchDropped)
			}
		})
	}
}

// TestPrefetchGrows applies a backlog of updates to a table larger than
// the target's shared_buffers with prefetch on, its reads delayed (every
// file read of the target) or not: the prefetcher, which starts with one
// connection, opens more while key sets wait for one and its sessions are
// seen waiting on reads, and keeps one when reads come from the operating
// system's cache; under slow reads, statements wait for their rows to be
// read ahead (and never for cached ones). The target ends equal to the
// publisher.
func TestPrefetchGrows(t *testing.T) {
	for _, delay := range []time.Duration{2 * time.Millisecond, 0} {
		t.Run(fmt.Sprintf("delay=%v", delay), func(t *testing.T) {
			const rows = 2000
			e := slowReadEnv(t, delay, rows)
			cfg := e.config("prefetch_grows")
			cfg.Target.Prefetch = true
			// Groups small enough that the backlog, short as it is, is
			// many round trips, most of them after the verdict on the
			// reads: in one group of all 3,000 updates (one round trip
			// of 2,000 distinct rows), whether its single statement
			// waited hung on whether the verdict came before it.
			cfg.Group.MaxChanges = 200
			txns := 3000
			if delay == 0 {
				txns = 30000 // a few seconds of applying
			}
			slowBacklog(e, cfg, rows, txns)
			r := e.start(cfg)
			e.waitCaughtUp(r)
			e.verify("public.wide")
			var conns int
			if err := e.sub.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = 'parapply test prefetch'`).Scan(&conns); err != nil {
				t.Fatal(err)
			}
			st := r.s.Status()
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d prefetch connections open; %d rows read ahead, %d dropped; statements waited %s for them", conns, st.Prefetched, st.PrefetchDropped, st.PrefetchWait)
			if delay > 0 && st.PrefetchWait == 0 {
				t.Errorf("no statement waited for its rows to be read ahead under slow reads")
			}
			if delay == 0 && st.PrefetchWait > 0 && !raceDetector {
				t.Errorf("statements waited %s for rows read from the operating system's cache", st.PrefetchWait)
			}
			if st.Prefetched == 0 {
				t.Errorf("no row was read ahead (%d dropped)", st.PrefetchDropped)
			}
			if delay > 0 && conns < 2 {
				t.Errorf("the prefetcher did not grow under slow reads (%d connections)", conns)
			}
			if delay == 0 && conns != 1 {
				if raceDetector {
					// The race detector overloads the CPU: a backend
					// descheduled inside a read of the cache shows as
					// waiting on it, and the premise (cached reads are
					// short) does not hold. CI runs this test again
					// without it, where it must hold.
					t.Logf("under the race detector: %d prefetch connections for cached reads (not asserted here)", conns)
				} else {
					t.Errorf("the prefetcher opened %d connections for reads from the operating system's cache, want 1", conns)
				}
			}
		})
	}
}
