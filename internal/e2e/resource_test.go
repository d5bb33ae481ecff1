package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The target refuses writes for a while, as a full disk or a DBA's
// read-only switch makes it, while a small load writes on the publisher:
// parapply must wait, never exit (not after reconnect_timeout either), say
// what it waits for in its metrics and status row while the wait lasts, and
// go on by itself once the target takes writes again, the target then equal
// to the publisher row for row.

const resourceSchema = `CREATE TABLE items (id bigint PRIMARY KEY, n int NOT NULL, note text)`

// resourceSwitch makes the target's items refuse every write with the
// SQLSTATE a row of fault_switch holds (a trigger enabled ALWAYS, so that
// it fires in parapply's replica sessions too), as a full disk does
// ("could not extend file").
const resourceSwitch = `
CREATE TABLE fault_switch (code text NOT NULL);
CREATE FUNCTION fault_switch() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE c text;
BEGIN
	SELECT code INTO c FROM public.fault_switch LIMIT 1;
	IF c IS NOT NULL THEN
		RAISE EXCEPTION 'could not extend file "base/5/16384": No space left on device (injected by the test)'
			USING ERRCODE = c, HINT = 'Check free disk space.';
	END IF;
	RETURN NEW;
END $$;
CREATE TRIGGER fault_switch BEFORE INSERT OR UPDATE ON items FOR EACH ROW EXECUTE FUNCTION fault_switch();
ALTER TABLE items ENABLE ALWAYS TRIGGER fault_switch;
`

// TestTargetResourceWait: the target's disk "fills" (53100 on every write
// of items), then the target is made read-only for every session (ALTER
// SYSTEM SET default_transaction_read_only = on and a reload: 25006), each
// then every connection slot of the target is taken (53300 at connect),
// each held for 2.5 s after parapply shows the wait, longer than the
// reconnect_timeout of 1 s it runs with, at workers 0 and 2.
func TestTargetResourceWait(t *testing.T) {
	for _, workers := range []int{0, 2} {
		t.Run("workers"+strconv.Itoa(workers), func(t *testing.T) { testTargetResourceWait(t, workers) })
	}
}

func testTargetResourceWait(t *testing.T, workers int) {
	// Few connection slots on the target, for the test to take them all.
	e := newEnvSettings(t, resourceSchema, fast, map[string]string{"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off", "max_connections": "20"})
	ctx := context.Background()
	e.exec(e.sub, resourceSwitch)
	// The test's own target session writes whatever the server's default.
	e.exec(e.sub, `SET default_transaction_read_only = off`)
	src, dst := e.pair.Publisher.DSN("postgres"), e.pair.Subscriber.DSN("postgres")
	addr := freeAddr(t)
	p := startProcess(t, "run", "--source", src, "--target", dst, "--publication", "pub", "--slot", "waits",
		"--workers", strconv.Itoa(workers), "--reconnect-timeout", "1s", "--status-interval", "1s", "--metrics-addr", addr)
	e.waitSlotExists(t, "waits", p)

	// A small load: one insert and one update per transaction, every 10 ms.
	wctx, stopWriting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var committed atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := pgx.Connect(wctx, src)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close(ctx)
		for n := int64(1); wctx.Err() == nil; n++ {
			b := &pgx.Batch{}
			b.Queue("BEGIN")
			b.Queue("INSERT INTO items VALUES ($1, 0, $2)", n, fmt.Sprintf("item %d", n))
			b.Queue("UPDATE items SET n = n + 1 WHERE id = $1", 1+n/2)
			b.Queue("COMMIT")
			if err := c.SendBatch(wctx, b).Close(); err != nil {
				if wctx.Err() == nil {
					t.Errorf("writing on the publisher: %v", err)
				}
				return
			}
			committed.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	defer func() { stopWriting(); wg.Wait() }()

	targetItems := func() int64 {
		t.Helper()
		var n int64
		if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM items`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// waitMetric polls the metrics until parapply_target_waiting{reason}
	// is want, parapply alive all along.
	waitMetric := func(reason string, want float64) (start float64) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if err := p.alive(); err != nil {
				t.Fatal(err)
			}
			fams := scrape(t, addr)
			if value(t, fams, "parapply_target_waiting", "reason", reason) == want {
				return value(t, fams, "parapply_target_wait_start_time_seconds")
			}
		}
		t.Fatalf("parapply_target_waiting{reason=%q} did not become %v within 30s", reason, want)
		return 0
	}
	// hold keeps the fault for longer than reconnect_timeout, checking
	// that parapply stays alive, the wait's start does not move, and
	// nothing reaches items.
	hold := func(reason string, start float64, items int64) {
		t.Helper()
		for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
			if err := p.alive(); err != nil {
				t.Fatalf("parapply exited during the %s wait: %v", reason, err)
			}
			fams := scrape(t, addr)
			if w, s := value(t, fams, "parapply_target_waiting", "reason", reason), value(t, fams, "parapply_target_wait_start_time_seconds"); w != 1 || s != start {
				t.Fatalf("during the %s wait: parapply_target_waiting %v, wait start %v; want 1 and %v", reason, w, s, start)
			}
		}
		if n := targetItems(); n != items {
			t.Errorf("items on the target went from %d to %d while its writes were refused", items, n)
		}
	}
	waitResumed := func(reason string, items int64) {
		t.Helper()
		waitMetric(reason, 0)
		for deadline := time.Now().Add(30 * time.Second); targetItems() <= items; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("nothing applied within 30s of the %s wait's end", reason)
			}
		}
	}

	// Disk full: the status row (writable: the trigger is on items alone)
	// says so, too.
	time.Sleep(time.Second)
	e.exec(e.sub, `INSERT INTO fault_switch VALUES ('53100')`)
	began := time.Now()
	start := waitMetric("disk_full", 1)
	if s := time.Unix(int64(start), 0); s.Before(began.Add(-time.Second)) || s.After(time.Now()) {
		t.Errorf("parapply_target_wait_start_time_seconds %v, want the moment the fault began (%s)", start, began)
	}
	items := targetItems()
	var st map[string]any
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		st, _ = statusJSON(t, "--target", dst, "--slot", "waits")
		if w, _ := st["waiting"].(map[string]any); w != nil && w["reason"] == "disk_full" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the status row shows no disk_full wait: %v", st)
		}
	}
	w := st["waiting"].(map[string]any)
	if text, _ := w["error"].(string); !strings.Contains(text, "53100") || !strings.Contains(w["fix"].(string), "free space on the target") {
		t.Errorf("status waiting = %v: want the error with its SQLSTATE and the fix", w)
	}
	if human := statusText(t, "--target", dst, "--slot", "waits"); !strings.Contains(human, "waiting") || !strings.Contains(human, "disk_full since") {
		t.Errorf("parapply status does not show the wait:\n%s", human)
	}
	hold("disk_full", start, items)
	e.exec(e.sub, `DELETE FROM fault_switch`)
	waitResumed("disk_full", items)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if st, _ = statusJSON(t, "--target", dst, "--slot", "waits"); st["waiting"] == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the status row still shows a wait after the target took writes again: %v", st["waiting"])
		}
	}

	// Read-only: every session of the target, parapply's included (the
	// status row cannot be written then: the metrics say it).
	e.exec(e.sub, `ALTER SYSTEM SET default_transaction_read_only = on`)
	e.exec(e.sub, `SELECT pg_reload_conf()`)
	start = waitMetric("read_only", 1)
	items = targetItems()
	hold("read_only", start, items)
	e.exec(e.sub, `ALTER SYSTEM RESET default_transaction_read_only`)
	e.exec(e.sub, `SELECT pg_reload_conf()`)
	waitResumed("read_only", items)

	// No connection slot free: parapply's sessions ended, and every slot
	// taken by the test's own sessions as it frees (superusers may take
	// the reserved ones too), until parapply waits at connect (53300).
	fctx, stopFilling := context.WithCancel(ctx)
	var fillers []*pgx.Conn
	var fwg sync.WaitGroup
	fwg.Add(1)
	go func() {
		defer fwg.Done()
		for fctx.Err() == nil {
			if c, err := pgx.Connect(fctx, dst); err == nil {
				fillers = append(fillers, c)
				continue
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	unfill := func() {
		stopFilling()
		fwg.Wait()
		for _, c := range fillers {
			c.Close(ctx)
		}
		fillers = nil
	}
	defer unfill()
	e.exec(e.sub, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'parapply%'`)
	start = waitMetric("too_many_connections", 1)
	items = targetItems()
	hold("too_many_connections", start, items)
	unfill()
	waitResumed("too_many_connections", items)

	time.Sleep(500 * time.Millisecond)
	stopWriting()
	wg.Wait()
	e.waitSlotConfirmed("waits", 2*time.Minute, p.alive)
	fams := scrape(t, addr)
	if n := value(t, fams, "parapply_reconnects_total", "cause", "target_wait"); n < 3 {
		t.Errorf("parapply_reconnects_total{cause=\"target_wait\"} = %v, want at least 3 (one run per wait at least)", n)
	}
	p.signal(syscall.SIGTERM)
	if p.err != nil {
		t.Errorf("parapply ended with %v after SIGTERM", p.err)
	}
	out := p.out.String()
	for _, want := range []string{"the target's disk is full", "waiting for it to take writes again; free space on the target",
		"the target takes no writes (read-only)", `ALTER DATABASE \"postgres\" RESET default_transaction_read_only`,
		"the target has no connection slot free", "the target's wait is over"} {
		if !strings.Contains(out, want) {
			t.Errorf("parapply's log does not say %q", want)
		}
	}
	if strings.Contains(out, "gave up after reconnect_timeout") {
		t.Errorf("parapply gave up a wait after reconnect_timeout")
	}
	t.Logf("%d transactions committed by the writer", committed.Load())
	e.verify("public.items")
}
