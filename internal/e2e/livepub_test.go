package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/parapply/parapply/tablesync"
)

// TestPublicationChangedLive changes a running publication as a DBA may:
// a column list and a row filter set on a published table (later changes
// follow them, as with the built-in; rows already there stay), a published
// table dropped, and at last the publication dropped, which stops
// parapply with the exact fix.
func TestPublicationChangedLive(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	e.both(`CREATE TABLE a (id int PRIMARY KEY, v text, w text); CREATE TABLE b (id int PRIMARY KEY, v int); CREATE TABLE gone (id int PRIMARY KEY)`)
	e.exec(e.pub, `CREATE PUBLICATION pub FOR TABLE a, b, gone`)
	cfg := e.config("pubchange")
	cfg.PublicationRefresh, cfg.CopyData = time.Second, true
	r := e.start(cfg)
	e.exec(e.pub, `INSERT INTO a SELECT g, 'v', 'w' FROM generate_series(1, 20) g; INSERT INTO b SELECT g, g FROM generate_series(1, 20) g; INSERT INTO gone VALUES (1)`)
	e.waitCaughtUp(r)
	e.verify("public.a", "public.b", "public.gone")
	e.exec(e.pub, `ALTER PUBLICATION pub SET TABLE a (id, v), b WHERE (id > 10)`)
	e.exec(e.pub, `UPDATE a SET v = 'v2', w = 'w2'; INSERT INTO b SELECT g, g FROM generate_series(21, 30) g; UPDATE b SET v = v + 100 WHERE id > 25`)
	e.exec(e.pub, `DROP TABLE gone`)
	e.waitCaughtUp(r)
	var w string
	var n int
	if err := e.sub.QueryRow(ctx, `SELECT min(w), count(*) FILTER (WHERE v = 'v2') FROM a`).Scan(&w, &n); err != nil {
		t.Fatal(err)
	}
	if w != "w" || n != 20 {
		t.Fatalf("after the column list: w = %q (want the old 'w', not published any more), %d rows with v2 (want 20)", w, n)
	}
	e.verify("public.b")

	// A table joins that neither role may use yet: skipped with the
	// GRANTs that let it be copied, then copied once they are run.
	e.both(`CREATE TABLE c (id int PRIMARY KEY, v int)`)
	e.exec(e.pub, `INSERT INTO c SELECT g, g FROM generate_series(1, 30) g; REVOKE ALL ON c FROM `+replRole)
	e.exec(e.sub, `REVOKE ALL ON c FROM `+applyRole)
	e.exec(e.pub, `ALTER PUBLICATION pub ADD TABLE c`)
	e.exec(e.pub, `UPDATE c SET v = -v WHERE id <= 5`)
	e.waitCaughtUp(r)
	if !strings.Contains(e.log.String(), `GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON public.c TO `+applyRole) {
		t.Fatalf("no warning with the target's GRANT for a joined table the apply role may not write")
	}
	e.exec(e.sub, `GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON public.c TO `+applyRole)
	time.Sleep(1500 * time.Millisecond)
	if !strings.Contains(e.log.String(), `GRANT SELECT ON public.c TO `+replRole) {
		t.Fatalf("no warning with the publisher's GRANT for a joined table the replication role may not read")
	}
	e.exec(e.pub, `GRANT SELECT ON public.c TO `+replRole)
	time.Sleep(1500 * time.Millisecond)
	e.exec(e.pub, `UPDATE c SET v = 0 WHERE id > 25`)
	e.waitCaughtUp(r)
	e.verify("public.c")

	e.exec(e.pub, `DROP PUBLICATION pub`)
	e.exec(e.pub, `INSERT INTO b VALUES (100, 100)`)
	select {
	case err := <-r.done:
		r.done <- err
		t.Logf("stopped: %v", err)
		if err == nil || !strings.Contains(err.Error(), "create it again") {
			t.Fatalf("a dropped publication stopped parapply with %v, not with the fix", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("parapply still runs 90 s after its publication was dropped; status %+v", r.s.Status())
	}
}

// TestTableRejoinsLive takes a table out of the publication while parapply
// runs, changes it on the publisher, and adds it back: parapply forgets it
// as copied when it leaves and copies it again when it rejoins, as the
// built-in's REFRESH PUBLICATION does, with existing_data deciding what
// becomes of the rows the target kept (truncate: replaced; error: a
// warning with the fix, and the copy once the target's table is emptied).
// Then a table that leaves and rejoins between two reads of the
// publication (a second run reads it only when a table joins): found by
// its new membership row on the publisher, and copied again as well.
func TestTableRejoinsLive(t *testing.T) {
	for _, existing := range []tablesync.ExistingData{tablesync.ExistingTruncate, tablesync.ExistingError} {
		t.Run(string(existing), func(t *testing.T) { testTableRejoins(t, existing) })
	}
}

func testTableRejoins(t *testing.T, existing tablesync.ExistingData) {
	e := newEnv(t, "")
	e.both(`CREATE TABLE t (id int PRIMARY KEY, v int); CREATE TABLE u (id int PRIMARY KEY, v int); CREATE TABLE w (id int PRIMARY KEY)`)
	e.exec(e.pub, `INSERT INTO t SELECT g, g FROM generate_series(1, 100) g; INSERT INTO u SELECT g, g FROM generate_series(1, 100) g;
		CREATE PUBLICATION pub FOR TABLE t, u`)
	cfg := e.config("rejoin")
	cfg.PublicationRefresh, cfg.CopyData, cfg.ExistingData = time.Second, true, existing
	r := e.start(cfg)
	e.exec(e.pub, `UPDATE t SET v = -v WHERE id <= 10; UPDATE u SET v = -v WHERE id <= 10`)
	e.waitCaughtUp(r)
	e.verify("public.t", "public.u")

	e.exec(e.pub, `ALTER PUBLICATION pub DROP TABLE t`)
	e.exec(e.pub, `INSERT INTO t VALUES (1000, 1000); UPDATE t SET v = 0 WHERE id BETWEEN 20 AND 30; DELETE FROM t WHERE id > 90`)
	e.exec(e.pub, `UPDATE u SET v = 0 WHERE id BETWEEN 20 AND 30`)
	e.waitLog(r, "table public.t left publication pub: its changes are no longer applied", 1)
	e.exec(e.pub, `ALTER PUBLICATION pub ADD TABLE t`)
	e.exec(e.pub, `INSERT INTO t VALUES (2000, 2000); UPDATE t SET v = 7 WHERE id BETWEEN 40 AND 45; DELETE FROM t WHERE id = 50`)
	if existing == tablesync.ExistingError {
		e.waitLog(r, "empty it on the target (TRUNCATE public.t;)", 1)
		e.exec(e.sub, `TRUNCATE t`)
	}
	e.waitLog(r, "copied tables that joined the publication", 1)
	e.exec(e.pub, `UPDATE t SET v = 8 WHERE id BETWEEN 60 AND 65`)
	e.waitCaughtUp(r)
	e.verify("public.t", "public.u")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	e.waitSlotReleased(t, "rejoin")

	// Out and back in between two reads: this run reads the publication
	// at its start and then only when a table joins (w, below).
	cfg.PublicationRefresh = time.Hour
	const read = `msg="read the publication's tables"`
	reads := strings.Count(e.log.String(), read)
	r = e.start(cfg)
	e.waitLog(r, read, reads+1) // the read the next is compared with
	e.waitCaughtUp(r)
	e.exec(e.pub, `ALTER PUBLICATION pub DROP TABLE t`)
	e.exec(e.pub, `UPDATE t SET v = 9 WHERE id BETWEEN 70 AND 75; DELETE FROM t WHERE id = 80; INSERT INTO t VALUES (3000, 3000)`)
	e.exec(e.pub, `ALTER PUBLICATION pub ADD TABLE t`)
	if existing == tablesync.ExistingError {
		e.exec(e.sub, `TRUNCATE t`) // emptied ahead, as the fix says
	}
	e.exec(e.pub, `ALTER PUBLICATION pub ADD TABLE w`)
	e.exec(e.pub, `INSERT INTO w VALUES (1); UPDATE t SET v = 10 WHERE id = 1`)
	e.waitLog(r, "copied tables that joined the publication", 2)
	e.waitCaughtUp(r)
	e.verify("public.t", "public.u", "public.w")
}

// waitLog waits until the subscribers' log holds s at least n times.
func (e *env) waitLog(r *running, s string, n int) {
	e.t.Helper()
	nudge := time.Now()
	for deadline := time.Now().Add(waitCaughtUpFor); time.Now().Before(deadline); {
		if strings.Count(e.log.String(), s) >= n {
			return
		}
		select {
		case err := <-r.done:
			r.done <- err
			e.t.Fatalf("subscriber stopped before logging %q: %v", s, err)
		case <-time.After(100 * time.Millisecond):
		}
		e.nudge(&nudge)
	}
	e.t.Fatalf("the log does not hold %q %d times after %s", s, n, waitCaughtUpFor)
}
