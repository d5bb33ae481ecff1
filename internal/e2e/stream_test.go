package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStreamedAtCommitOnly runs the streamed-transaction cases with no
// inflight applier: every streamed transaction is applied from its spill
// file at its commit.
func TestStreamedAtCommitOnly(t *testing.T) {
	testStreamed(t, 0)
}

// TestStreamedConcurrent has two streamed transactions open at once, the
// second touching the keys the first wrote once it has committed, and a
// reader polling the target: it must only ever see each transaction whole
// or not at all, and the target must end equal to the publisher.
func TestStreamedConcurrent(t *testing.T) {
	e := newEnv(t, `CREATE TABLE a (id int PRIMARY KEY, v text, n int); CREATE TABLE b (id int PRIMARY KEY, v text)`)
	cfg := e.config("concurrent")
	cfg.Source.Streaming = true
	cfg.Source.DecodingWorkMem = "64kB"
	r := e.start(cfg)
	ctx := context.Background()

	// The reader: counts of a and b on the target must always be 0 or the
	// full count of a committed state.
	const n = 20000
	var bad atomic.Value
	stop := make(chan struct{})
	polled := make(chan int)
	go func() {
		conn, err := pgx.Connect(ctx, e.pair.Subscriber.DSN("postgres"))
		if err != nil {
			bad.Store(err.Error())
			close(polled)
			return
		}
		defer conn.Close(ctx)
		polls := 0
		for {
			select {
			case <-stop:
				polled <- polls
				return
			default:
			}
			var ca, cb, updated int
			if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM b), (SELECT count(*) FROM a WHERE n = 1)`).Scan(&ca, &cb, &updated); err != nil {
				bad.Store(err.Error())
				continue
			}
			polls++
			if ca != 0 && ca != n || cb != 0 && cb != n || updated != 0 && updated != n/2 {
				bad.Store(fmt.Sprintf("a reader saw a partial transaction: a=%d b=%d a updated=%d", ca, cb, updated))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	t1, err := e.pub.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other, err := pgx.Connect(ctx, e.pair.Publisher.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	t2, err := other.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Interleaved: both streamed while open.
	for i := 0; i < 4; i++ {
		lo, hi := i*n/4+1, (i+1)*n/4
		if _, err := t1.Exec(ctx, `INSERT INTO a SELECT g, repeat('a', 100), 0 FROM generate_series($1::int, $2::int) g`, lo, hi); err != nil {
			t.Fatal(err)
		}
		if _, err := t2.Exec(ctx, `INSERT INTO b SELECT g, repeat('b', 100) FROM generate_series($1::int, $2::int) g`, lo, hi); err != nil {
			t.Fatal(err)
		}
	}
	if err := t1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// t2 now touches the rows t1 wrote.
	if _, err := t2.Exec(ctx, `UPDATE a SET n = 1 WHERE id <= $1`, n/2); err != nil {
		t.Fatal(err)
	}
	if err := t2.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp(r)
	close(stop)
	polls := <-polled
	if msg := bad.Load(); msg != nil {
		t.Fatal(msg)
	}
	e.verify("public.a", "public.b")
	st := r.s.Status()
	t.Logf("reader polled %d times; %d streamed transactions applied in flight, %d at commit", polls, st.StreamedInFlight, st.StreamedAtCommit)
	if st.StreamedInFlight+st.StreamedAtCommit != 2 || st.StreamedInFlight == 0 {
		t.Errorf("want both transactions streamed, at least one applied in flight: %+v", st)
	}
}

// TestStreamedLarge runs parapply as a process (streaming on by default;
// 8MB chunks) through one large transaction and
// checks that it is applied before its commit (a target session holds it
// open meanwhile), that the target ends equal, that the spill directory is
// emptied, and that parapply's peak RSS stays under a bound far below the
// transaction's size.
func TestStreamedLarge(t *testing.T) {
	e := newEnv(t, `CREATE TABLE large (id int PRIMARY KEY, filler text)`)
	ctx := context.Background()
	spillDir := t.TempDir()
	p := e.runProcess(t, "--publication", "pub", "--slot", "large", "--spill-directory", spillDir, "--logical-decoding-work-mem", "8MB")
	e.waitSlotExists(t, "large", p)
	rows := 300000
	if testing.Short() {
		rows = 100000
	}
	tx, err := e.pub.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// About 600 bytes a row: 180 MB of changes at full size.
	for lo := 1; lo <= rows; lo += rows / 10 {
		if _, err := tx.Exec(ctx, `INSERT INTO large SELECT g, repeat(md5(g::text), 19) FROM generate_series($1::int, $2::int) g`, lo, lo+rows/10-1); err != nil {
			t.Fatal(err)
		}
	}
	// Before the commit, parapply applies it in an open transaction of
	// its own, invisible to others.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var open int
		if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'parapply stream %' AND xact_start IS NOT NULL`).Scan(&open); err != nil {
			t.Fatal(err)
		}
		if open == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no parapply stream session holds the transaction open on the target before its commit")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var visible int
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM large`).Scan(&visible); err != nil || visible != 0 {
		t.Fatalf("before the commit the target shows %d rows (%v), want 0", visible, err)
	}
	applying := time.Now()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	for seen := false; !seen; {
		if err := p.alive(); err != nil {
			t.Fatal(err)
		}
		if err := e.sub.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM large WHERE id = $1)`, rows).Scan(&seen); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("visible on the target %.2fs after the publisher's commit (the commit itself took %.2fs)", time.Since(committed).Seconds(), committed.Sub(applying).Seconds())
	e.waitSlotConfirmed("large", 3*time.Minute, p.alive)
	e.verify("public.large")
	rss := peakRSS(t, p.cmd.Process.Pid)
	const boundMB = 150
	t.Logf("%d rows in one transaction; parapply peak RSS %d MB (bound %d MB)", rows, rss>>20, boundMB)
	if rss > boundMB<<20 {
		t.Errorf("parapply's peak RSS is %d MB, above the %d MB bound: is the transaction held in memory?", rss>>20, boundMB)
	}
	p.signal(15)
	if ents, _ := os.ReadDir(spillDir); len(ents) != 0 {
		t.Errorf("spill directory not emptied: %v", ents)
	}
}

// peakRSS reads a process's peak resident set size (VmHWM) from /proc.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// TestStreamedKilled kills parapply (SIGKILL) while it applies a streamed
// transaction in flight, and again right after the publisher commits it,
// restarting each time: the target must end equal to the publisher, with
// the transaction applied exactly once (the table has no key, so twice would
// show as duplicate rows).
func TestStreamedKilled(t *testing.T) {
	e := newEnv(t, `CREATE TABLE nokey (n int, filler text); ALTER TABLE nokey REPLICA IDENTITY FULL; CREATE TABLE marks (id int PRIMARY KEY)`)
	ctx := context.Background()
	args := []string{"--publication", "pub", "--slot", "killed", "--logical-decoding-work-mem", "64kB"}
	waitStreamOpen := func(p *proc) {
		deadline := time.Now().Add(60 * time.Second)
		for {
			if err := p.alive(); err != nil {
				t.Fatal(err)
			}
			var open int
			if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'parapply stream %' AND xact_start IS NOT NULL`).Scan(&open); err != nil {
				t.Fatal(err)
			}
			if open > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the streamed transaction was never applied in flight")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for round := 0; round < 2; round++ {
		p := e.restart(t, args)
		e.waitSlotExists(t, "killed", p)
		tx, err := e.pub.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO nokey SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g`); err != nil {
			t.Fatal(err)
		}
		waitStreamOpen(p)
		if round == 0 {
			// Killed mid-stream: the open target transaction dies with
			// its backend; the publisher streams it again.
			p.signal(syscall.SIGKILL)
			if _, err := tx.Exec(ctx, `INSERT INTO nokey SELECT g, 'after the kill' FROM generate_series(20001, 30000) g`); err != nil {
				t.Fatal(err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		} else {
			// Killed as the commit is being applied.
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			e.exec(e.pub, `INSERT INTO marks VALUES (1)`)
			time.Sleep(time.Duration(50+round*30) * time.Millisecond)
			p.signal(syscall.SIGKILL)
		}
	}
	p := e.restart(t, args)
	e.waitSlotExists(t, "killed", p)
	e.waitSlotConfirmed("killed", 2*time.Minute, p.alive)
	e.verify("public.nokey", "public.marks")
	p.signal(syscall.SIGTERM)
}
