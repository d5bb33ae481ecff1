package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const copySchema = `
CREATE TABLE large (id int PRIMARY KEY, a int, b text);
CREATE TABLE parts (id int, region text, v int, PRIMARY KEY (id, region)) PARTITION BY LIST (region);
CREATE TABLE parts_east PARTITION OF parts FOR VALUES IN ('east');
CREATE TABLE parts_west PARTITION OF parts FOR VALUES IN ('west');
CREATE TABLE filtered (id int PRIMARY KEY, keep bool, secret text, v int);
CREATE INDEX ON large (a);
`

// copyEnv prepares a publisher holding rows in a large table, a
// partitioned one (published through its root) and one with a row filter
// and a column list, and an empty target.
func copyEnv(t *testing.T) *env {
	e := newEnv(t, "")
	e.both(copySchema)
	e.exec(e.pub, `INSERT INTO large SELECT g, g % 100, md5(g::text) FROM generate_series(1, 200000) g;
		INSERT INTO parts SELECT g, CASE WHEN g % 2 = 0 THEN 'east' ELSE 'west' END, g FROM generate_series(1, 20000) g;
		INSERT INTO filtered SELECT g, g % 3 = 0, 'secret ' || g, g FROM generate_series(1, 9000) g;
		ANALYZE;
		CREATE PUBLICATION pub FOR TABLE large, parts, filtered (id, keep, v) WHERE (id % 3 = 0)
			WITH (publish_via_partition_root = true)`)
	return e
}

// writer keeps changing every table on the publisher until stopped.
func (e *env) writer(t *testing.T) (stop func() int) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var n int
	var werr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := pgx.Connect(ctx, e.pair.Publisher.DSN("postgres"))
		if err != nil {
			werr = err
			return
		}
		defer c.Close(context.Background())
		r := rand.New(rand.NewPCG(1, 2))
		for i := 0; ctx.Err() == nil; i++ {
			b := &pgx.Batch{}
			b.Queue("BEGIN")
			id := 1 + r.IntN(200000)
			b.Queue("UPDATE large SET a = a + 1, b = 'changed' WHERE id = $1", id)
			b.Queue("INSERT INTO large VALUES ($1, 0, 'new') ON CONFLICT (id) DO NOTHING", 300000+i)
			del := 1 + r.IntN(200000)
			b.Queue("DELETE FROM large WHERE id = $1", del)
			b.Queue("UPDATE parts SET v = v + 1 WHERE id = $1", 1+r.IntN(20000))
			b.Queue("INSERT INTO parts VALUES ($1, 'east', 0) ON CONFLICT DO NOTHING", 50000+i)
			b.Queue("UPDATE filtered SET v = v + 1 WHERE id = $1", 3*(1+r.IntN(3000)))
			b.Queue("INSERT INTO filtered VALUES ($1, $2, 'x', 0)", 20000+i, i%2 == 0)
			b.Queue("COMMIT")
			b.Queue("SELECT pg_current_wal_insert_lsn()::text")
			br := c.SendBatch(ctx, b)
			for k := 0; k < b.Len()-1 && err == nil; k++ {
				_, err = br.Exec()
			}
			var lsn string
			if err == nil {
				err = br.QueryRow().Scan(&lsn)
			}
			if cerr := br.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				if ctx.Err() == nil {
					werr = err
				}
				return
			}
			e.history(fmt.Sprintf("txn %d (WAL at %s after its commit): update %d, delete %d", i, lsn, id, del), id, del)
			n++
		}
	}()
	return func() int {
		cancel()
		wg.Wait()
		if werr != nil {
			t.Fatal(werr)
		}
		return n
	}
}

// history records, for diagnosis, what the writer did to rows of large.
func (e *env) history(what string, ids ...int) {
	e.histMu.Lock()
	defer e.histMu.Unlock()
	if e.hist == nil {
		e.hist = map[int][]string{}
	}
	for _, id := range ids {
		e.hist[id] = append(e.hist[id], what)
	}
}

// explainLarge logs, before a failing comparison, which rows of large differ
// and what the writer did to them, with the tables' sync positions.
func (e *env) explainLarge(t *testing.T) {
	ctx := context.Background()
	load := func(c *pgx.Conn) map[int]string {
		rows, err := c.Query(ctx, "SELECT id, a || '/' || b FROM large")
		if err != nil {
			t.Fatal(err)
		}
		m := map[int]string{}
		for rows.Next() {
			var id int
			var v string
			if err := rows.Scan(&id, &v); err != nil {
				t.Fatal(err)
			}
			m[id] = v
		}
		return m
	}
	pub, sub := load(e.pub), load(e.sub)
	shown := 0
	for id, v := range sub {
		if pub[id] != v && shown < 10 {
			shown++
			e.histMu.Lock()
			t.Logf("large id %d: target %q, publisher %q; writer: %v", id, v, pub[id], e.hist[id])
			e.histMu.Unlock()
		}
	}
	for id, v := range pub {
		if _, ok := sub[id]; !ok && shown < 10 {
			shown++
			t.Logf("large id %d: missing on the target, publisher %q", id, v)
		}
	}
	if shown > 0 {
		var st string
		_ = e.sub.QueryRow(ctx, `SELECT string_agg(table_name || ' ' || state || ' at ' || sync_lsn, ', ') FROM parapply.sync_state`).Scan(&st)
		t.Logf("sync state: %s", st)
		var prog, conf string
		_ = e.sub.QueryRow(ctx, `SELECT string_agg(slot_name || ' commit ' || commit_lsn || ' end ' || end_lsn, ', ') FROM parapply.progress`).Scan(&prog)
		_ = e.pub.QueryRow(ctx, `SELECT string_agg(slot_name || ' confirmed ' || confirmed_flush_lsn, ', ') FROM pg_replication_slots`).Scan(&conf)
		t.Logf("target progress: %s; publisher slots: %s", prog, conf)
	}
}

// verifyCopy compares every table, the filtered one against the rows and
// columns its publication sends.
func (e *env) verifyCopy(t *testing.T) {
	e.explainLarge(t)
	e.verify("public.large", "public.parts")
	ctx := context.Background()
	q := func(c *pgx.Conn, sql string) string {
		var s string
		if err := c.QueryRow(ctx, sql).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	want := q(e.pub, `SELECT count(*) || ':' || coalesce(sum(hashtext(id || '/' || v)), 0) FROM filtered WHERE id % 3 = 0`)
	got := q(e.sub, `SELECT count(*) || ':' || coalesce(sum(hashtext(id || '/' || v)), 0) FROM filtered`)
	if want != got {
		t.Fatalf("filtered table: target %s, publisher's filtered rows %s", got, want)
	}
	if s := q(e.sub, `SELECT count(*)::text FROM filtered WHERE secret IS NOT NULL OR id % 3 <> 0`); s != "0" {
		t.Fatalf("%s filtered rows carry an unpublished column or fail the row filter", s)
	}
}

// TestInitialCopy copies a publisher's existing rows while writes go on,
// then streams, and checks the target equals the publisher.
func TestInitialCopy(t *testing.T) {
	e := copyEnv(t)
	stop := e.writer(t)
	cfg := e.config("copy")
	e.applyOwnsTables() // copy_defer_indexes drops and rebuilds the indexes: the apply role owns the tables (docs/operations.md)
	cfg.CopyData, cfg.CopyWorkers, cfg.CopyDeferIndexes = true, 3, true
	r := e.start(cfg)
	time.Sleep(time.Second)
	n := stop()
	t.Logf("%d transactions written during the copy", n)
	e.waitCaughtUp(r)
	e.verifyCopy(t)
	var indexes int
	if err := e.sub.QueryRow(context.Background(), `SELECT count(*) FROM pg_indexes WHERE tablename = 'large'`).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if indexes != 2 {
		t.Fatalf("large has %d indexes after the copy, want its 2 back", indexes)
	}
}

// TestInitialCopyKilled kills parapply with SIGKILL during its initial copy,
// restarts it, and checks nothing is lost or doubled.
func TestInitialCopyKilled(t *testing.T) {
	e := copyEnv(t)
	stop := e.writer(t)
	e.applyOwnsTables() // copy_defer_indexes drops and rebuilds the indexes: the apply role owns the tables (docs/operations.md)
	args := []string{"--publication", "pub", "--slot", "copykill", "--copy-workers", "2", "--copy-defer-indexes", "on", "--status-interval", "200ms"}
	for k, wait := range []time.Duration{150 * time.Millisecond, 400 * time.Millisecond, 700 * time.Millisecond} {
		p := e.runProcess(t, args...)
		time.Sleep(wait)
		if err := p.alive(); err != nil {
			t.Fatal(err)
		}
		p.signal(syscall.SIGKILL)
		var state string
		_ = e.sub.QueryRow(context.Background(), `SELECT coalesce(string_agg(table_name || '=' || state, ' ' ORDER BY table_name), 'none') FROM parapply.sync_state`).Scan(&state)
		t.Logf("kill %d after %s: sync state %s", k+1, wait, state)
		e.waitSlotReleased(t, "copykill")
	}
	p := e.runProcess(t, args...)
	time.Sleep(500 * time.Millisecond)
	n := stop()
	t.Logf("%d transactions written during the copies", n)
	e.waitSlotConfirmed("copykill", 3*time.Minute, p.alive)
	p.signal(syscall.SIGTERM)
	e.verifyCopy(t)
}

// TestTableAddedLater adds a table with rows to the publication while
// parapply runs: it is copied online (its first change sets the copy off)
// and its changes after the copy's snapshot applied; a restart copies
// nothing again.
func TestTableAddedLater(t *testing.T) {
	e := newEnv(t, "")
	e.both(`CREATE TABLE first (id int PRIMARY KEY, v int); CREATE TABLE later (id int PRIMARY KEY, v int)`)
	e.exec(e.pub, `INSERT INTO first SELECT g, g FROM generate_series(1, 1000) g; INSERT INTO later SELECT g, g FROM generate_series(1, 1000) g;
		CREATE PUBLICATION pub FOR TABLE first`)
	cfg := e.config("later")
	cfg.CopyData = true
	r := e.start(cfg)
	e.exec(e.pub, `UPDATE first SET v = -v WHERE id <= 10; ALTER PUBLICATION pub ADD TABLE later`)
	e.exec(e.pub, `UPDATE later SET v = -v WHERE id <= 10; INSERT INTO later VALUES (5000, 5000)`)
	e.exec(e.pub, `UPDATE later SET v = 7 WHERE id BETWEEN 100 AND 120; DELETE FROM later WHERE id = 999`)
	e.waitCaughtUp(r)
	e.verify("public.first", "public.later")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	e.waitSlotReleased(t, "later")
	r = e.start(cfg) // nothing to copy again
	e.exec(e.pub, `UPDATE later SET v = 0 WHERE id BETWEEN 11 AND 20`)
	e.waitCaughtUp(r)
	e.verify("public.first", "public.later")
	if c := r.s.Status().Copy; c != nil {
		t.Fatalf("the restart copied again: %+v", *c)
	}
}

func (e *env) waitSlotReleased(t *testing.T, slot string) {
	t.Helper()
	for i := 0; i < 300; i++ {
		var active bool
		if err := e.pub.QueryRow(context.Background(), "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active); err != nil || !active {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("slot %s still in use after 30s", slot)
}

// indexDefs lists the target's indexes of the public schema, with their
// definitions, and its primary key and unique constraints.
func (e *env) indexDefs(t *testing.T) string {
	t.Helper()
	var s string
	if err := e.sub.QueryRow(context.Background(), `SELECT string_agg(x, E'\n' ORDER BY x) FROM (
			SELECT indexdef AS x FROM pg_indexes WHERE schemaname = 'public'
			UNION ALL SELECT conrelid::regclass::text || ' ' || conname || ' ' || contype::text FROM pg_constraint WHERE contype IN ('p', 'u') AND connamespace = 'public'::regnamespace) d`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestCopyIndexesNotOwned copies, with copy_defer_indexes on, as an apply
// role that owns one table of three (docs/operations.md's least
// privilege for the others): the owned table's indexes are built after
// its rows, the others' kept in place, one log line names those, and
// every row arrives.
func TestCopyIndexesNotOwned(t *testing.T) {
	e := copyEnv(t)
	before := e.indexDefs(t)
	e.exec(e.sub, `GRANT CREATE ON SCHEMA public TO `+applyRole+`; ALTER TABLE large OWNER TO `+applyRole)
	stop := e.writer(t)
	cfg := e.config("notowned")
	cfg.CopyData, cfg.CopyDeferIndexes = true, true
	r := e.start(cfg)
	time.Sleep(500 * time.Millisecond)
	stop()
	e.waitCaughtUp(r)
	e.verifyCopy(t)
	if after := e.indexDefs(t); after != before {
		t.Errorf("indexes after the copy:\n%s\nwant those before:\n%s", after, before)
	}
	log := e.log.String()
	for _, want := range []string{
		`msg="indexes deferred until the copy is done" table="\"public\".\"large\""`,
		"copying these tables with their indexes in place",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the log lacks %q", want)
		}
	}
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "with their indexes in place") && (!strings.Contains(l, `\"parts\"`) || !strings.Contains(l, `\"filtered\"`) || strings.Contains(l, `\"large\"`)) {
			t.Errorf("the line naming the tables that keep their indexes names others than parts and filtered: %s", l)
		}
	}
}

// TestCopyKilledBuildingIndexes kills parapply with SIGKILL while the
// copy builds a table's deferred indexes (some built, some not), restarts
// it, and checks every index and constraint is back as it was and every
// row equal.
func TestCopyKilledBuildingIndexes(t *testing.T) {
	e := copyEnv(t)
	// More indexes on large, one slow to build (an expression index over
	// a function that takes a while per row).
	e.exec(e.sub, `CREATE FUNCTION slow_key(t text) RETURNS text IMMUTABLE LANGUAGE plpgsql AS $$
		DECLARE r text := t; BEGIN FOR i IN 1..20 LOOP r := md5(r); END LOOP; RETURN r; END $$;
		CREATE INDEX large_slow ON large (slow_key(b));
		CREATE INDEX large_b ON large (b);
		ALTER TABLE large ADD CONSTRAINT large_ab UNIQUE (a, b, id)`)
	before := e.indexDefs(t)
	e.applyOwnsTables()
	stop := e.writer(t)
	args := []string{"--publication", "pub", "--slot", "idxkill", "--copy-workers", "2", "--status-interval", "200ms"} // copy_defer_indexes on by default
	p := e.runProcess(t, args...)
	ctx := context.Background()
	most, deadline := 0, time.Now().Add(3*time.Minute)
	for {
		if err := p.alive(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("no index phase half done seen in 3 minutes")
		}
		var n int
		if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM parapply.deferred_index WHERE table_name = '"public"."large"'`).Scan(&n); err != nil && !strings.Contains(err.Error(), "does not exist") {
			t.Fatal(err)
		}
		most = max(most, n)
		if n > 0 && n < most {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.signal(syscall.SIGKILL)
	var saved string
	_ = e.sub.QueryRow(ctx, `SELECT string_agg(recreate, '; ' ORDER BY ord) FROM parapply.deferred_index`).Scan(&saved)
	t.Logf("killed with %s still to build of large's %d", saved, most)
	e.waitSlotReleased(t, "idxkill")
	p = e.runProcess(t, args...)
	time.Sleep(300 * time.Millisecond)
	stop()
	e.waitSlotConfirmed("idxkill", 3*time.Minute, p.alive)
	p.signal(syscall.SIGTERM)
	e.verifyCopy(t)
	if after := e.indexDefs(t); after != before {
		t.Errorf("indexes after the restarted copy:\n%s\nwant those before:\n%s", after, before)
	}
	var left int
	var states string
	if err := e.sub.QueryRow(ctx, `SELECT (SELECT count(*) FROM parapply.deferred_index), (SELECT string_agg(DISTINCT state, ',') FROM parapply.sync_state)`).Scan(&left, &states); err != nil || left != 0 || states != "done" {
		t.Errorf("after the restarted copy: %d indexes saved, sync states %s (%v); want none saved, all done", left, states, err)
	}
}
