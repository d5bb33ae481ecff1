package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/internal/verify"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/targetdb"
)

// originLimitSettings are the target's settings (beside fast) that let n
// replication origins hold state: max_active_replication_origins, or
// max_replication_slots before PostgreSQL 18.
func originLimitSettings(t *testing.T, n int) map[string]string {
	t.Helper()
	major, err := pgtest.Major()
	if err != nil {
		t.Fatal(err)
	}
	sub := maps.Clone(fast)
	if major >= 18 {
		sub["max_active_replication_origins"] = strconv.Itoa(n)
	} else {
		sub["max_replication_slots"] = strconv.Itoa(n)
	}
	return sub
}

// logBuffer collects a subscriber's log for a test to search.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// originTarget starts a publisher and a target whose cluster lets ten
// replication origins hold state (PostgreSQL 18's default
// max_active_replication_origins; max_replication_slots before 18), with a
// table t holding rows to copy, and a least-privilege target role applier
// with the grants the README lists; it returns the role's DSN for a
// target database.
func originTarget(t *testing.T) (*env, func(db string) string) {
	// Four tables, so that four copy workers each take one.
	e := newEnvSettings(t, `CREATE TABLE t (id int PRIMARY KEY, v text); CREATE TABLE t2 (LIKE t INCLUDING ALL);
		CREATE TABLE t3 (LIKE t INCLUDING ALL); CREATE TABLE t4 (LIKE t INCLUDING ALL)`, fast, originLimitSettings(t, 10))
	for _, tb := range copied {
		e.exec(e.pub, `INSERT INTO `+tb+` SELECT g, 'copied' FROM generate_series(1, 20000) g`)
	}
	e.exec(e.sub, `CREATE ROLE applier LOGIN; GRANT SET ON PARAMETER session_replication_role TO applier`)
	return e, func(db string) string {
		return strings.Replace(e.pair.Subscriber.DSN(db), "user=postgres", "user=applier", 1)
	}
}

// grantApplier readies database db of the target for the role applier:
// the table t, and the privileges the README lists.
func (e *env) grantApplier(c *pgx.Conn, db string) {
	e.t.Helper()
	e.exec(c, `GRANT CREATE ON DATABASE `+db+` TO applier; GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON t, t2, t3, t4 TO applier;
		GRANT EXECUTE ON FUNCTION `+targetdb.OriginFunctions+` TO applier`)
}

// copied are the tables originTarget makes, each holding rows to copy.
var copied = []string{"t", "t2", "t3", "t4"}

// heldOrigins lists the origins holding a state slot on the target cluster
// whose names start with prefix.
func (e *env) heldOrigins(prefix string) []string {
	e.t.Helper()
	var names []string
	err := e.sub.QueryRow(context.Background(), `SELECT coalesce(array_agg(external_id ORDER BY external_id), '{}') FROM pg_replication_origin_status WHERE starts_with(external_id, $1)`, prefix).Scan(&names)
	if err != nil {
		e.t.Fatal(err)
	}
	return names
}

// TestOriginsAlwaysFit: on a target cluster with ten origin states, runs
// of one slot at workers 4 (with a copy by four copy workers and a
// streamed transaction applied in flight), 0, 8 and 4 all stream, each
// dropping the origins it no longer uses (the copy workers' once the copy
// is done, workers' above the count), and a second slot in another
// database of the cluster starts beside the first, with what is left. Once
// that database is dropped, its origins are reported at the next start
// with the statements that drop them. A cluster whose origin states are all
// held by others refuses the start at once, naming them, with
// ErrPermanent, instead of failing again and again.
func TestOriginsAlwaysFit(t *testing.T) {
	e, dsn := originTarget(t)
	e.grantApplier(e.sub, "postgres")
	ctx := context.Background()
	run := func(slot string, workers int, target string, logs *logBuffer) *running {
		cfg := e.config(slot)
		cfg.Target.DSN = target
		cfg.Workers, cfg.AutoWorkers, cfg.StreamWorkers, cfg.CopyWorkers = workers, false, 2, 4
		cfg.CopyData = true
		cfg.Source.Streaming, cfg.Source.DecodingWorkMem = true, "64kB"
		if logs != nil {
			cfg.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		}
		return e.start(cfg)
	}
	next := 20000
	write := func(r *running) {
		// Small transactions, and one large enough to be streamed (applied
		// in flight with stream_workers = 2).
		for i := 0; i < 20; i++ {
			e.exec(e.pub, `INSERT INTO t SELECT g, 'small' FROM generate_series($1::int + 1, $1::int + 10) g`, next)
			next += 10
		}
		e.exec(e.pub, `INSERT INTO t SELECT g, repeat('s', 200) FROM generate_series($1::int + 1, $1::int + 3000) g`, next)
		next += 3000
		e.exec(e.pub, `UPDATE t SET v = 'updated' WHERE id % 7 = 0`)
		e.waitCaughtUp(r)
		e.verify(copied...)
	}
	count := func(names []string, kind string) int {
		n := 0
		for _, name := range names {
			if k, _, ok := targetdb.ParseOrigin("fit", name); ok && string(k) == kind {
				n++
			}
		}
		return n
	}

	r := run("fit", 4, dsn("postgres"), nil)
	write(r)
	if st := r.s.Status(); st.StreamedInFlight == 0 {
		t.Errorf("no streamed transaction was applied in flight (status %+v)", st)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	held := e.heldOrigins("parapply_fit")
	t.Logf("after workers 4: %v", held)
	if n := count(held, "c"); n != 0 {
		t.Errorf("copy workers' origins still hold state after the copy: %v", held)
	}
	if n := count(held, "w"); n == 0 || n > 4 {
		t.Errorf("after a run at workers 4, origins of %d workers hold state: %v", n, held)
	}

	r = run("fit", 0, dsn("postgres"), nil)
	write(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	held = e.heldOrigins("parapply_fit")
	t.Logf("after workers 0: %v", held)
	if n := count(held, "w"); n != 0 {
		t.Errorf("after a run at workers 0, workers' origins still hold state: %v", held)
	}

	r = run("fit", 8, dsn("postgres"), nil)
	write(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	held = e.heldOrigins("")
	t.Logf("after workers 8: %v", held)
	if len(held) > 10 {
		t.Fatalf("%d origins hold state on a target that allows 10: %v", len(held), held)
	}
	if n := count(held, "w"); n != 7 {
		t.Errorf("a run at workers 8 beside the reader and two stream sessions on a target of ten origin states: %d workers' origins hold state, want 7: %v", n, held)
	}

	// Back to workers 4, and a second slot in another database of the
	// cluster beside it.
	r = run("fit", 4, dsn("postgres"), nil)
	e.exec(e.sub, `CREATE DATABASE other`)
	other, err := pgx.Connect(ctx, e.pair.Subscriber.DSN("other"))
	if err != nil {
		t.Fatal(err)
	}
	e.exec(other, `CREATE TABLE t (id int PRIMARY KEY, v text); CREATE TABLE t2 (LIKE t INCLUDING ALL);
		CREATE TABLE t3 (LIKE t INCLUDING ALL); CREATE TABLE t4 (LIKE t INCLUDING ALL)`)
	e.grantApplier(other, "other")
	r2 := run("fit2", 4, dsn("other"), nil)
	write(r)
	e.waitCaughtUp(r2)
	if _, err := verify.Tables(ctx, e.pub, other, copied...); err != nil {
		t.Fatalf("the second slot's target: %v", err)
	}
	held = e.heldOrigins("")
	t.Logf("two slots: %v", held)
	if len(held) > 10 {
		t.Fatalf("%d origins hold state on a target that allows 10: %v", len(held), held)
	}
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	// The second database goes, its origins stay: reported at the next
	// start, with the statements that drop them.
	other.Close(ctx)
	e.exec(e.sub, `DROP DATABASE other WITH (FORCE)`)
	left := e.heldOrigins("parapply_fit2")
	if len(left) == 0 {
		t.Fatal("the dropped database's slot left no origin holding state; the test no longer tests the report")
	}
	var logs logBuffer
	r = run("fit", 4, dsn("postgres"), &logs)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	out := logs.String()
	for _, name := range left {
		if !strings.Contains(out, "pg_replication_origin_drop('"+name+"')") {
			t.Errorf("the start did not report origin %s, which no slot uses; log:\n%s", name, out)
		}
	}
	for _, name := range e.heldOrigins("parapply_fit_") {
		if strings.Contains(out, "'"+name+"'") {
			t.Errorf("the start reported its own origin %s as unused; log:\n%s", name, out)
		}
	}

	// Every origin state held by others: refused at once, naming them.
	// (A backend of the last run may be a moment from its exit.)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		_, err := e.sub.Exec(ctx, `SELECT pg_replication_origin_drop(external_id) FROM pg_replication_origin_status`)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 10; i++ {
		e.exec(e.sub, fmt.Sprintf(`SELECT pg_replication_origin_create('other_%d'); SELECT pg_replication_origin_session_setup('other_%d'); SELECT pg_replication_origin_session_reset()`, i, i))
	}
	cfg := e.config("fit3")
	cfg.Target.DSN = dsn("postgres")
	cfg.SharedTables = true            // beside slot fit, which claimed t
	cfg.ReconnectTimeout = time.Minute // not taken: nothing a retry could change
	began := time.Now()
	err = runUntilStopped(cfg)
	if err == nil || !errors.Is(err, subscriber.ErrPermanent) || !strings.Contains(err.Error(), "no free replication origin state") ||
		!strings.Contains(err.Error(), "pg_replication_origin_drop('other_1')") {
		t.Fatalf("a start on a target whose origin states are all held: %v; want a refusal naming them, marked permanent", err)
	}
	if d := time.Since(began); d > 30*time.Second {
		t.Errorf("the refusal took %s", d)
	}
	var slots int
	if err := e.pub.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'fit3'`).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	if slots != 0 {
		t.Errorf("the refused start left slot fit3 on the publisher")
	}
	// Three freed: the slot starts with one worker and one stream session.
	e.exec(e.sub, `SELECT pg_replication_origin_drop('other_' || g) FROM generate_series(1, 3) g`)
	cfg.Workers, cfg.StreamWorkers = 4, 2
	r = e.start(cfg)
	e.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if held := e.heldOrigins(""); len(held) > 10 || !slices.Contains(held, "parapply_fit3") {
		t.Errorf("origins holding state: %v", held)
	}
}
