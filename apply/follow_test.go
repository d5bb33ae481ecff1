package apply

import (
	"strings"
	"testing"
	"time"

	"github.com/parapply/parapply/internal/pgtest"
)

// TestRoundTripsFollow checks, on a real server, that while statements wait
// for their rows to be read ahead a round trip is started without waiting
// for the one in flight, runs after it all the same, and is not sent at
// all when that one fails; and that otherwise sendQueuedAsync still waits.
func TestRoundTripsFollow(t *testing.T) {
	ctx, srv := pgtest.ForTest(t, "apply-follow", 2*time.Minute)
	a, err := Open(ctx, Config{DSN: srv.DSN("postgres"), Prefetch: true, PrefetchConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	if _, err := a.Conn().Exec(ctx, "CREATE TABLE public.seen (n int); CREATE SEQUENCE public.sent"); err != nil {
		t.Fatal(err)
	}
	running := func(f *inflight) bool {
		select {
		case <-f.done:
			return false
		default:
			return true
		}
	}
	send := func(sql string) *inflight {
		t.Helper()
		a.queue(sql, sql, -1)
		if err := a.sendQueuedAsync(ctx, nil); err != nil {
			t.Fatalf("sending %q: %v", sql, err)
		}
		return a.sender.inflight
	}

	// Reads not known to wait: the second round trip waits for the first.
	a.Begin(Txn{XID: 1})
	first := send("SELECT pg_catalog.pg_sleep(0.2)")
	second := send("INSERT INTO public.seen VALUES (1)")
	if running(first) || second.ahead != nil {
		t.Error("with reads that do not wait, a round trip was started before the one in flight had finished")
	}
	if err := a.Wait(); err != nil {
		t.Fatal(err)
	}

	// Reads wait: the second follows the first, still sleeping; the third
	// waits until the first is done and follows the second.
	a.Tune(DiskWaiting, nil)
	first = send("SELECT pg_catalog.pg_sleep(2)")
	second = send("INSERT INTO public.seen VALUES (2)")
	if !running(first) || second.ahead != first {
		t.Fatal("with reads that wait, the second round trip did not follow the first in flight")
	}
	third := send("INSERT INTO public.seen VALUES (3)")
	if running(first) {
		t.Error("a third round trip was started while two were ahead of it")
	}
	if third.ahead != nil && third.ahead != second {
		t.Error("the third round trip follows another than the second")
	}
	if err := a.Wait(); err != nil {
		t.Fatal(err)
	}
	var got string
	if err := a.Conn().QueryRow(ctx, "SELECT string_agg(n::text, ',' ORDER BY ctid) FROM public.seen").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "1,2,3" {
		t.Errorf("rows in the order %s, want 1,2,3", got)
	}

	// The first fails: what follows is never sent, and the failure is
	// the one the applier hears.
	send("SELECT pg_catalog.pg_sleep(0.5), 1/0")
	send("SELECT pg_catalog.nextval('public.sent')")
	err = a.Wait()
	if err == nil || !strings.Contains(err.Error(), "division by zero") {
		t.Errorf("after a failed round trip and one following it: %v, want the division by zero", err)
	}
	a.Abort(ctx)
	var calls int64
	if err := a.Conn().QueryRow(ctx, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.sent").Scan(&calls); err != nil {
		t.Fatal(err)
	}
	if calls != 0 {
		t.Error("a round trip following a failed one was sent")
	}
}
