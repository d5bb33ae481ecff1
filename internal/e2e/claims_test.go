package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/subscriber"
)

// TestOneWriterPerTable: a slot claims the target tables it applies; a
// second slot whose publication takes in one of them is refused at once,
// naming both slots and the table, leaving no slot on the publisher,
// unless shared_tables is on. A second parapply process started on a slot
// another holds stops at once (exit status 3), naming the holder's pid and
// host, without riding the busy slot out as a fault.
func TestOneWriterPerTable(t *testing.T) {
	e := newEnv(t, `CREATE TABLE a (id int PRIMARY KEY, v text); CREATE TABLE b (id int PRIMARY KEY, v text)`)
	e.exec(e.pub, `CREATE PUBLICATION pub_b FOR TABLE b`)
	ctx := context.Background()
	r := e.start(e.config("one"))
	e.exec(e.pub, `INSERT INTO a VALUES (1, 'a'); INSERT INTO b VALUES (1, 'b')`)
	e.waitCaughtUp(r)

	two := e.config("two")
	two.Source.Publications = []string{"pub_b"}
	err := runUntilStopped(two)
	if err == nil || !errors.Is(err, subscriber.ErrPermanent) {
		t.Fatalf("a second slot applying to a claimed table: %v, want a refusal marked permanent", err)
	}
	for _, want := range []string{"slot two", "slot one", "public.b", "shared_tables = on"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %q", err, want)
		}
	}
	var slots int
	if err := e.pub.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'two'`).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if slots != 0 {
		t.Errorf("the refused start left slot two on the publisher")
	}

	// The overlap wanted: the second slot starts (what two writers of one
	// table then meet is the user's to resolve).
	two.SharedTables = true
	r2 := e.start(two)
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	e.exec(e.pub, `INSERT INTO b VALUES (2, 'b')`)
	e.waitCaughtUp(r)
	e.verify("a", "b")

	// A second process on slot one, which this test's process holds.
	out, err := runOnce(t, "run", "--source", e.sourceDSN(), "--target", e.targetDSN(), "--publication", "pub", "--slot", "one")
	ee, ok := errors.AsType[*exec.ExitError](err)
	if !ok || ee.ExitCode() != 3 {
		t.Fatalf("a second process on a held slot: %v, want exit status 3; output:\n%s", err, out)
	}
	for _, want := range []string{"slot one is held by another parapply pid", "on host", "stop that one first"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "a fault ended the run"); n > 0 {
		t.Errorf("the second process rode the held slot out as a fault %d times:\n%s", n, out)
	}

	// The same holder as recorded by a process on another host, which
	// cannot be seen alive from here: the busy slot is waited for (a dying
	// walsender's, perhaps) and, when the wait ends, the holder is named.
	e.exec(e.sub, `UPDATE parapply.slot_claims SET host = 'replica-b.internal' WHERE slot_name = 'one'`)
	out, err = runOnce(t, "run", "--source", e.sourceDSN(), "--target", e.targetDSN(), "--publication", "pub", "--slot", "one")
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 1 {
		t.Fatalf("a second process on a slot held from another host: %v, want exit status 1 (a fault that outlasted its wait); output:\n%s", err, out)
	}
	for _, want := range []string{"the target records parapply pid", "on host replica-b.internal", "as slot one's holder", "still so after"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	e.exec(e.sub, `UPDATE parapply.slot_claims SET host = $1 WHERE slot_name = 'one'`, func() string { h, _ := os.Hostname(); return h }())

	// A start that finds the slot free on the publisher (as between a
	// holder's creating it and streaming from it) but its lock on the
	// target held by a live parapply on this host, as slot_claims records
	// it: refused at once, naming the holder, not waited for.
	holder := exec.Command("sleep", "120")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Process.Kill(); _ = holder.Wait() }()
	lockConn, err := pgx.Connect(ctx, e.pair.Subscriber.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer lockConn.Close(ctx)
	host, _ := os.Hostname()
	e.exec(lockConn, `SELECT pg_advisory_lock_shared(hashtextextended('parapply slot ' || 'three', 0))`)
	e.exec(lockConn, `INSERT INTO parapply.slot_claims VALUES ('three', $1, $2, 'parapply holder', pg_backend_pid(), now())`, host, holder.Process.Pid)
	began := time.Now()
	err = runUntilStopped(e.config("three"))
	if err == nil || !errors.Is(err, subscriber.ErrPermanent) || !strings.Contains(err.Error(), fmt.Sprintf("slot three is held by another parapply pid %d", holder.Process.Pid)) {
		t.Fatalf("a start whose slot's lock a live parapply holds: %v after %s, want a refusal naming pid %d", err, time.Since(began).Round(time.Millisecond), holder.Process.Pid)
	}
	if waited := time.Since(began); waited > 30*time.Second {
		t.Errorf("the refusal came after %s, want it at once", waited)
	}
	if s := e.slots("three"); len(s) != 0 {
		t.Errorf("the refused start left slots %v on the publisher", s)
	}
}
