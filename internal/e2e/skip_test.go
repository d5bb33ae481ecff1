package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/subscriber"
)

// dupEnv makes the skip tests' table dup, where the target holds rows of its
// own (5 and other) that the publisher will insert too, and their slot,
// made before any change.
func dupEnv(t *testing.T, slot string, other int) (*env, context.Context) {
	e := newEnv(t, `CREATE TABLE dup (id int PRIMARY KEY, v text)`)
	e.exec(e.sub, `INSERT INTO dup VALUES (5, 'on the target'), ($1, 'on the target too')`, other)
	e.exec(e.pub, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
	return e, context.Background()
}

// TestSkip: a source transaction that cannot be applied (it inserts a key
// the target already holds) stops parapply with its commit LSN; parapply
// skip --lsn with that LSN makes the next start pass it, none of its
// changes applied, and everything after it applied; a large streamed one
// (applied in flight, then at commit) the same. The request is gone once
// the target has passed it, and a later start applies nothing twice. skip
// refuses an LSN the target has applied and a slot it does not know.
func TestSkip(t *testing.T) {
	e, ctx := dupEnv(t, "skipper", 7000)
	e.exec(e.pub, `INSERT INTO dup VALUES (1, 'a')`)
	e.exec(e.pub, `INSERT INTO dup VALUES (4, 'skipped'), (5, 'skipped')`)
	e.exec(e.pub, `INSERT INTO dup VALUES (6, 'after')`)
	e.exec(e.pub, `INSERT INTO dup SELECT g, repeat('s', 100) FROM generate_series(1000, 7000) g`) // streamed; 7000 is on the target
	e.exec(e.pub, `UPDATE dup SET v = 'updated' WHERE id = 1`)
	e.exec(e.pub, `INSERT INTO dup VALUES (8, 'last')`)

	cfg := e.config("skipper")
	cfg.CopyData = false
	cfg.Source.Streaming, cfg.Source.DecodingWorkMem = true, "64kB"
	dst := e.targetDSN()
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
		out, xerr := runOnce(t, "skip", "--target", dst, "--slot", "skipper", "--lsn", m[1])
		if xerr != nil || !strings.Contains(out, "will be skipped") {
			t.Fatalf("parapply skip --lsn %s: %v\n%s", m[1], xerr, out)
		}
	}
	// The first stop by the command, its target given with a password:
	// the skip command it prints runs as printed, and holds no password.
	out, err := runOnce(t, "run", "--source", e.pair.Publisher.DSN("postgres"), "--target", dst+" password=secret",
		"--publication", "pub", "--slot", "skipper", "--copy-data", "off", "--streaming", "on", "--logical-decoding-work-mem", "64kB",
		"--reconnect-timeout", "0")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	m := regexp.MustCompile(`HINT: .*: (parapply skip .*)$`).FindStringSubmatch(last)
	if err == nil || m == nil || strings.Contains(out, "secret") {
		t.Fatalf("parapply run stopped (%v) with no skip command, or printed the password:\n%s", err, out)
	}
	lsn := commitLSN.FindStringSubmatch(last)
	if want := "parapply skip --target '" + dst + "' --slot skipper --lsn " + lsn[1]; m[1] != want {
		t.Fatalf("the printed skip command is\n%s\nwant\n%s", m[1], want)
	}
	words := shellWords(t, m[1])
	if xout, xerr := runOnce(t, words[1:]...); xerr != nil || !strings.Contains(xout, "will be skipped") {
		t.Fatalf("%s, run as printed: %v\n%s", m[1], xerr, xout)
	}
	skipNext("the streamed transaction")

	r := e.start(cfg)
	e.waitCaughtUp(r)
	if got := r.s.Status().Skipped; got != 1 {
		t.Errorf("status counts %d skipped transactions in this run, want 1", got)
	}
	_ = r.stop()
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
	_ = r.stop()
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
		out, err := runOnce(t, append([]string{"skip", "--target", dst}, c.args...)...)
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

// TestSkipGroup: two source transactions that cannot be applied, committed
// back to back (so that they arrive in one group), are skipped one after the
// other: the run stops on the first; skipped, the next run applies it as an
// empty transaction that marks the request done and stops on the second; a
// start in between (as after a kill before the second request) does not
// stop on the first again, nor skip it again; the second skipped, the next
// start applies past both, each skipped exactly once, and the target equals
// the publisher but for those two transactions' rows. parapply skip --list
// says which requests are pending, skipped and passed (each line matched
// by a regular expression).
func TestSkipGroup(t *testing.T) {
	e, ctx := dupEnv(t, "grouped", 15)
	e.exec(e.pub, `INSERT INTO dup VALUES (1, 'before')`)
	e.exec(e.pub, `BEGIN; INSERT INTO dup VALUES (4, 'skipped'), (5, 'skipped'); COMMIT; BEGIN; INSERT INTO dup VALUES (14, 'skipped'), (15, 'skipped'); COMMIT`)
	e.exec(e.pub, `INSERT INTO dup VALUES (20, 'after')`)
	e.exec(e.pub, `UPDATE dup SET v = 'updated' WHERE id = 1`)
	e.exec(e.pub, `INSERT INTO dup SELECT g, 'many' FROM generate_series(100, 300) g`)

	cfg := e.config("grouped")
	cfg.CopyData = false
	dst := e.targetDSN()
	commitLSN := regexp.MustCompile(`\(commit ([0-9A-F]+/[0-9A-F]+)`)
	// stops runs parapply until it stops on a transaction and checks that
	// the error names key; it returns that transaction's commit LSN and
	// how many transactions the run skipped.
	stops := func(what, key string) (string, int64) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		s := subscriber.New(cfg)
		err := s.Run(rctx)
		if err == nil {
			t.Fatalf("%s: parapply stopped without an error", what)
		}
		m := commitLSN.FindStringSubmatch(err.Error())
		if m == nil || !strings.Contains(err.Error(), "conflict insert_exists on public.dup, key "+key) {
			t.Fatalf("%s: the error names no commit LSN or not key %s: %v", what, key, err)
		}
		t.Logf("%s: %v", what, err)
		return m[1], s.Status().Skipped
	}
	skip := func(lsn string) {
		t.Helper()
		if out, err := runOnce(t, "skip", "--target", dst, "--slot", "grouped", "--lsn", lsn); err != nil || !strings.Contains(out, "will be skipped") {
			t.Fatalf("parapply skip --lsn %s: %v\n%s", lsn, err, out)
		}
	}
	list := func(when string, want ...string) {
		t.Helper()
		out, err := runOnce(t, "skip", "--target", dst, "--slot", "grouped", "--list")
		if err != nil {
			t.Fatalf("%s: parapply skip --list: %v\n%s", when, err, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != len(want) {
			t.Fatalf("%s: parapply skip --list printed %d lines, want %d (%q):\n%s", when, len(lines), len(want), want, out)
		}
		for i, w := range want {
			if !regexp.MustCompile(w).MatchString(lines[i]) {
				t.Errorf("%s: parapply skip --list line %d is %q, want it to hold %q", when, i+1, lines[i], w)
			}
		}
	}

	first, _ := stops("the first transaction", `{"id": "5"}`)
	skip(first)
	list("after the first request", first+" pending")
	second, n := stops("the second transaction", `{"id": "15"}`)
	if n != 1 {
		t.Errorf("the run that skipped the first transaction counts %d skipped, want 1", n)
	}
	if second == first {
		t.Fatalf("the run after the first skip stopped on the first transaction (%s) again", first)
	}
	// Skipped and passed; with workers the group's retry one at a time may
	// have started past it already, and removed it.
	list("after the first skip", first+` skipped at .*; passed \(removed at the next start\)|no skip requests`)
	// Started again before the second request (as after a kill): the
	// first is done with, neither skipped again nor failing again.
	if again, n := stops("a start in between", `{"id": "15"}`); again != second || n != 0 {
		t.Errorf("a start in between stopped on %s and skipped %d transactions, want %s and 0", again, n, second)
	}
	skip(second)
	list("after the second request", second+" pending") // the start in between removed the first

	r := e.start(cfg)
	e.waitCaughtUp(r)
	if got := r.s.Status().Skipped; got != 1 {
		t.Errorf("the last run counts %d skipped transactions, want 1 (the second)", got)
	}
	_ = r.stop()
	list("after the second skip", second+` skipped at .*; passed`)
	rows := func(c *pgx.Conn, q string) string {
		t.Helper()
		var s string
		if err := c.QueryRow(ctx, q).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	const pubRows = `SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM dup WHERE id NOT IN (4, 5, 14, 15)`
	const subRows = `SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM dup WHERE id NOT IN (5, 15)`
	want := rows(e.pub, pubRows)
	check := func(when string) {
		t.Helper()
		if got := rows(e.sub, subRows); got != want {
			t.Errorf("%s: the target holds\n\t%s\nwant the publisher's rows but the skipped transactions'\n\t%s", when, got, want)
		}
		if got := rows(e.sub, `SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM dup WHERE id IN (4, 5, 14, 15)`); got != "5:on the target,15:on the target too" {
			t.Errorf("%s: the rows the skipped transactions would have written are %s on the target, want the target's own: 5:on the target,15:on the target too", when, got)
		}
	}
	check("after the skips")

	// Another start removes both requests, and applies nothing twice.
	e.exec(e.pub, `INSERT INTO dup VALUES (21, 'later')`)
	want = rows(e.pub, pubRows)
	r = e.start(cfg)
	e.waitCaughtUp(r)
	if got := r.s.Status().Skipped; got != 0 {
		t.Errorf("a start after both skips counts %d skipped transactions, want 0", got)
	}
	_ = r.stop()
	check("after another start")
	list("after another start", "no skip requests")
}

// shellWords splits a command line as a POSIX shell does, for the words
// and single quotes parapply's printed commands use.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	in, quoted := false, false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			w.WriteByte(c)
		case c == '\'':
			quoted, in = true, true
		case c == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
			in = true
		case c == ' ':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if quoted {
		t.Fatalf("unterminated quote in %q", line)
	}
	if in {
		words = append(words, w.String())
	}
	return words
}
