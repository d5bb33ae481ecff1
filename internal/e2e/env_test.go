// Package e2e holds end-to-end tests: a real publisher and target started by
// the embedded harness, parapply in between, and the target compared with the
// publisher row for row.
package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/internal/verify"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/subscriber"
)

type env struct {
	t      *testing.T
	histMu sync.Mutex
	hist   map[int][]string // what a test's writer did to each row, for diagnosis
	pair   *pgtest.Pair
	pub    *pgx.Conn
	sub    *pgx.Conn
	log    *logTail // the subscribers' log, shown when the test fails
	// nodes are a Citus target's workers, whose sessions a failure shows
	// too.
	nodes []*pgtest.Server
	// superuser, when set, says why parapply runs as superuser on these
	// servers rather than as the least-privilege roles.
	superuser string
}

// logTail keeps the last logTailSize bytes written to it: the subscribers'
// log of a test run without -v, printed only if the test fails, so that a
// failure in CI shows what parapply did.
type logTail struct {
	mu  sync.Mutex
	buf []byte
}

const logTailSize = 256 << 10

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - logTailSize; over > logTailSize {
		// Trimmed once it holds twice the tail: a copy per tail's
		// worth of log, not per line.
		l.buf = append(l.buf[:0], l.buf[over:]...)
	}
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf[max(len(l.buf)-logTailSize, 0):])
}

var fast = map[string]string{"fsync": "off", "full_page_writes": "off", "synchronous_commit": "off"}

// newEnv starts a publisher and a target, creates schema on both and a
// publication "pub" for all tables on the publisher.
func newEnv(t *testing.T, schema string) *env {
	t.Helper()
	return newEnvSettings(t, schema, fast, fast)
}

// newEnvSettings is newEnv with the servers' settings given.
func newEnvSettings(t *testing.T, schema string, pubSettings, subSettings map[string]string) *env {
	t.Helper()
	return newEnvWith(t, schema, pgtest.Options{Settings: pubSettings}, pgtest.Options{Settings: subSettings})
}

// newEnvWith is newEnv with the servers' options given.
func newEnvWith(t *testing.T, schema string, pubOpts, subOpts pgtest.Options) *env {
	t.Helper()
	ctx := context.Background()
	pair, err := pgtest.StartPairWith(ctx, pubOpts, subOpts)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, pair: pair, log: &logTail{}}
	t.Cleanup(func() {
		if t.Failed() {
			if tail := e.log.String(); tail != "" {
				t.Logf("the subscribers' log (its last %d kB):\n%s", logTailSize>>10, tail)
			}
		}
		if e.pub != nil {
			e.pub.Close(context.Background())
		}
		if e.sub != nil {
			e.sub.Close(context.Background())
		}
		pair.Stop()
	})
	if e.pub, err = pgx.Connect(ctx, pair.Publisher.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	if e.sub, err = pgx.Connect(ctx, pair.Subscriber.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	e.exec(e.pub, rolesSQL(t, "publisher"))
	e.exec(e.sub, rolesSQL(t, "target"))
	if schema != "" {
		e.both(schema)
		e.exec(e.pub, "CREATE PUBLICATION pub FOR ALL TABLES")
	}
	return e
}

// The least-privilege roles parapply runs as in the tests (named apart
// from docs/operations.md's repl and apply, which TestOperationsRoles
// makes on the same servers).
const (
	replRole  = "e2e_repl"
	applyRole = "e2e_apply"
)

// rolesSQL is docs/operations.md's block for side ("publisher" or
// "target") as the harness runs it on every pair: database postgres,
// schema public, the roles replRole and applyRole, no publication (newEnv
// makes its own), and the default privileges for every schema of the
// database rather than one, since tests make schemas of their own.
func rolesSQL(t *testing.T, side string) string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(operationsSQL(t, side), "\n") {
		if strings.HasPrefix(line, "CREATE PUBLICATION") {
			continue
		}
		out = append(out, line)
	}
	sql := strings.Join(out, "\n")
	sql = strings.ReplaceAll(sql, "ALTER DEFAULT PRIVILEGES IN SCHEMA shop", "ALTER DEFAULT PRIVILEGES")
	sql = docNames.ReplaceAllStringFunc(sql, func(w string) string {
		return map[string]string{"shop": "public", "app": "postgres", "repl": replRole, "apply": applyRole}[w]
	})
	role := map[string]string{"publisher": replRole, "target": applyRole}[side]
	return sql + "\nALTER DEFAULT PRIVILEGES GRANT USAGE ON SCHEMAS TO " + role
}

// docNames are the names docs/operations.md's blocks use that the harness
// replaces.
var docNames = regexp.MustCompile(`\b(shop|app|repl|apply)\b`)

// sourceDSN is the publisher's connection string as the replication role
// (as superuser where e.superuser says why).
func (e *env) sourceDSN() string {
	if e.superuser != "" {
		return e.superSource()
	}
	return e.pair.Publisher.DSNAs("postgres", replRole)
}

// targetDSN is the target's connection string as the apply role (as
// superuser where e.superuser says why).
func (e *env) targetDSN() string {
	if e.superuser != "" {
		return e.superTarget()
	}
	return e.pair.Subscriber.DSNAs("postgres", applyRole)
}

// superSource is the publisher's connection string as superuser, for a
// test whose parapply needs it (the test says why).
func (e *env) superSource() string { return e.pair.Publisher.DSN("postgres") }

// superTarget is the target's connection string as superuser, as
// superSource.
func (e *env) superTarget() string { return e.pair.Subscriber.DSN("postgres") }

// applyOwnsTables makes the apply role own every table of the target's
// schema public (partitions too) and may create in it, as
// docs/operations.md asks of the features that change a table's
// definition: copy_defer_indexes drops and rebuilds indexes (made in the
// table's schema), detect_update_deleted adds a trigger, ddl = apply
// alters the tables and creates beside them.
func (e *env) applyOwnsTables() {
	e.t.Helper()
	e.exec(e.sub, `GRANT CREATE ON SCHEMA public TO `+applyRole+`;
		DO $$ DECLARE r regclass; BEGIN
		FOR r IN SELECT c.oid FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p') LOOP
			EXECUTE format('ALTER TABLE %s OWNER TO `+applyRole+`', r);
		END LOOP; END $$`)
}

func (e *env) exec(c *pgx.Conn, sql string, args ...any) {
	e.t.Helper()
	if _, err := c.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *env) both(sql string) {
	e.t.Helper()
	e.exec(e.pub, sql)
	e.exec(e.sub, sql)
}

// config is a subscriber's configuration for slot, running as the
// least-privilege roles of docs/operations.md (sourceDSN, targetDSN).
func (e *env) config(slot string) subscriber.Config {
	var w io.Writer = e.log
	if testing.Verbose() || os.Getenv("PARAPPLY_TEST_LOG") != "" {
		w = io.MultiWriter(os.Stderr, e.log) // e.log: what a test reads back
	}
	cfg := subscriber.Config{
		Source:        source.Config{DSN: e.sourceDSN(), Slot: slot, Publications: []string{"pub"}, AppName: "parapply test", StatusInterval: time.Second},
		Target:        apply.Config{DSN: e.targetDSN(), AppName: "parapply test apply", Slot: slot},
		Log:           slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Workers:       testWorkers(),
		StreamWorkers: 2,
		// As parapply runs by default; PARAPPLY_TEST_BINARY=off runs the
		// suite with values in text.
		DetectConflicts: true,
		Binary:          os.Getenv("PARAPPLY_TEST_BINARY") != "off",
	}
	if os.Getenv("PARAPPLY_TEST_WORKERS") == "switching" {
		cfg.AutoWorkers, cfg.AutoSwitchEvery = true, 5*time.Millisecond
	}
	return cfg
}

// testWorkers is the worker count the tests run parapply with:
// PARAPPLY_TEST_WORKERS, or 0 (the stream reader applies by itself);
// "switching" is workers = auto with 2 workers, switching between the
// reader and the workers every 5 ms whatever the load.
func testWorkers() int {
	if os.Getenv("PARAPPLY_TEST_WORKERS") == "switching" {
		return 2
	}
	n, _ := strconv.Atoi(os.Getenv("PARAPPLY_TEST_WORKERS"))
	return n
}

// running is a subscriber running in the test process.
type running struct {
	s      *subscriber.Subscriber
	cancel context.CancelFunc
	done   chan error
}

func (e *env) start(cfg subscriber.Config) *running {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{s: subscriber.New(cfg), cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- r.s.Run(ctx) }()
	select {
	case <-r.s.Ready():
	case err := <-r.done:
		cancel()
		e.t.Fatalf("subscriber did not start: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		e.t.Fatal("subscriber did not start within 60s")
	}
	e.t.Cleanup(func() { _ = r.stop() })
	return r
}

// stop stops the subscriber and returns the error it ended with.
func (r *running) stop() error {
	r.cancel()
	err := <-r.done
	r.done <- err
	return err
}

// publisherLSN is the publisher's current WAL position.
func (e *env) publisherLSN() parapply.LSN {
	e.t.Helper()
	var s string
	if err := e.pub.QueryRow(context.Background(), "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		e.t.Fatal(err)
	}
	l, err := parapply.ParseLSN(s)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// waitCaughtUp waits until the subscriber's durable position passes the
// publisher's current WAL position.
func (e *env) waitCaughtUp(r *running) {
	e.t.Helper()
	e.waitApplied(r)
}

// waitApplied waits as waitCaughtUp does and returns when the first change
// arrived (zero if none did), and the status once a second since the
// start: positions, transactions and the workers' busy time, for a
// failure to show.
func (e *env) waitApplied(r *running) (first time.Time, timeline string) {
	e.t.Helper()
	target := e.publisherLSN()
	began := time.Now()
	var tl strings.Builder
	from := r.s.Status().Received
	nudge, sample := began.Add(time.Second), began
	for deadline := began.Add(waitCaughtUpFor); time.Now().Before(deadline); {
		select {
		case err := <-r.done:
			r.done <- err
			e.t.Fatalf("subscriber stopped before catching up: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		st := r.s.Status()
		if first.IsZero() && st.Received > from {
			first = time.Now()
		}
		if time.Now().After(sample) {
			sample = sample.Add(time.Second)
			var txns int64
			var busy time.Duration
			for _, w := range st.Workers {
				txns += w.Txns
				busy += w.Busy
			}
			fmt.Fprintf(&tl, "  %5.1fs %s received %s applied %s durable %s, %d transactions applied by workers, workers busy %s\n",
				time.Since(began).Seconds(), st.State, st.Received, st.Applied, st.Durable, txns, busy.Round(time.Millisecond))
		}
		if st.Durable >= target {
			return first, tl.String()
		}
		e.nudge(&nudge)
	}
	e.t.Fatalf("subscriber did not reach %s within %s (status %+v); target sessions: %s; status by second:\n%s", target, waitCaughtUpFor, r.s.Status(), e.targetSessions(), tl.String())
	return time.Time{}, ""
}

// nudge writes a WAL record on the publisher, once a second (next): an
// idle walsender tells where it is once WAL follows the last record it
// sent, else when the server next logs its running transactions (every
// 15 s).
func (e *env) nudge(next *time.Time) {
	if time.Now().Before(*next) {
		return
	}
	*next = time.Now().Add(time.Second)
	if _, err := e.pub.Exec(context.Background(), "SELECT pg_catalog.pg_logical_emit_message(false, 'parapply-test', 'nudge')"); err != nil {
		e.t.Logf("writing WAL on the publisher: %v", err)
	}
}

// waitSlotConfirmed waits until the publisher's slot confirms the
// publisher's current WAL position (used when parapply runs as a process).
func (e *env) waitSlotConfirmed(slot string, timeout time.Duration, alive func() error) {
	e.t.Helper()
	target := e.publisherLSN()
	deadline := time.Now().Add(timeout)
	nudge := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if err := alive(); err != nil {
			e.t.Fatal(err)
		}
		e.nudge(&nudge)
		var s *string
		if err := e.pub.QueryRow(context.Background(), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&s); err == nil && s != nil {
			if l, _ := parapply.ParseLSN(*s); l >= target {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("slot %s did not confirm %s within %s", slot, target, timeout)
}

// verify compares the given tables row for row.
func (e *env) verify(tables ...string) {
	e.t.Helper()
	res, err := verify.Tables(context.Background(), e.pub, e.sub, tables...)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range res {
		e.t.Logf("%s: %d rows identical", r.Table, r.Rows)
	}
}

// targetSessions describes the target's client sessions, for a failure
// message.
func (e *env) targetSessions() string {
	c, err := pgx.Connect(context.Background(), e.pair.Subscriber.DSN("postgres"))
	if err != nil {
		return err.Error()
	}
	defer c.Close(context.Background())
	var out string
	err = c.QueryRow(context.Background(), `SELECT string_agg(format('pid %s %s state %s wait %s/%s blocked by %s: %s', pid, application_name, state, wait_event_type, wait_event,
		pg_blocking_pids(pid), left(query, 200)), E'\n') FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&out)
	if err != nil {
		return err.Error()
	}
	for _, n := range e.nodes {
		out += "\nsessions on " + n.Name + ":\n" + sessionsOn(n)
	}
	return out
}

// waitCaughtUpFor bounds waitCaughtUp (PARAPPLY_TEST_CATCHUP, default 3m).
var waitCaughtUpFor = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("PARAPPLY_TEST_CATCHUP")); err == nil {
		return d
	}
	return 3 * time.Minute
}()
