package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The conflict-overhead workloads (update-deleted-conflict-detection.txt):
// what detecting update_deleted costs the target's own workload. The
// target runs a TPC-B-like load on tables of its own while the engine
// applies a steady stream of updates from the publisher; the cell's
// figure is the local load's TPS, next to the same run's with other
// detection modes:
//   - off: parapply as by default (conflict detection on, update_deleted
//     not told from update_missing);
//   - tombstones: detect_update_deleted = on (deletes on published tables
//     recorded by a trigger, pruned as the stream advances);
//   - retention-10s, retention-100s: an emulation of PostgreSQL 19's
//     retain_dead_tuples: a session on the target holds a snapshot open and
//     renews it every 10 s (100 s), as the conflict-detection slot's xmin
//     would, so that vacuum keeps the dead tuples of every table.
// The -delete variant adds to each local transaction a delete (and the
// same row's insert back) on a published table, where tombstones cost.

// Detection modes of the conflict-overhead workloads.
var detectionModes = []string{"off", "tombstones", "retention-10s", "retention-100s"}

// retentionEvery is how often mode renews its held snapshot (0: none).
func retentionEvery(mode string) time.Duration {
	switch mode {
	case "retention-10s":
		return 10 * time.Second
	case "retention-100s":
		return 100 * time.Second
	}
	return 0
}

func conflictOverhead(deletes bool) workload {
	doc := "the target's own TPC-B-like load (scale 10, 8 clients x 30 s, on tables it does not replicate) while the engine applies 200 transactions/s of 10-row updates: local TPS by detection mode (off, tombstones, retention-10s, retention-100s) and the apply's catch-up after the load"
	if deletes {
		doc = "conflict-overhead with each local transaction also deleting a row of a published table and inserting it back (deletes where tombstones are recorded)"
	}
	return workload{
		doc:    doc,
		method: methodLocal,
		schema: "CREATE TABLE foo (id int PRIMARY KEY, value double precision); CREATE TABLE churn (id int PRIMARY KEY, v int)",
		preload: func(scale float64) []string {
			n := scaled(100000, scale)
			return []string{fmt.Sprintf("INSERT INTO foo SELECT g, 0 FROM generate_series(1, %d) g; INSERT INTO churn SELECT g, g FROM generate_series(1, %d) g", n, n)}
		},
		tables:       []string{"foo", "churn"},
		localDeletes: deletes,
	}
}

// localLoad measures a conflict-overhead cell: the local load's TPS while
// the stream runs, then the catch-up once the publisher stops.
func (r *runEnv) localLoad(ctx context.Context, w workload, m *measurement, mode string) error {
	s := tpcbScale(r.o.scale)
	if _, err := r.sub.Exec(ctx, tpcbSchema); err != nil {
		return fmt.Errorf("local schema: %w", err)
	}
	for _, q := range append(tpcbPreload(s), "VACUUM ANALYZE", "CHECKPOINT") {
		if _, err := r.sub.Exec(ctx, q); err != nil {
			return fmt.Errorf("local preload: %w", err)
		}
	}
	if err := r.prime(ctx); err != nil {
		return err
	}
	rows := scaled(100000, r.o.scale)
	var wg sync.WaitGroup
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var streamErr, holdErr error
	var streamed int64
	wg.Add(1)
	go func() { defer wg.Done(); streamed, streamErr = stream(sctx, r.pubDSN, rows) }()
	if every := retentionEvery(mode); every > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); holdErr = holdSnapshot(sctx, r.subDSN, every) }()
	}
	d := seconds(30, r.o.scale)
	machine := cpuSnapshot(0) // the machine's counters only
	t0 := time.Now()
	txns, err := clients(ctx, r.subDSN, 8, d, func(ctx context.Context, c *pgx.Conn, rnd *rand.Rand) error {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		tpcbTxn(b, rnd, s)
		if w.localDeletes {
			// The same row back: the target ends equal to the publisher.
			id := 1 + rnd.IntN(rows)
			b.Queue("DELETE FROM churn WHERE id = $1", id)
			b.Queue("INSERT INTO churn VALUES ($1, $1) ON CONFLICT (id) DO NOTHING", id)
		}
		b.Queue("COMMIT")
		return c.SendBatch(ctx, b).Close()
	})
	elapsed := time.Since(t0).Seconds()
	c := cpuSnapshot(0)
	m.busy = (c.total - machine.total) / 100 / c.at.Sub(machine.at).Seconds()
	stop()
	wg.Wait()
	if err != nil {
		return fmt.Errorf("local load: %w", err)
	}
	if streamErr != nil {
		return fmt.Errorf("publisher stream: %w", streamErr)
	}
	if holdErr != nil {
		return fmt.Errorf("holding a snapshot: %w", holdErr)
	}
	m.localTPS, m.publisher, m.txns = float64(txns)/elapsed, elapsed, streamed
	t1 := time.Now()
	if err := r.mark(ctx); err != nil {
		return err
	}
	if err := r.waitMarker(ctx); err != nil {
		return err
	}
	m.catchup = time.Since(t1).Seconds()
	if n, err := r.conflicts(ctx); err == nil {
		m.conflicts = n
	}
	logf("local load (%s): %d transactions, %.0f TPS; publisher stream %d transactions; caught up %.2fs after the load", mode, txns, m.localTPS, streamed, m.catchup)
	m.rssMB = r.eng.stop()
	return nil
}

// stream writes on the publisher, until ctx ends, 200 transactions a
// second of 10-row updates of foo's rows (ids 1 to rows, in turn), on a
// connection of its own (the end of ctx may cut it).
func stream(ctx context.Context, dsn string, rows int) (int64, error) {
	pub, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer pub.Close(context.Background())
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	var n int64
	for id := 0; ; id = (id + 10) % (rows - 10) {
		select {
		case <-ctx.Done():
			return n, nil
		case <-t.C:
		}
		if _, err := pub.Exec(ctx, "UPDATE foo SET value = value + 1 WHERE id BETWEEN $1 AND $1 + 9", id+1); err != nil {
			if ctx.Err() != nil {
				return n, nil
			}
			return n, err
		}
		n++
	}
}

// holdSnapshot keeps a snapshot open on the target, renewed every every,
// until ctx ends: vacuum keeps every dead tuple younger than it.
func holdSnapshot(ctx context.Context, dsn string, every time.Duration) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	for {
		// Renewing: the old snapshot's end and the new one's start in
		// one round trip. (The end of ctx cuts the connection: no error.)
		if _, err := c.Exec(ctx, "COMMIT; BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pgbench_branches"); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(every):
		}
	}
}
