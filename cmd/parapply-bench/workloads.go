package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

var workloads = map[string]workload{
	"insert": {
		doc:    "1000 transactions of 1000 inserted rows (parallel-apply-benchmark.txt, case 1)",
		method: methodCatchup,
		schema: "CREATE TABLE foo (id int PRIMARY KEY, value double precision)",
		tables: []string{"foo"},
		write: func(ctx context.Context, r *runEnv) (int64, error) {
			n := scaled(1000, r.o.scale)
			for i := 0; i < n; i++ {
				if _, err := r.pub.Exec(ctx, "INSERT INTO foo SELECT g, random() FROM generate_series($1::int, $2::int) g", i*1000+1, i*1000+1000); err != nil {
					return int64(i), err
				}
			}
			return int64(n), nil
		},
	},
	"update": {
		doc:     "1M rows, 1000 transactions of 1000 updates on different rows (case 2)",
		method:  methodCatchup,
		schema:  "CREATE TABLE foo (id int PRIMARY KEY, value double precision)",
		preload: fooRows(1000),
		tables:  []string{"foo"},
		write:   rangeUpdates(1000),
	},
	"update-tct": {
		doc:         "update with track_commit_timestamp on the subscriber, the preloaded rows replicated there by the engine (its own, as after an initial copy): conflict detection by origin with no conflict to find",
		method:      methodCatchup,
		schema:      "CREATE TABLE foo (id int PRIMARY KEY, value double precision)",
		preload:     fooRows(1000),
		replicated:  true,
		tables:      []string{"foo"},
		subSettings: map[string]string{"track_commit_timestamp": "on"},
		write:       rangeUpdates(1000),
	},
	"update-full": {
		doc:     "no key, REPLICA IDENTITY FULL: 40k rows, 200 transactions of 200 updates",
		method:  methodCatchup,
		schema:  "CREATE TABLE foo (id int, value double precision); ALTER TABLE foo REPLICA IDENTITY FULL",
		preload: fooRows(200),
		tables:  []string{"foo"},
		write:   rangeUpdates(200),
	},
	"point-update": {
		doc:    "100k rows (fillfactor 10, 1 kB filler), 10 clients x 20 s of single-row updates (logical-replication-prefetch.txt, scenario 1)",
		method: methodCatchup,
		schema: "CREATE TABLE t (pk integer PRIMARY KEY, counter integer, filler text DEFAULT repeat('x', 1000)) WITH (fillfactor = 10)",
		preload: func(scale float64) []string {
			return []string{fmt.Sprintf("INSERT INTO t (pk, counter) SELECT g, 0 FROM generate_series(1, %d) g", scaled(100000, scale))}
		},
		tables: []string{"t"},
		write:  pointUpdates(20),
	},
	"secondary-insert": secondaryInsert(1000000, "1M rows with an index on sk, 10 clients x 20 s of single-row inserts (scenario 2, at the size measured in WORKLOADS.md)"),
	"tpcb": {
		doc:         "pgbench's TPC-B-like transaction, scale 10, 16 clients x 30 s, publisher synchronous_commit = off, subscriber live (bdr-3.7-parallel-writers.txt)",
		method:      methodLive,
		pubSettings: map[string]string{"synchronous_commit": "off"},
		schema:      tpcbSchema,
		preload:     func(scale float64) []string { return tpcbPreload(tpcbScale(scale)) },
		tables:      []string{"pgbench_branches", "pgbench_tellers", "pgbench_accounts", "pgbench_history"},
		write: func(ctx context.Context, r *runEnv) (int64, error) {
			s := tpcbScale(r.o.scale)
			return clients(ctx, r.pubDSN, 16, seconds(30, r.o.scale), func(ctx context.Context, c *pgx.Conn, rnd *rand.Rand) error {
				b := &pgx.Batch{}
				b.Queue("BEGIN")
				tpcbTxn(b, rnd, s)
				b.Queue("COMMIT")
				return c.SendBatch(ctx, b).Close()
			})
		},
	},
	"conflict-overhead":        conflictOverhead(false),
	"conflict-overhead-delete": conflictOverhead(true),
	"big-transaction": {
		doc:    "one transaction of 1M inserted rows: delay from its commit to its visibility on the subscriber; then publisher TPS with the subscriber as synchronous standby under ~36 kB-WAL transactions (physical-unflushed-wal.txt's wal_test.sql), 8 clients x 20 s",
		method: methodBigTxn,
		schema: "CREATE TABLE big (id int PRIMARY KEY, v text); " + walBloatTables,
		tables: append([]string{"big"}, walBloatNames()...),
	},
	"initial-sync": {
		doc:    "one 5M-row table and three 1M-row tables (816 MB at scale 1) on the publisher, an empty subscriber: time until every table is in sync",
		method: methodInitial,
		schema: "CREATE TABLE big (id int PRIMARY KEY, a int, b text, c timestamptz); CREATE TABLE m1 (id int PRIMARY KEY, a int, b text); CREATE TABLE m2 (LIKE m1 INCLUDING ALL); CREATE TABLE m3 (LIKE m1 INCLUDING ALL)",
		preload: func(scale float64) []string {
			big, m := scaled(5000000, scale), scaled(1000000, scale)
			return []string{
				fmt.Sprintf("INSERT INTO big SELECT g, g %% 1000, md5(g::text) || md5((g+1)::text), now() FROM generate_series(1, %d) g", big),
				fmt.Sprintf("INSERT INTO m1 SELECT g, g %% 7, repeat(md5(g::text), 2) FROM generate_series(1, %d) g", m),
				fmt.Sprintf("INSERT INTO m2 SELECT g, g %% 7, repeat(md5(g::text), 2) FROM generate_series(1, %d) g", m),
				fmt.Sprintf("INSERT INTO m3 SELECT g, g %% 7, repeat(md5(g::text), 2) FROM generate_series(1, %d) g", m),
			}
		},
		tables: []string{"big", "m1", "m2", "m3"},
	},
}

const walBloatCount = 10

var walBloatTables = func() string {
	s := ""
	for i := 1; i <= walBloatCount; i++ {
		s += fmt.Sprintf("CREATE TABLE wal_bloat_%d (id bigserial PRIMARY KEY, data text); ", i)
	}
	return s
}()

func walBloatNames() []string {
	var n []string
	for i := 1; i <= walBloatCount; i++ {
		n = append(n, fmt.Sprintf("wal_bloat_%d", i))
	}
	return n
}

func fooRows(perTxn int) func(float64) []string {
	return func(scale float64) []string {
		return []string{fmt.Sprintf("INSERT INTO foo SELECT g, 0 FROM generate_series(1, %d) g", scaled(perTxn, scale)*perTxn)}
	}
}

// rangeUpdates writes n transactions of n updates, each on different rows.
func rangeUpdates(n int) func(context.Context, *runEnv) (int64, error) {
	return func(ctx context.Context, r *runEnv) (int64, error) {
		txns := scaled(n, r.o.scale)
		for i := 0; i < txns; i++ {
			if _, err := r.pub.Exec(ctx, "UPDATE foo SET value = value + 1 WHERE id BETWEEN $1 AND $2", i*n+1, i*n+n); err != nil {
				return int64(i), err
			}
		}
		return int64(txns), nil
	}
}

func tpcbScale(scale float64) int { return scaled(10, scale) }

// tpcbSchema is pgbench's tables (pgbench_history with a key, which a
// publication needs for its rows to be told apart).
const tpcbSchema = `CREATE TABLE pgbench_branches (bid int PRIMARY KEY, bbalance int, filler char(88));
	CREATE TABLE pgbench_tellers (tid int PRIMARY KEY, bid int, tbalance int, filler char(84));
	CREATE TABLE pgbench_accounts (aid int PRIMARY KEY, bid int, abalance int, filler char(84)) WITH (fillfactor = 100);
	CREATE TABLE pgbench_history (hid bigserial PRIMARY KEY, tid int, bid int, aid int, delta int, mtime timestamp, filler char(22))`

// tpcbPreload fills pgbench's tables at scale s.
func tpcbPreload(s int) []string {
	return []string{
		fmt.Sprintf("INSERT INTO pgbench_branches SELECT g, 0 FROM generate_series(1, %d) g", s),
		fmt.Sprintf("INSERT INTO pgbench_tellers SELECT g, (g - 1) / 10 + 1, 0 FROM generate_series(1, %d) g", 10*s),
		fmt.Sprintf("INSERT INTO pgbench_accounts SELECT g, (g - 1) / 100000 + 1, 0, '' FROM generate_series(1, %d) g", 100000*s),
	}
}

// tpcbTxn queues the statements of pgbench's TPC-B-like transaction at
// scale s (the caller begins and commits it).
func tpcbTxn(b *pgx.Batch, rnd *rand.Rand, s int) {
	aid, bid, tid, delta := 1+rnd.IntN(100000*s), 1+rnd.IntN(s), 1+rnd.IntN(10*s), rnd.IntN(10001)-5000
	b.Queue("UPDATE pgbench_accounts SET abalance = abalance + $1 WHERE aid = $2", delta, aid)
	b.Queue("SELECT abalance FROM pgbench_accounts WHERE aid = $1", aid)
	b.Queue("UPDATE pgbench_tellers SET tbalance = tbalance + $1 WHERE tid = $2", delta, tid)
	b.Queue("UPDATE pgbench_branches SET bbalance = bbalance + $1 WHERE bid = $2", delta, bid)
	b.Queue("INSERT INTO pgbench_history (tid, bid, aid, delta, mtime) VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)", tid, bid, aid, delta)
}

func scaled(n int, scale float64) int {
	v := int(float64(n)*scale + 0.5)
	if v < 1 {
		v = 1
	}
	return v
}

func seconds(s float64, scale float64) time.Duration {
	d := time.Duration(s * scale * float64(time.Second))
	return max(d, time.Second)
}

// clients runs fn in n connections until d has passed; each call is one
// transaction. It returns the transactions committed.
func clients(ctx context.Context, dsn string, n int, d time.Duration, fn func(context.Context, *pgx.Conn, *rand.Rand) error) (int64, error) {
	return runClients(ctx, dsn, n, d, 0, fn)
}

// clientsFixed is clients with a fixed backlog instead of a duration: each
// of n clients makes each transactions, its random numbers seeded by its
// number, so that every engine of a run gets the same transactions.
func clientsFixed(ctx context.Context, dsn string, n, each int, fn func(context.Context, *pgx.Conn, *rand.Rand) error) (int64, error) {
	return runClients(ctx, dsn, n, 0, each, fn)
}

func runClients(ctx context.Context, dsn string, n int, d time.Duration, each int, fn func(context.Context, *pgx.Conn, *rand.Rand) error) (int64, error) {
	var count atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	deadline := time.Now().Add(d)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := pgx.Connect(ctx, dsn)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close(context.Background())
			rnd := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
			if each > 0 {
				rnd = rand.New(rand.NewPCG(uint64(i), 16))
			}
			for done := 0; (each > 0 && done < each || each == 0 && time.Now().Before(deadline)) && ctx.Err() == nil; done++ {
				if err := fn(ctx, c, rnd); err != nil {
					errs <- err
					return
				}
				count.Add(1)
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	return count.Load(), <-errs
}

func workloadNames() []string {
	var names []string
	for n := range workloads {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// pointUpdates is point-update's writer: 10 clients updating random rows
// for secs seconds (scaled).
func pointUpdates(secs float64) func(ctx context.Context, r *runEnv) (int64, error) {
	return func(ctx context.Context, r *runEnv) (int64, error) {
		rows := scaled(100000, r.o.scale)
		return clients(ctx, r.pubDSN, 10, seconds(secs, r.o.scale), func(ctx context.Context, c *pgx.Conn, rnd *rand.Rand) error {
			_, err := c.Exec(ctx, "UPDATE t SET counter = counter + 1 WHERE pk = $1", 1+rnd.IntN(rows))
			return err
		})
	}
}

// The slow-read workloads (WORKLOADS.md): point-update and
// secondary-insert with every file read of the subscriber server delayed by
// 0.1 ms, as on a network-attached cloud disk, with a buffer cache smaller
// than the data (shared_buffers 128MB). The apply then waits on reads, not
// on the CPU: where more connections must pay, even on two cores.
func init() {
	slow := func(base, doc string) workload {
		w := workloads[base]
		w.doc = doc
		w.readDelay = 100 * time.Microsecond
		w.subSettings = map[string]string{"shared_buffers": "128MB"}
		return w
	}
	w := workloads["update-tct"]
	w.doc = "update-tct, with one row in ten changed on the subscriber by a local session before the publisher's updates reach it: update_origin_differs conflicts, resolved by applying the remote change (both engines' default)"
	w.local = []string{"UPDATE foo SET value = -1 WHERE id % 10 = 0"}
	workloads["conflicts"] = w
	workloads["slow-read"] = slow("point-update", "point-update, 10 clients x 15,000 transactions (the same backlog for every engine), with every file read of the subscriber delayed by 0.1 ms, shared_buffers 128MB (logical-replication-prefetch.txt, the slow-disk case)")
	w = workloads["slow-read"]
	w.write = func(ctx context.Context, r *runEnv) (int64, error) {
		rows := scaled(100000, r.o.scale)
		return clientsFixed(ctx, r.pubDSN, 10, scaled(15000, r.o.scale), func(ctx context.Context, c *pgx.Conn, rnd *rand.Rand) error {
			_, err := c.Exec(ctx, "UPDATE t SET counter = counter + 1 WHERE pk = $1", 1+rnd.IntN(rows))
			return err
		})
	}
	workloads["slow-read"] = w
	workloads["slow-read-cold"] = slowReadCold(slow)
	workloads["slow-read-insert"] = slow("secondary-insert", "secondary-insert at the seed's 10M rows (a 210 MB index on sk, so a new row's leaf page is rarely in the buffer cache), 10 clients x 15,000 single-row inserts (the same backlog for every engine), with every file read of the subscriber delayed by 0.1 ms, shared_buffers 128MB (logical-replication-prefetch.txt, scenario 2 on a slow disk)")
	w = workloads["slow-read-insert"]
	// The index is built after the rows are in: 10M inserts into an index
	// larger than shared_buffers would each read a leaf from the slow disk.
	w.schema = strings.Replace(w.schema, "; CREATE INDEX ON t (sk)", "", 1)
	w.preload = func(scale float64) []string {
		return append(secondaryInsert(10000000, "").preload(scale), "CREATE INDEX ON t (sk)")
	}
	w.write = func(ctx context.Context, r *runEnv) (int64, error) {
		n := scaled(10000000, r.o.scale)
		return clientsFixed(ctx, r.pubDSN, 10, scaled(15000, r.o.scale), func(ctx context.Context, c *pgx.Conn, rnd *rand.Rand) error {
			_, err := c.Exec(ctx, "INSERT INTO t (sk) VALUES ($1)", rnd.IntN(n))
			return err
		})
	}
	workloads["slow-read-insert"] = w
	workloads["initial-sync-indexed"] = initialSyncIndexed()
}

// initialSyncIndexed is initial-sync plus a table as DBAs' tables are: a
// key and two secondary indexes (an int and a text column), 220 MB of
// rows at scale 1, so that building indexes weighs in the copy.
func initialSyncIndexed() workload {
	w := workloads["initial-sync"]
	w.doc = "initial-sync plus a 1.6M-row table (220 MB at scale 1) with two secondary indexes (int and text): time until every table is in sync, indexes built"
	w.schema += "; CREATE TABLE ix (id bigint PRIMARY KEY, k1 int, k2 text, payload text); CREATE INDEX ix_k1 ON ix (k1); CREATE INDEX ix_k2 ON ix (k2)"
	base := w.preload
	w.preload = func(scale float64) []string {
		// k1 and k2 in random order against id: each index is built from
		// scattered keys, as for a real table's secondary columns.
		return append(base(scale), fmt.Sprintf("INSERT INTO ix SELECT g, hashtext(g::text), md5((g * 7)::text), repeat(md5(g::text), 2) FROM generate_series(1, %d) g", scaled(1600000, scale)))
	}
	w.tables = append(slices.Clone(w.tables), "ix")
	return w
}

// slowReadCold is slow-read on a backlog of another shape: the table at
// 2.5 times the rows (2 GB at scale 1), 20 clients, and a cold cache: the
// subscriber server restarts, and the operating system's cache is
// dropped, between the write and the timed catch-up (workload.cold).
func slowReadCold(slow func(base, doc string) workload) workload {
	const rows, clients, each = 250000, 20, 10000
	w := slow("point-update", fmt.Sprintf("point-update at %d rows, %d clients x %d transactions (the same backlog for every engine), with every file read of the subscriber delayed by 0.1 ms, shared_buffers 128MB, and the subscriber's caches cold when the catch-up starts", rows, clients, each))
	w.preload = func(scale float64) []string {
		return []string{fmt.Sprintf("INSERT INTO t (pk, counter) SELECT g, 0 FROM generate_series(1, %d) g", scaled(rows, scale))}
	}
	w.cold = true
	w.write = func(ctx context.Context, r *runEnv) (int64, error) {
		n := scaled(rows, r.o.scale)
		return clientsFixed(ctx, r.pubDSN, clients, scaled(each, r.o.scale), func(ctx context.Context, c *pgx.Conn, rnd *rand.Rand) error {
			_, err := c.Exec(ctx, "UPDATE t SET counter = counter + 1 WHERE pk = $1", 1+rnd.IntN(n))
			return err
		})
	}
	return w
}

// secondaryInsert is scenario 2 of logical-replication-prefetch.txt: rows
// preloaded with an index on sk, then 10 clients x 20 s of single-row
// inserts with random sk.
func secondaryInsert(rows int, doc string) workload {
	return workload{
		doc:    doc,
		method: methodCatchup,
		schema: "CREATE TABLE t (pk serial PRIMARY KEY, sk integer, counter integer DEFAULT 0); CREATE INDEX ON t (sk)",
		preload: func(scale float64) []string {
			n := scaled(rows, scale)
			return []string{
				// Deterministic, so publisher and subscriber start identical.
				fmt.Sprintf("INSERT INTO t (sk) SELECT (hashtext(g::text) & 2147483647) %% %d FROM generate_series(1, %d) g", n, n),
			}
		},
		tables: []string{"t"},
		write: func(ctx context.Context, r *runEnv) (int64, error) {
			n := scaled(rows, r.o.scale)
			return clients(ctx, r.pubDSN, 10, seconds(20, r.o.scale), func(ctx context.Context, c *pgx.Conn, rnd *rand.Rand) error {
				_, err := c.Exec(ctx, "INSERT INTO t (sk) VALUES ($1)", rnd.IntN(n))
				return err
			})
		},
	}
}
