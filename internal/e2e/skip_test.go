package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestSkip: a source transaction that cannot be applied (it inserts a key
// the target already holds) stops parapply with its commit LSN; parapply
// skip --lsn with that LSN makes the next start pass it, none of its
// changes applied, and everything after it applied; a large streamed one
// (applied in flight, then at commit) the same. The request is gone once
// the target has passed it, and a later start applies nothing twice. skip
// refuses an LSN the target has applied and a slot it does not know.
func TestSkip(t *testing.T) {
	e := newEnv(t, `CREATE TABLE dup (id int PRIMARY KEY, v text)`)
	ctx := context.Background()
	e.exec(e.sub, `INSERT INTO dup VALUES (5, 'on the target'), (7000, 'on the target too')`)
	e.exec(e.pub, `SELECT pg_create_logical_replication_slot('skipper', 'pgoutput')`)
	e.exec(e.pub, `INSERT INTO dup VALUES (1, 'a')`)
	e.exec(e.pub, `INSERT INTO dup VALUES (4, 'skipped'), (5, 'skipped')`)
	e.exec(e.pub, `INSERT INTO dup VALUES (6, 'after')`)
	e.exec(e.pub, `INSERT INTO dup SELECT g, repeat('s', 100) FROM generate_series(1000, 7000) g`) // streamed; 7000 is on the target
	e.exec(e.pub, `UPDATE dup SET v = 'updated' WHERE id = 1`)
	e.exec(e.pub, `INSERT INTO dup VALUES (8, 'last')`)

	cfg := e.config("skipper")
	cfg.CopyData = false
	cfg.Source.Streaming, cfg.Source.DecodingWorkMem = true, "64kB"
	dst := e.pair.Subscriber.DSN("postgres")
	commitLSN := regexp.MustCompile(`\(commit ([0-9A-F]+/[0-9A-F]+)`)
	skipNext := func(what string) {
		t.Helper()
		err := runUntilStopped(cfg)
		if err == nil {
			t.Fatalf("%s: parapply stopped without an error", what)
		}
		m := commitLSN.FindStringSubmatch(err.Error())
		if m == nil || !strings.Contains(err.Error(), "conflict insert_exists on public.dup") {
			t.Fatalf("%s: the error names no commit LSN or no duplicate key: %v", what, err)
		}
		t.Logf("%s: %v", what, err)
		xerr, out := runOnce(t, "skip", "--target", dst, "--slot", "skipper", "--lsn", m[1])
		if xerr != nil || !strings.Contains(out, "will be skipped") {
			t.Fatalf("parapply skip --lsn %s: %v\n%s", m[1], xerr, out)
		}
	}
	skipNext("the small transaction")
	skipNext("the streamed transaction")

	r := e.start(cfg)
	e.waitCaughtUp(r)
	if got := r.s.Status().Skipped; got != 1 {
		t.Errorf("status counts %d skipped transactions in this run, want 1", got)
	}
	r.stop()
	want := map[int]string{1: "updated", 5: "on the target", 6: "after", 7000: "on the target too", 8: "last"}
	check := func(when string) {
		t.Helper()
		rows, _ := e.sub.Query(ctx, `SELECT id, v FROM dup`)
		got := map[int]string{}
		var id int
		var v string
		for rows.Next() {
			if err := rows.Scan(&id, &v); err != nil {
				t.Fatal(err)
			}
			got[id] = v
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: the target holds %d rows, want %d (%v)", when, len(got), len(want), want)
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: row %d is %q, want %q", when, k, got[k], v)
			}
		}
	}
	check("after the skips")

	// Started again: the request is done with and removed, and nothing of
	// the skipped transactions is applied.
	e.exec(e.pub, `INSERT INTO dup VALUES (9, 'later')`)
	want[9] = "later"
	r = e.start(cfg)
	e.waitCaughtUp(r)
	r.stop()
	check("after another start")
	var left int
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM parapply.skip`).Scan(&left); err != nil || left != 0 {
		t.Errorf("parapply.skip holds %d rows after the target passed the request (%v), want 0", left, err)
	}

	e.exec(e.sub, `CREATE DATABASE never_applied`)
	fresh := strings.Replace(dst, "dbname=postgres", "dbname=never_applied", 1)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--slot", "skipper", "--lsn", "0/10"}, "applied already"},
		{[]string{"--target", fresh, "--slot", "skipper", "--lsn", "0/10"}, "no progress recorded for this slot"},
		{[]string{"--slot", "nosuchslot", "--lsn", "0/10"}, "no progress recorded for this slot"},
		{[]string{"--slot", "skipper", "--lsn", "later"}, "invalid --lsn"},
	} {
		err, out := runOnce(t, append([]string{"skip", "--target", dst}, c.args...)...)
		if err == nil || !strings.Contains(out, c.want) {
			t.Errorf("parapply skip %v: %v, %q; want an error with %q", c.args, err, out, c.want)
		}
	}
	// A target parapply never ran on is left as it was.
	c, err := pgx.Connect(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var schemas int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'parapply'`).Scan(&schemas); err != nil || schemas != 0 {
		t.Errorf("parapply skip on a target parapply never ran on created the parapply schema (%d, %v)", schemas, err)
	}
}
