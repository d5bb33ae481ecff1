package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStreamedTransactions asks the publisher to stream large transactions
// before they commit: a streamed transaction with rolled-back
// subtransactions, one aborted whole, and one interleaved with small
// transactions must leave the target equal to the publisher.
func TestStreamedTransactions(t *testing.T) {
	testStreamed(t, 2)
}

func testStreamed(t *testing.T, streamWorkers int) {
	e := newEnv(t, `CREATE TABLE big (id int PRIMARY KEY, v text); CREATE TABLE small (id int PRIMARY KEY, v int)`)
	e.exec(e.pub, `ALTER SYSTEM SET logical_decoding_work_mem = '64kB'`)
	e.exec(e.pub, `SELECT pg_reload_conf()`)
	cfg := e.config("streamed")
	cfg.Source.Streaming = true
	cfg.StreamWorkers = streamWorkers
	r := e.start(cfg)
	// Subtransactions: the second is rolled back, the third kept.
	e.exec(e.pub, `BEGIN;
		INSERT INTO big SELECT g, repeat('a', 100) FROM generate_series(1, 3000) g;
		SAVEPOINT s1;
		INSERT INTO big SELECT g, 'rolled back' FROM generate_series(3001, 6000) g;
		UPDATE big SET v = 'rolled back' WHERE id <= 1000;
		ROLLBACK TO SAVEPOINT s1;
		SAVEPOINT s2;
		UPDATE big SET v = 'kept' WHERE id <= 500;
		RELEASE SAVEPOINT s2;
		DELETE FROM big WHERE id % 10 = 0;
		COMMIT`)
	// Aborted whole after it has been streamed: the publisher streams an
	// in-progress transaction once it outgrows logical_decoding_work_mem,
	// so the rollback comes after its chunks were sent.
	ctx := context.Background()
	doomed, err := e.pub.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := doomed.Exec(ctx, `INSERT INTO big SELECT g, 'aborted' FROM generate_series(100001, 150000) g`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := doomed.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// A small transaction while a streamed one is open elsewhere.
	other, err := e.pub.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `INSERT INTO big SELECT g, 'late' FROM generate_series(20001, 25000) g`); err != nil {
		t.Fatal(err)
	}
	e.exec(e.pub, `INSERT INTO small VALUES (1, 1)`)
	if _, err := other.Exec(ctx, `UPDATE small SET v = 2 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp(r)
	e.verify("public.big", "public.small")
	st := r.s.Status()
	t.Logf("streamed transactions: %d applied in flight, %d at commit, %d bytes spilled", st.StreamedInFlight, st.StreamedAtCommit, st.SpillBytes)
	if (streamWorkers > 0) != (st.StreamedInFlight > 0) || st.StreamedInFlight+st.StreamedAtCommit < 2 || st.SpillBytes == 0 || st.StreamBytes != 0 || st.StreamsInFlight != 0 {
		t.Errorf("stream_workers = %d: want streamed transactions applied in flight exactly when allowed, spill bytes counted, nothing left held: %+v", streamWorkers, st)
	}

	// Stream connections stay open between streamed transactions and are
	// taken again, also after a schema change announced in between.
	before := e.streamBackends()
	e.exec(e.sub, `ALTER TABLE big ADD COLUMN w int`)
	e.exec(e.pub, `ALTER TABLE big ADD COLUMN w int`)
	e.exec(e.pub, `INSERT INTO small VALUES (2, 2)`)
	for i := range 3 {
		from := 200000 + i*5000
		e.exec(e.pub, `INSERT INTO big SELECT g, 'again', $1::int FROM generate_series($2::int, $3::int) g`, i, from, from+4999)
	}
	e.waitCaughtUp(r)
	e.verify("public.big", "public.small")
	after := e.streamBackends()
	st = r.s.Status()
	t.Logf("stream backends before %v, after %v; %d streamed transactions applied in flight", before, after, st.StreamedInFlight)
	if streamWorkers == 0 {
		if len(before)+len(after) != 0 {
			t.Errorf("stream_workers = 0, yet stream connections are open: %v then %v", before, after)
		}
		return
	}
	if len(before) == 0 || len(after) == 0 || len(after) > streamWorkers {
		t.Fatalf("want 1..%d stream connections kept open, got %v then %v", streamWorkers, before, after)
	}
	for _, pid := range after {
		if !slices.Contains(before, pid) {
			t.Errorf("stream backend %d was opened for the later streamed transactions instead of reusing one of %v", pid, before)
		}
	}
}

// streamBackends lists the target backends of parapply's stream
// connections.
func (e *env) streamBackends() []int {
	rows, err := e.sub.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE application_name LIKE '% stream %' ORDER BY pid`)
	if err != nil {
		e.t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		e.t.Fatal(err)
	}
	return pids
}

// TestSchemaChangeAndTruncate changes a published table's columns while
// parapply runs (relation messages announce the change) and truncates with
// CASCADE and RESTART IDENTITY: with the apply role owning the tables, and
// without (the documented role: the sequences are restarted with setval).
func TestSchemaChangeAndTruncate(t *testing.T) {
	for _, owns := range []bool{true, false} {
		t.Run(fmt.Sprintf("owner=%v", owns), func(t *testing.T) {
			e := newEnv(t, `CREATE TABLE parent (id serial PRIMARY KEY, name text);
				CREATE TABLE child (id int PRIMARY KEY, parent int REFERENCES parent, note text)`)
			if owns {
				e.applyOwnsTables()
			}
			r := e.start(e.config("schema"))
			e.exec(e.pub, `INSERT INTO parent (name) SELECT 'p' || g FROM generate_series(1, 100) g; INSERT INTO child SELECT g, g, 'c' FROM generate_series(1, 100) g`)
			e.waitCaughtUp(r)
			e.exec(e.sub, `SELECT setval('parent_id_seq', 100)`) // as sequence sync leaves it
			// Add a column on the target first, then on the publisher, as a DBA would.
			e.exec(e.sub, `ALTER TABLE child ADD COLUMN extra int`)
			e.exec(e.pub, `ALTER TABLE child ADD COLUMN extra int`)
			e.exec(e.pub, `UPDATE child SET extra = id * 2 WHERE id <= 50; INSERT INTO child VALUES (101, 1, 'new', 7)`)
			// Drop a column on the publisher: later changes no longer carry it.
			e.exec(e.pub, `ALTER TABLE child DROP COLUMN note`)
			e.exec(e.pub, `UPDATE child SET extra = 0 WHERE id > 90`)
			e.waitCaughtUp(r)
			e.exec(e.sub, `ALTER TABLE child DROP COLUMN note`)
			e.verify("public.parent", "public.child")
			e.exec(e.pub, `TRUNCATE parent RESTART IDENTITY CASCADE; INSERT INTO parent (name) VALUES ('after')`)
			e.waitCaughtUp(r)
			e.verify("public.parent", "public.child")
			var last int64
			var called bool
			if err := e.sub.QueryRow(context.Background(), `SELECT last_value, is_called FROM parent_id_seq`).Scan(&last, &called); err != nil {
				t.Fatal(err)
			}
			if last != 1 || called {
				t.Fatalf("the target's parent_id_seq after RESTART IDENTITY: last_value %d, is_called %v; want 1, false", last, called)
			}
		})
	}
}

// TestTargetLayouts applies to target tables shaped differently from the
// publisher's: a partitioned target under REPLICA IDENTITY FULL (rows in
// different partitions share ctids), and a plain target with an inheritance
// child holding rows of the same keys, which replicated changes must not
// touch.
func TestTargetLayouts(t *testing.T) {
	e := newEnv(t, "")
	e.exec(e.pub, `CREATE TABLE measures (id int, region text, v int);
		ALTER TABLE measures REPLICA IDENTITY FULL;
		CREATE TABLE base (id int PRIMARY KEY, v int);
		CREATE PUBLICATION pub FOR TABLE measures, base`)
	e.exec(e.sub, `CREATE TABLE measures (id int, region text, v int) PARTITION BY LIST (region);
		CREATE TABLE measures_east PARTITION OF measures FOR VALUES IN ('east');
		CREATE TABLE measures_west PARTITION OF measures FOR VALUES IN ('west');
		CREATE TABLE base (id int PRIMARY KEY, v int);
		CREATE TABLE base_child () INHERITS (base);
		INSERT INTO base_child SELECT g, -1 FROM generate_series(1, 50) g`)
	r := e.start(e.config("layouts"))
	e.exec(e.pub, `INSERT INTO measures SELECT g % 20, CASE WHEN g % 2 = 0 THEN 'east' ELSE 'west' END, 0 FROM generate_series(1, 200) g;
		INSERT INTO base SELECT g, 0 FROM generate_series(1, 100) g`)
	e.exec(e.pub, `UPDATE measures SET v = v + 1 WHERE id < 10;
		DELETE FROM measures WHERE ctid IN (SELECT ctid FROM measures WHERE id = 15 LIMIT 3);
		UPDATE base SET v = v + 1 WHERE id <= 50;
		DELETE FROM base WHERE id % 10 = 0`)
	e.waitCaughtUp(r)
	e.verify("public.measures")
	var onlyBase, child int
	ctx := context.Background()
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FILTER (WHERE v = CASE WHEN id <= 50 THEN 1 ELSE 0 END) FROM ONLY base`).Scan(&onlyBase); err != nil {
		t.Fatal(err)
	}
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM base_child WHERE v = -1`).Scan(&child); err != nil {
		t.Fatal(err)
	}
	if onlyBase != 90 || child != 50 {
		t.Fatalf("base holds %d expected rows (want 90), base_child %d untouched rows (want 50)", onlyBase, child)
	}
}
