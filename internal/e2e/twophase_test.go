package e2e

import (
	"context"
	"maps"
	"testing"
	"time"
)

// TestTwoPhase applies transactions the publisher prepares (two_phase =
// on): prepared on the target while prepared on the publisher (invisible,
// ordinary transactions flowing past), committed or rolled back when the
// publisher does, a large streamed one prepared across a restart of
// parapply; the target ends equal, with nothing left prepared.
func TestTwoPhase(t *testing.T) {
	settings := maps.Clone(fast)
	settings["max_prepared_transactions"] = "10"
	e := newEnvSettings(t, `CREATE TABLE tp (id int PRIMARY KEY, v text)`, settings, settings)
	ctx := context.Background()
	cfg := e.config("twophase")
	cfg.Source.TwoPhase = true
	cfg.Source.Streaming = true
	cfg.Source.DecodingWorkMem = "64kB"
	r := e.start(cfg)

	count := func(sql string) int {
		t.Helper()
		var n int
		if err := e.sub.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor := func(what, sql string, want int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for count(sql) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s did not reach %d", what, sql, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	const prepared = `SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'parapply\_twophase\_%'`

	// Prepared, an ordinary transaction past it, then committed.
	e.exec(e.pub, `BEGIN; INSERT INTO tp SELECT g, 'one' FROM generate_series(1, 100) g; PREPARE TRANSACTION 'one'`)
	waitFor("prepared on the target", prepared, 1)
	if n := count(`SELECT count(*) FROM tp`); n != 0 {
		t.Fatalf("a prepared transaction's rows are visible on the target: %d", n)
	}
	e.exec(e.pub, `INSERT INTO tp VALUES (1000, 'plain')`)
	waitFor("an ordinary transaction past a prepared one", `SELECT count(*) FROM tp WHERE id = 1000`, 1)
	e.exec(e.pub, `COMMIT PREPARED 'one'`)
	waitFor("committed", `SELECT count(*) FROM tp`, 101)

	// Prepared, then rolled back.
	e.exec(e.pub, `BEGIN; UPDATE tp SET v = 'rolled back' WHERE id <= 50; PREPARE TRANSACTION 'two'`)
	waitFor("prepared on the target", prepared, 1)
	e.exec(e.pub, `ROLLBACK PREPARED 'two'`)
	waitFor("rolled back", prepared, 0)

	// A streamed transaction prepared; parapply restarts while it is
	// prepared; then it is committed.
	e.exec(e.pub, `BEGIN; INSERT INTO tp SELECT g, repeat('s', 100) FROM generate_series(2001, 12000) g; DELETE FROM tp WHERE id <= 10; PREPARE TRANSACTION 'three'`)
	waitFor("a streamed transaction prepared on the target", prepared, 1)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	r = e.start(cfg)
	e.exec(e.pub, `COMMIT PREPARED 'three'`)
	e.waitCaughtUp(r)
	e.verify("public.tp")
	if n := count(prepared); n != 0 {
		t.Errorf("%d prepared transactions left on the target", n)
	}
	if n := count(`SELECT count(*) FROM parapply.prepared`); n != 0 {
		t.Errorf("%d rows left in parapply.prepared", n)
	}
}
