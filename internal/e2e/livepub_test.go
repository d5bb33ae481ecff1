package e2e

import (
	"context"
	"strings"
	"testing"
	"time"
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
