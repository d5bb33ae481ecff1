package e2e

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestCutoverPath is a migration's end, as docs/operations.md gives it:
// writes stop, parapply cutover waits for the slot to confirm the
// publisher's WAL position, brings the sequences over and verifies every
// table; parapply verify names a row that then differs; the stop logs
// where it stopped; parapply drop --dry-run changes nothing, and parapply
// drop removes the slot, its origins, its rows and the parapply schema.
// A start refused by its checks leaves no status row; parapply status
// shows a slot that never applied anything only while recent, and every
// one with --all; drop removes such a slot's rows with the slot it
// retires.
func TestCutoverPath(t *testing.T) {
	e := newEnv(t, `CREATE TABLE orders (id bigserial PRIMARY KEY, v int, note text);
		CREATE TABLE lines (order_id bigint, n int, qty int, PRIMARY KEY (order_id, n))`)
	ctx := context.Background()
	src, dst := e.sourceDSN(), e.targetDSN()
	e.exec(e.pub, `INSERT INTO orders (v, note) SELECT g, 'before' FROM generate_series(1, 300) g`)
	p := e.runProcess(t, "--publication", "pub", "--slot", "cut")
	e.waitSlotExists(t, "cut", p)
	for i := 0; i < 40; i++ {
		e.exec(e.pub, fmt.Sprintf(`INSERT INTO orders (v, note) VALUES (%d, 'live'); INSERT INTO lines VALUES (%d, 1, %d); UPDATE orders SET v = v + 1 WHERE id = %d`, i, i, i, 1+i*7))
	}
	// Writes have stopped: the cut-over.
	out, err := runOnce(t, "cutover", "--source", src, "--target", dst, "--publication", "pub", "--slot", "cut", "--timeout", "2m")
	if err != nil {
		t.Fatalf("parapply cutover: %v\n%s", err, out)
	}
	for _, w := range []string{"1. waiting for slot cut to confirm", "2. bringing the sequences over", "orders_id_seq", "public.orders: equal, 340 rows", "public.lines: equal, 40 rows", "ready to cut over"} {
		// The sequence is named when the cut-over moves it; the run's own
		// sync (after the copy) may have brought it there first.
		synced := strings.Contains(out, "1 moved forward") || strings.Contains(out, "1 already there")
		if !strings.Contains(out, w) && !(w == "orders_id_seq" && synced) {
			t.Errorf("cutover output lacks %q:\n%s", w, out)
		}
	}
	var seq int64
	if err := e.sub.QueryRow(ctx, "SELECT last_value FROM orders_id_seq").Scan(&seq); err != nil || seq != 340 {
		t.Errorf("orders_id_seq on the target: %d (%v), want 340", seq, err)
	}

	// A row changed on the target alone: verify names it and fails.
	e.exec(e.sub, `UPDATE lines SET qty = 999 WHERE order_id = 7`)
	out, err = runOnce(t, "verify", "--source", src, "--target", dst, "--publication", "pub")
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 1 {
		t.Fatalf("parapply verify after a change on the target: %v, want exit status 1\n%s", err, out)
	}
	for _, w := range []string{"public.orders: equal, 340 rows", "public.lines: DIFFERS", "(7,1,7) is on the publisher, not on the target", "1 of 2 published tables differ"} {
		if !strings.Contains(out, w) {
			t.Errorf("verify output lacks %q:\n%s", w, out)
		}
	}
	e.exec(e.sub, `UPDATE lines SET qty = 7 WHERE order_id = 7`)
	if out, err = runOnce(t, "verify", "--source", src, "--target", dst, "--publication", "pub"); err != nil {
		t.Errorf("parapply verify once equal again: %v\n%s", err, out)
	}

	// The stop says where it stopped.
	p.signal(syscall.SIGTERM)
	if !strings.Contains(p.out.String(), "stopped at ") || !strings.Contains(p.out.String(), "interrupted (SIGINT or SIGTERM)") {
		t.Errorf("no stopped line in parapply's output:\n%s", p.out.String())
	}

	// A start refused before it made anything leaves no row; one that an
	// earlier release left, an hour and more ago, is not shown.
	if out, err := runOnce(t, "run", "--source", src, "--target", dst, "--publication", "nosuchpub", "--slot", "tried"); err == nil {
		t.Fatalf("a run with a missing publication succeeded:\n%s", out)
	}
	if n := e.count(`SELECT count(*) FROM parapply.status WHERE slot_name = 'tried'`); n != 0 {
		t.Errorf("the refused start left %d status rows", n)
	}
	e.exec(e.sub, `INSERT INTO parapply.status (slot_name, state, updated_at, last_error) VALUES ('tried', 'failed', now() - interval '2 hours', 'publication "nosuchpub" does not exist')`)
	human, _ := exec.Command(parapplyBinary(t), "status", "--target", dst).CombinedOutput()
	if strings.Contains(string(human), "slot tried:") || !strings.Contains(string(human), "1 older slots not shown, which never applied anything (tried)") || !strings.Contains(string(human), "slot cut:") {
		t.Errorf("status without --all: want slot cut, and tried counted as not shown:\n%s", human)
	}
	human, _ = exec.Command(parapplyBinary(t), "status", "--target", dst, "--all").CombinedOutput()
	if !strings.Contains(string(human), "slot tried:") {
		t.Errorf("status --all does not show slot tried:\n%s", human)
	}

	// Retiring: a dry run first, which changes nothing.
	count := func(sql string) int {
		t.Helper()
		var n int
		c := e.sub
		if strings.Contains(sql, "pg_replication_slots") {
			c = e.pub
		}
		if err := c.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	origins := count(`SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'parapply_cut%'`)
	if origins == 0 {
		t.Fatal("slot cut has no replication origins on the target")
	}
	out, err = runOnce(t, "drop", "--source", src, "--target", dst, "--slot", "cut", "--dry-run")
	if err != nil {
		t.Fatalf("parapply drop --dry-run: %v\n%s", err, out)
	}
	for _, w := range []string{"target: would drop", "replication origins of slot cut", "would delete 1 rows of slot cut from parapply.progress", "publisher: would drop slot cut",
		"target: would delete what slot tried left (1 from parapply.status): no run resumes from it", "target: would drop schema parapply"} {
		if !strings.Contains(out, w) {
			t.Errorf("drop --dry-run output lacks %q:\n%s", w, out)
		}
	}
	if n := count(`SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'parapply_cut%'`); n != origins {
		t.Errorf("drop --dry-run dropped origins: %d left of %d", n, origins)
	}
	if n := count(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'cut'`); n != 1 {
		t.Errorf("drop --dry-run dropped the slot")
	}
	if n := count(`SELECT count(*) FROM parapply.progress WHERE slot_name = 'cut'`); n != 1 {
		t.Errorf("drop --dry-run deleted the progress row")
	}
	// One drop: slot cut, what slot tried left, and the schema.
	out, err = runOnce(t, "drop", "--source", src, "--target", dst, "--slot", "cut")
	if err != nil {
		t.Fatalf("parapply drop --slot cut: %v\n%s", err, out)
	}
	if !strings.Contains(out, "dropped schema parapply") || !strings.Contains(out, "publisher: dropped slot cut") || !strings.Contains(out, "target: deleted what slot tried left (1 from parapply.status)") {
		t.Errorf("the last drop's output:\n%s", out)
	}
	if n := count(`SELECT count(*) FROM pg_namespace WHERE nspname = 'parapply'`); n != 0 {
		t.Errorf("schema parapply is still there after the last slot was dropped")
	}
	// Dropping again, with the schema gone, finds nothing to do.
	if out, err := runOnce(t, "drop", "--source", src, "--target", dst, "--slot", "cut"); err != nil || !strings.Contains(out, "publisher: no slot cut") {
		t.Errorf("drop after the schema went: %v\n%s", err, out)
	}
	if n := count(`SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'parapply_%'`); n != 0 {
		t.Errorf("%d replication origins left after the drops", n)
	}
	if n := count(`SELECT count(*) FROM pg_replication_slots`); n != 0 {
		t.Errorf("%d slots left on the publisher after the drops", n)
	}

	// The build says what it is.
	v, err := exec.Command(parapplyBinary(t), "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(v), "parapply ") || !strings.Contains(string(v), "built with go") || strings.Contains(string(v), "parapply dev,") {
		t.Errorf("parapply version: %q (%v)", v, err)
	}
}
