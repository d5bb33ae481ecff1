package e2e

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/subscriber"
)

// TestReplicationOrigins: every target session that commits for parapply
// (the copy workers, the reader, the workers, the sessions of streamed
// transactions) does so under one of parapply's replication origins, so
// that with track_commit_timestamp on the target tells the rows parapply
// wrote from its own, and a subscription downstream of the target with
// origin = none receives the target's own changes but none of parapply's.
func TestReplicationOrigins(t *testing.T) {
	for _, workers := range []int{0, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			sub := maps.Clone(fast)
			sub["track_commit_timestamp"] = "on"
			sub["logical_decoding_work_mem"] = "64kB"
			e := newEnvSettings(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`, fast, sub)
			ctx := context.Background()
			e.exec(e.pub, `INSERT INTO t SELECT g, 'copied' FROM generate_series(1, 1000) g`)

			// Downstream of the target: a database on the publisher's
			// server subscribing to the target's table with origin = none
			// (PostgreSQL 16 and later).
			downstream := e.pair.Subscriber.Version >= 16
			var down *pgx.Conn
			if downstream {
				e.exec(e.sub, `CREATE PUBLICATION down FOR TABLE t`)
				e.exec(e.pub, `CREATE DATABASE down`)
				var err error
				if down, err = pgx.Connect(ctx, e.pair.Publisher.DSN("down")); err != nil {
					t.Fatal(err)
				}
				defer down.Close(ctx)
				e.exec(down, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
				e.exec(down, fmt.Sprintf(`CREATE SUBSCRIPTION down CONNECTION '%s' PUBLICATION down WITH (origin = none, copy_data = false)`, e.pair.Subscriber.DSN("postgres")))
				t.Cleanup(func() {
					c, err := pgx.Connect(context.Background(), e.pair.Publisher.DSN("down"))
					if err == nil {
						_, _ = c.Exec(context.Background(), `DROP SUBSCRIPTION down`)
						c.Close(context.Background())
					}
				})
			}

			cfg := e.config("orig")
			cfg.Workers, cfg.AutoWorkers = workers, false
			cfg.CopyData, cfg.CopyWorkers = true, 2
			cfg.Source.Streaming, cfg.Source.DecodingWorkMem = true, "64kB"
			r := e.start(cfg)
			for i := 0; i < 200; i++ {
				e.exec(e.pub, `UPDATE t SET v = 'updated' WHERE id = $1`, i*5+1)
			}
			e.exec(e.pub, `INSERT INTO t SELECT g, repeat('s', 200) FROM generate_series(1001, 6000) g`) // streamed
			e.exec(e.pub, `DELETE FROM t WHERE id % 7 = 0`)
			e.waitCaughtUp(r)
			e.verify("t")
			// A change of the target's own.
			e.exec(e.sub, `INSERT INTO t VALUES (-1, 'local')`)

			// Who last wrote each row, by its commit's origin.
			var replicated, local, other int
			var origins []string
			err := e.sub.QueryRow(ctx, `SELECT count(*) FILTER (WHERE o.roident <> 0 AND r.roname LIKE 'parapply\_orig%'),
					count(*) FILTER (WHERE o.roident = 0),
					count(*) FILTER (WHERE o.roident <> 0 AND r.roname NOT LIKE 'parapply\_orig%'),
					coalesce(array_agg(DISTINCT r.roname) FILTER (WHERE r.roname IS NOT NULL), '{}')
				FROM t, pg_xact_commit_timestamp_origin(t.xmin) o LEFT JOIN pg_replication_origin r ON r.roident = o.roident`).Scan(&replicated, &local, &other, &origins)
			if err != nil {
				t.Fatal(err)
			}
			var rows int
			if err := e.pub.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			t.Logf("rows by origin: %d parapply's (%v), %d local, %d other", replicated, origins, local, other)
			if replicated != rows || local != 1 || other != 0 {
				t.Errorf("rows whose last commit is parapply's: %d of the publisher's %d; the target's own: %d (want 1); other origins: %d", replicated, rows, local, other)
			}
			want := []string{"parapply_orig", "parapply_orig_s1"}
			if workers > 0 {
				want = []string{"parapply_orig_s1", "parapply_orig_w"}
			}
			for _, w := range want {
				if !strings.Contains(strings.Join(origins, " "), w) {
					t.Errorf("no row last written under an origin named like %s (origins: %v)", w, origins)
				}
			}
			// The origins of the sessions that applied changes record the
			// source positions they applied (the copy's have none: a copy
			// is of a snapshot).
			var behind []string
			if err := e.sub.QueryRow(ctx, `SELECT coalesce(array_agg(external_id), '{}') FROM pg_replication_origin_status
				WHERE external_id = ANY($1) AND external_id NOT LIKE '%\_c_' AND (remote_lsn IS NULL OR remote_lsn = '0/0')`, origins).Scan(&behind); err != nil {
				t.Fatal(err)
			}
			if len(behind) != 0 {
				t.Errorf("origins of parapply's that wrote rows but record no source position: %v", behind)
			}
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}

			if !downstream {
				t.Logf("PostgreSQL %d: no downstream subscription with origin = none (16 and later)", e.pair.Subscriber.Version)
				return
			}
			// The downstream subscription gets the target's own rows, and
			// none of parapply's: give it the time it took for those.
			arrives := func(id int) {
				t.Helper()
				for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
					var n int
					if err := down.QueryRow(ctx, `SELECT count(*) FROM t WHERE id = $1`, id).Scan(&n); err != nil {
						t.Fatal(err)
					}
					if n == 1 {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("the downstream subscription did not receive the target's own row %d within 30s", id)
					}
				}
			}
			arrives(-1)
			e.exec(e.sub, `INSERT INTO t VALUES (-2, 'local, last')`)
			arrives(-2)
			var n int
			if err := down.QueryRow(ctx, `SELECT count(*) FROM t WHERE id > 0`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("the downstream subscription (origin = none) received %d rows parapply applied; want none", n)
			}
		})
	}
}

// TestOriginNone: with origin = none, parapply receives only the changes
// made on the publisher itself, not those replicated to it (here, written
// under a replication origin, as an apply worker's are); with any (the
// default) it receives both. On PostgreSQL 15 it refuses to start, naming
// the setting.
func TestOriginNone(t *testing.T) {
	e := newEnv(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	ctx := context.Background()
	cfg := e.config("onone")
	cfg.Source.Origin = source.OriginNone
	if e.pair.Publisher.Version < 16 {
		err := runUntilStopped(cfg)
		if err == nil || !strings.Contains(err.Error(), "origin = none needs PostgreSQL 16") {
			t.Fatalf("origin = none on PostgreSQL %d: %v, want an error naming the setting", e.pair.Publisher.Version, err)
		}
		t.Logf("PostgreSQL %d: %v", e.pair.Publisher.Version, err)
		return
	}
	r := e.start(cfg)
	replicated, err := pgx.Connect(ctx, e.pair.Publisher.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer replicated.Close(ctx)
	e.exec(replicated, `SELECT pg_replication_origin_create('elsewhere')`)
	e.exec(replicated, `SELECT pg_replication_origin_session_setup('elsewhere')`)
	e.exec(replicated, `INSERT INTO t VALUES (1, 'replicated to the publisher')`)
	e.exec(e.pub, `INSERT INTO t VALUES (2, 'made on the publisher')`)
	e.exec(replicated, `UPDATE t SET v = 'made here, updated by a replicated change' WHERE id = 2`)
	e.exec(e.pub, `INSERT INTO t VALUES (3, 'made on the publisher')`)
	e.waitCaughtUp(r)
	got := map[int]string{}
	rows, _ := e.sub.Query(ctx, `SELECT id, v FROM t`)
	var id int
	var v string
	if _, err := pgx.ForEachRow(rows, []any{&id, &v}, func() error { got[id] = v; return nil }); err != nil {
		t.Fatal(err)
	}
	want := map[int]string{2: "made on the publisher", 3: "made on the publisher"}
	if !maps.Equal(got, want) {
		t.Errorf("target with origin = none: %v, want %v", got, want)
	}
	_ = r.stop()

	// The same stream with origin = any, from the start.
	e.exec(e.sub, `TRUNCATE t`)
	cfg = e.config("oany")
	cfg.CopyData = false
	cfg.SharedTables = true // t was slot onone's
	e.exec(e.pub, `SELECT pg_create_logical_replication_slot('oany', 'pgoutput')`)
	e.exec(e.pub, `TRUNCATE t`)
	e.exec(replicated, `INSERT INTO t VALUES (1, 'replicated to the publisher')`)
	e.exec(e.pub, `INSERT INTO t VALUES (2, 'made on the publisher')`)
	r = e.start(cfg)
	e.waitCaughtUp(r)
	e.verify("t")
}

// runUntilStopped runs a subscriber until it stops by itself (within a
// minute) and returns its error.
func runUntilStopped(cfg subscriber.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return subscriber.New(cfg).Run(ctx)
}

// TestOriginLimit: on a target that lets only four replication origins be
// active at once, a run asked for eight workers and two stream sessions
// applies with what fits (one worker, two stream sessions) instead of
// failing when the pool opens or a large transaction arrives, and the rows
// arrive all the same.
func TestOriginLimit(t *testing.T) {
	e := newEnvSettings(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`, fast, originLimitSettings(t, 4))
	cfg := e.config("olimit")
	cfg.Workers, cfg.AutoWorkers, cfg.StreamWorkers = 8, false, 2
	cfg.Source.Streaming, cfg.Source.DecodingWorkMem = true, "64kB"
	r := e.start(cfg)
	for i := 0; i < 50; i++ {
		e.exec(e.pub, `INSERT INTO t SELECT g, 'small' FROM generate_series($1::int * 10 + 1, $1::int * 10 + 10) g`, i)
	}
	e.exec(e.pub, `INSERT INTO t SELECT g, repeat('s', 200) FROM generate_series(1001, 5000) g`) // streamed
	e.exec(e.pub, `UPDATE t SET v = 'updated' WHERE id % 3 = 0`)
	e.waitCaughtUp(r)
	e.verify("t")
	var workers []string
	if err := e.sub.QueryRow(context.Background(), `SELECT coalesce(array_agg(external_id ORDER BY external_id), '{}') FROM pg_replication_origin_status WHERE external_id LIKE 'parapply\_olimit\_w%'`).Scan(&workers); err != nil {
		t.Fatal(err)
	}
	if len(workers) != 1 {
		t.Errorf("workers' origins on the target: %v, want one worker's (the limit of four leaves one beside the reader and two stream sessions)", workers)
	}
}
