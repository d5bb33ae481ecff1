package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/internal/verify"
)

const failoverSchema = `CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
	CREATE TABLE audit (writer int, n bigint, account int, PRIMARY KEY (writer, n))`

// TestPublisherFailover: the publisher has a physical standby that
// synchronizes parapply's failover slot (PostgreSQL 17 and later), and
// synchronized_standby_slots keeps parapply from applying what the standby
// has not received. Under a four-client load the primary stops at once
// and the standby is promoted; parapply, whose source names both hosts
// with target_session_attrs=primary, goes on from the standby's copy of
// the slot, and the target ends equal to the new primary, audit rows
// included: nothing lost, nothing applied twice.
func TestPublisherFailover(t *testing.T) {
	if major, err := pgtest.PublisherMajor(); err != nil || major < 17 {
		t.Skipf("failover slots need PostgreSQL 17 or later (this is %d)", major)
	}
	for _, workers := range []int{0, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) { publisherFailover(t, workers) })
	}
}

func publisherFailover(t *testing.T, workers int) {
	ctx := context.Background()
	began := time.Now()
	rng := rand.New(rand.NewPCG(seed(t), 37))
	primary, err := pgtest.StartPublisher(ctx, pgtest.Options{Name: "primary", Settings: fast})
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Stop()
	// Slot synchronization off until parapply's slot exists: a sync
	// worker with nothing to synchronize backs off, up to 30 s a cycle.
	standby, err := pgtest.StartStandby(ctx, primary, "sb1", pgtest.Options{Name: "standby", BinDir: primary.BinDir,
		Settings: map[string]string{"fsync": "off", "synchronous_commit": "off", "sync_replication_slots": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	defer standby.Stop()
	target, err := pgtest.Start(ctx, pgtest.Options{Name: "target", Settings: fast})
	if err != nil {
		t.Fatal(err)
	}
	defer target.Stop()
	pc := mustConnect(t, primary.DSN("postgres"))
	tc := mustConnect(t, target.DSN("postgres"))
	sc := mustConnect(t, standby.DSN("postgres"))
	mustExec(t, pc, rolesSQL(t, "publisher"))
	mustExec(t, tc, rolesSQL(t, "target"))
	for _, c := range []*pgx.Conn{pc, tc} {
		mustExec(t, c, failoverSchema)
	}
	mustExec(t, pc, `INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 100) g; CREATE PUBLICATION pub FOR ALL TABLES`)
	mustExec(t, pc, `ALTER SYSTEM SET synchronized_standby_slots = 'sb1'`)
	mustExec(t, pc, `SELECT pg_reload_conf()`)
	// Both servers, the primary first: the writers' (superuser, the
	// application) and parapply's (the replication role).
	both := func(user string) string {
		return fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d user=%s dbname=postgres sslmode=disable target_session_attrs=primary connect_timeout=5", primary.Port, standby.Port, user)
	}
	metricsPort, err := pgtest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := startProcess(t, "run", "--source", both(replRole), "--target", target.DSNAs("postgres", applyRole), "--publication", "pub", "--slot", "fo",
		"--workers", strconv.Itoa(workers), "--reconnect-timeout", "2min", "--status-interval", "1s", "--metrics-addr", fmt.Sprintf("127.0.0.1:%d", metricsPort))
	defer func() { _ = p.cmd.Process.Kill() }()

	// Four writers, each recording its transactions in audit; they follow
	// the primary across the failover.
	var stop atomic.Bool
	var wg sync.WaitGroup
	var committed atomic.Int64
	for w := 0; w < 4; w++ {
		wseed := rng.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(wseed, 1))
			var c *pgx.Conn
			for n := int64(1); !stop.Load(); n++ {
				if c == nil {
					var err error
					if c, err = pgx.Connect(ctx, both("postgres")); err != nil {
						time.Sleep(100 * time.Millisecond)
						continue
					}
				}
				acct := 1 + r.IntN(100)
				b := &pgx.Batch{}
				b.Queue("BEGIN")
				b.Queue("UPDATE accounts SET balance = balance + 1 WHERE id = $1", acct)
				b.Queue("INSERT INTO audit VALUES ($1, $2, $3)", w, n, acct)
				b.Queue("COMMIT")
				if err := c.SendBatch(ctx, b).Close(); err != nil {
					c.Close(ctx)
					c = nil
					continue
				}
				committed.Add(1)
				time.Sleep(2 * time.Millisecond) // a load the target keeps up with: the test is the switch, not a catch-up
			}
			if c != nil {
				c.Close(ctx)
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()

	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if err := p.alive(); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := pc.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'fo'").Scan(&n); err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("parapply did not create slot fo")
		}
	}
	mustExec(t, sc, "ALTER SYSTEM SET sync_replication_slots = on")
	mustExec(t, sc, "SELECT pg_reload_conf()")
	// The slot's copy on the standby: synchronized, and not temporary (a
	// copy the standby could not use yet is kept temporary).
	deadline := time.Now().Add(90 * time.Second)
	for {
		if err := p.alive(); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := sc.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'fo' AND synced AND NOT temporary").Scan(&n); err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby did not synchronize slot fo within 90s")
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("slot fo synchronized on the standby after %s", time.Since(began).Round(time.Millisecond))
	// parapply status shows the slot's copy on the standby.
	st, stOut := statusJSON(t, "--target", target.DSNAs("postgres", applyRole), "--source", both(replRole), "--slot", "fo")
	pubSlot, _ := st["publisher"].(map[string]any)
	standbys, _ := pubSlot["standbys"].([]any)
	if pubSlot["failover"] != true || len(standbys) != 1 || standbys[0].(map[string]any)["synced"] != true || pubSlot["synchronized_standby_slots"] != "sb1" {
		t.Errorf("status does not show a failover slot synchronized on the standby:\n%s", stOut)
	}
	// And so do the metrics (read once a status interval).
	wantMetrics := []string{"parapply_slot_failover 1", "parapply_synchronized_standby_slots_set 1",
		fmt.Sprintf(`parapply_slot_synchronized{standby="127.0.0.1:%d"} 1`, standby.Port)}
	var scraped string
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		scraped = scrapeText(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", metricsPort))
		missing := false
		for _, w := range wantMetrics {
			missing = missing || !strings.Contains(scraped, w)
		}
		if !missing {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("metrics lack %q:\n%s", wantMetrics, grepLines(scraped, "parapply_slot_", "parapply_synchronized"))
			break
		}
	}
	time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
	before := committed.Load()
	primary.Halt()
	t.Logf("primary stopped at once after %d transactions; promoting the standby", before)
	if _, err := sc.Exec(ctx, "SELECT pg_promote(true, 60)"); err != nil {
		t.Fatal(err)
	}
	for committed.Load() < before+200 {
		if time.Now().After(deadline.Add(time.Minute)) {
			t.Fatalf("the writers did not go on on the new primary")
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("writers went on on the new primary; %s since the start", time.Since(began).Round(time.Millisecond))

	// Caught up: the slot on the new primary confirms its WAL position.
	var end string
	if err := sc.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&end); err != nil {
		t.Fatal(err)
	}
	want, _ := parapply.ParseLSN(end)
	for deadline := time.Now().Add(waitCaughtUpFor); ; {
		if err := p.alive(); err != nil {
			t.Fatal(err)
		}
		_, _ = sc.Exec(ctx, "SELECT pg_logical_emit_message(false, 'parapply-test', 'nudge')")
		var confirmed *string
		if err := sc.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'fo'").Scan(&confirmed); err == nil && confirmed != nil {
			if l, _ := parapply.ParseLSN(*confirmed); l >= want {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("parapply did not reach %s on the new primary", end)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("caught up on the new primary; %s since the start", time.Since(began).Round(time.Millisecond))
	res, err := verify.Tables(ctx, sc, tc, "accounts", "audit")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		t.Logf("%s: %d rows identical on the new primary and the target", r.Table, r.Rows)
	}
	// The same process went on after the failover (a fault ridden out),
	// from the promoted standby's copy of the slot, which it now streams
	// from.
	p.signal(syscall.SIGTERM)
	if out := p.out.String(); !strings.Contains(out, "a fault ended the run") || strings.Count(out, `msg="created the slot"`) != 1 {
		t.Errorf("parapply's log does not show the failover ridden out by the same process:\n%s", out)
	}
}

func mustConnect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func mustExec(t *testing.T, c *pgx.Conn, sql string) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestFailoverSlot: on PostgreSQL 17 and later the slot parapply creates
// is a failover slot, an existing one is made one at start, and with
// failover = off neither happens; parapply check says what a safe failover
// still lacks.
func TestFailoverSlot(t *testing.T) {
	e := newEnv(t, `CREATE TABLE items (id int PRIMARY KEY)`)
	if e.pair.Publisher.Version < 17 {
		t.Skipf("failover slots need PostgreSQL 17 or later (this is %d)", e.pair.Publisher.Version)
	}
	ctx := context.Background()
	e.exec(e.pub, `SELECT pg_create_logical_replication_slot('made_before', 'pgoutput')`)
	failover := func(slot string) bool {
		t.Helper()
		var f bool
		if err := e.pub.QueryRow(ctx, "SELECT failover FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	// A start the target refuses (a published table it lacks) leaves an
	// existing slot as it was: the slot is made a failover slot only once
	// the target's checks have passed.
	e.exec(e.pub, `CREATE TABLE only_here (id int PRIMARY KEY)`)
	e.exec(e.pub, `CREATE PUBLICATION pub_only_here FOR TABLE only_here`)
	e.exec(e.pub, `SELECT pg_create_logical_replication_slot('refused', 'pgoutput')`)
	cfg := e.config("refused")
	cfg.Source.Publications, cfg.Source.Failover = []string{"pub_only_here"}, true
	if err := e.failStart(cfg); !strings.Contains(err.Error(), "only_here") {
		t.Errorf("the start was refused with %v, want the missing table only_here named", err)
	}
	if failover("refused") {
		t.Error("a start the target refused made slot refused a failover slot")
	}
	e.exec(e.pub, `DROP PUBLICATION pub_only_here; DROP TABLE only_here`)
	for _, c := range []struct {
		slot string
		args []string
		want bool
	}{
		{"made_before", []string{"--copy-data", "off"}, true},
		{"created", nil, true},
		{"not_failover", []string{"--failover", "off"}, false},
	} {
		p := e.runProcess(t, append([]string{"--publication", "pub", "--slot", c.slot, "--shared-tables", "on"}, c.args...)...)
		e.waitSlotExists(t, c.slot, p)
		p.signal(syscall.SIGTERM)
		if got := failover(c.slot); got != c.want {
			t.Errorf("slot %s: failover %v, want %v", c.slot, got, c.want)
		}
	}
	rep, _, out := runCheck(t, "--source", e.sourceDSN(), "--target", e.targetDSN(), "--publication", "pub", "--slot", "created")
	found := false
	for _, r := range rep.Results {
		if r.Check == "failover slot" {
			found = true
			text := fmt.Sprint(r.Problems)
			if r.Status != "warning" || !strings.Contains(text, "no standby streams from a physical slot") || !strings.Contains(text, "synchronized_standby_slots is not set") {
				t.Errorf("failover slot check: %s %s", r.Status, text)
			}
		}
	}
	if !found {
		t.Errorf("no failover slot check in the report:\n%s", out)
	}
}

// TestDivergedTarget: a target that records changes past the publisher's
// WAL end (as after a failover to a standby that had not received them)
// stops the start, naming both positions, instead of streaming on and
// skipping the publisher's changes up to the target's position.
func TestDivergedTarget(t *testing.T) {
	e := newEnv(t, `CREATE TABLE items (id int PRIMARY KEY, v text)`)
	r := e.start(e.config("div"))
	e.exec(e.pub, `INSERT INTO items SELECT g, 'x' FROM generate_series(1, 10) g`)
	e.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	e.exec(e.sub, `UPDATE parapply.progress SET commit_lsn = '7/0', end_lsn = '7/10' WHERE slot_name = 'div'`)
	out, err := runOnce(t, "run", "--source", e.sourceDSN(), "--target", e.targetDSN(), "--publication", "pub", "--slot", "div")
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 3 {
		t.Fatalf("start on a diverged target: %v, want exit status 3:\n%s", err, out)
	}
	for _, w := range []string{"records changes of slot div up to 7/10, past the publisher's WAL end", "parapply verify", "existing_data = truncate"} {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// scrapeText reads a metrics endpoint ("" if it does not answer yet).
func scrapeText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// grepLines keeps the lines of s that start with one of prefixes.
func grepLines(s string, prefixes ...string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(l, p) {
				out = append(out, l)
			}
		}
	}
	return strings.Join(out, "\n")
}
