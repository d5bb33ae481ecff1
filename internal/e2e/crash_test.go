package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var binary struct {
	once sync.Once
	path string
	err  error
}

// parapplyBinary builds cmd/parapply once per test run.
func parapplyBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "parapply-bin-")
		if err != nil {
			binary.err = err
			return
		}
		binary.path = filepath.Join(dir, "parapply")
		out, err := exec.Command("go", "build", "-o", binary.path, "github.com/parapply/parapply/cmd/parapply").CombinedOutput()
		if err != nil {
			binary.err = fmt.Errorf("go build: %w: %s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// proc is parapply running as a separate process.
type proc struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	exited chan struct{}
	err    error
}

// runProcess starts parapply run as a process, as the least-privilege
// roles (a --source or --target in args takes their place).
func (e *env) runProcess(t *testing.T, args ...string) *proc {
	t.Helper()
	return startProcess(t, append([]string{"run", "--source", e.sourceDSN(), "--target", e.targetDSN(), "--workers", strconv.Itoa(testWorkers())}, args...)...)
}

// startProcess starts the parapply binary with args; a test that fails
// kills it and shows its output.
func startProcess(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{exited: make(chan struct{})}
	p.cmd = exec.Command(parapplyBinary(t), args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		_ = p.cmd.Process.Kill()
		<-p.exited
		out := p.out.String()
		if len(out) > 4000 {
			out = "..." + out[len(out)-4000:]
		}
		t.Logf("output of parapply %v:\n%s", args, out)
	})
	return p
}

func (p *proc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("parapply exited: %v: %s", p.err, p.out.String()) //nolint:errorlint // nil after a clean exit, which %w would print as %!w(<nil>)
	default:
		return nil
	}
}

func (p *proc) signal(sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	<-p.exited
}

const crashSchema = `
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE ledger (id bigint PRIMARY KEY, account int, amount int, note text);
CREATE TABLE journal (n bigint, note text);
ALTER TABLE journal REPLICA IDENTITY FULL;
`

// TestCrashRestart kills parapply with SIGKILL at random moments while the
// publisher writes, restarts it each time, and checks at the end that the
// target equals the publisher: nothing lost, nothing applied twice (the
// journal table has no key, so a transaction applied twice would leave
// duplicate rows).
func TestCrashRestart(t *testing.T) {
	e := newEnv(t, crashSchema)
	e.exec(e.pub, `INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 200) g`)
	e.exec(e.sub, `INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 200) g`)
	wr := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	txns := e.killWhileWriting(t, "crash", nil, 6, 200*time.Millisecond, func(n int64) (*pgx.Batch, int) {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		rows := 1 + wr.IntN(40)
		for i := 0; i < rows; i++ {
			id := n*100 + int64(i)
			acct, amt := 1+wr.IntN(200), wr.IntN(1000)-500
			b.Queue("INSERT INTO ledger VALUES ($1, $2, $3, $4)", id, acct, amt, fmt.Sprintf("txn %d row %d", n, i))
			b.Queue("UPDATE accounts SET balance = balance + $2 WHERE id = $1", acct, amt)
		}
		b.Queue("INSERT INTO journal VALUES ($1, 'txn')", n)
		if n%7 == 0 {
			b.Queue("DELETE FROM ledger WHERE id = $1", (n-3)*100)
		}
		b.Queue("COMMIT")
		return b, 1
	})
	t.Logf("publisher wrote %d transactions", txns)
	e.verify("public.accounts", "public.ledger", "public.journal")
}

// killWhileWriting starts parapply on slot (with extra arguments), has the
// publisher write batch(1), batch(2), ... (each saying how many
// transactions it holds) until parapply has been killed with SIGKILL at
// random moments and restarted kills times, the first kill after at least
// minDelay, then waits until parapply has confirmed everything written,
// stops it with SIGTERM, and returns the number of transactions written.
func (e *env) killWhileWriting(t *testing.T, slot string, extra []string, kills int, minDelay time.Duration, batch func(n int64) (*pgx.Batch, int)) int {
	t.Helper()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(seed(t), 3))
	spill := t.TempDir()
	args := append([]string{"--publication", "pub", "--slot", slot, "--status-interval", "200ms", "--copy-data", "off", "--spill-directory", spill}, extra...)
	wctx, stopWriting := context.WithCancel(ctx)
	defer stopWriting()
	var wg sync.WaitGroup
	var writeErr error
	var txns int
	// The first start creates the slot; writing begins once it exists.
	p := e.runProcess(t, args...)
	e.waitSlotExists(t, slot, p)
	wg.Add(1)
	go func() {
		defer wg.Done()
		c, err := pgx.Connect(ctx, e.pair.Publisher.DSN("postgres"))
		if err != nil {
			writeErr = err
			return
		}
		defer c.Close(ctx)
		for n := int64(1); wctx.Err() == nil; n++ {
			b, k := batch(n)
			if err := c.SendBatch(wctx, b).Close(); err != nil {
				if wctx.Err() == nil {
					writeErr = err
				}
				return
			}
			txns += k
		}
	}()
	for k := 0; k < kills; k++ {
		time.Sleep(minDelay + time.Duration(r.IntN(1500))*time.Millisecond)
		if err := p.alive(); err != nil {
			t.Fatal(err)
		}
		p.signal(syscall.SIGKILL)
		t.Logf("kill %d: SIGKILL", k+1)
		p = e.restart(t, args)
	}
	stopWriting()
	wg.Wait()
	if writeErr != nil {
		t.Fatal(writeErr)
	}
	e.waitSlotConfirmed(slot, 3*time.Minute, p.alive)
	p.signal(syscall.SIGTERM)
	if p.err != nil {
		t.Fatalf("parapply did not stop cleanly on SIGTERM: %v\n%s", p.err, p.out.String())
	}
	// Each kill left its run's spill directory behind; each start removed
	// the one before, and the clean stop its own.
	if left, err := os.ReadDir(spill); err != nil || len(left) > 0 {
		t.Fatalf("spill directory holds %v after %d kills and a clean stop (%v), want nothing", left, kills, err)
	}
	return txns
}

func (e *env) waitSlotExists(t *testing.T, slot string, p *proc) {
	t.Helper()
	for i := 0; i < 600; i++ {
		if err := p.alive(); err != nil {
			t.Fatal(err)
		}
		var n int
		// A slot being created is active before it has its consistent
		// point (confirmed_flush_lsn): a change made then may fall in the
		// copy's snapshot, which a wait on the slot's position cannot see.
		if err := e.pub.QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND active AND confirmed_flush_lsn IS NOT NULL", slot).Scan(&n); err == nil && n == 1 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("slot never became active")
}

// restart starts parapply again at once after a kill: the publisher may
// not have noticed the old connection is gone, and parapply waits for the
// slot (at most 10 s).
func (e *env) restart(t *testing.T, args []string) *proc {
	t.Helper()
	return e.runProcess(t, args...)
}

// TestCommitOrderDependencyKilled runs four workers with commit_order =
// dependency, so that transactions with no key in common commit out of
// source order, and kills parapply with SIGKILL at random moments while the
// publisher writes. Each restart must skip exactly the transactions
// committed ahead of the progress row (parapply.applied) and apply the rest:
// the target ends equal to the publisher, and a transaction applied twice
// would stop parapply on a duplicate key. The test also checks that commits
// did run ahead of order (parapply.applied held rows at some point).
func TestCommitOrderDependencyKilled(t *testing.T) {
	e := newEnv(t, `CREATE TABLE ev (id bigint PRIMARY KEY, n bigint NOT NULL, note text);
		CREATE TABLE hot (id int PRIMARY KEY, total bigint NOT NULL);
		INSERT INTO hot SELECT g, 0 FROM generate_series(1, 5) g`)
	ctx := context.Background()

	// Watch parapply.applied on the target: rows there are commits made
	// ahead of an earlier transaction.
	var ahead atomic.Int64
	watchCtx, stopWatching := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		c, err := pgx.Connect(ctx, e.pair.Subscriber.DSN("postgres"))
		if err != nil {
			return
		}
		defer c.Close(ctx)
		for watchCtx.Err() == nil {
			var n int64
			if c.QueryRow(watchCtx, `SELECT count(*) FROM parapply.applied`).Scan(&n) == nil && n > ahead.Load() {
				ahead.Store(n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	extra := []string{"--workers", "4", "--commit-order", "dependency", "--group-max-changes", "1"}
	txns := e.killWhileWriting(t, "dep", extra, 5, 500*time.Millisecond, func(n int64) (*pgx.Batch, int) {
		b := &pgx.Batch{}
		for k := int64(0); k < 50; k++ {
			id := n*50 + k
			b.Queue("BEGIN")
			b.Queue("INSERT INTO ev SELECT $1 * 10 + g, $1, repeat('x', 200) FROM generate_series(0, 9) g", id)
			if id%4 == 0 {
				b.Queue("UPDATE hot SET total = total + $2 WHERE id = $1", id%5+1, id)
			}
			if id%9 == 0 {
				b.Queue("DELETE FROM ev WHERE id = $1", (id-5)*10)
			}
			b.Queue("COMMIT")
		}
		return b, 50
	})
	stopWatching()
	<-watched
	t.Logf("publisher wrote %d transactions; parapply.applied held up to %d groups committed ahead of order", txns, ahead.Load())
	e.verify("public.ev", "public.hot")
	if ahead.Load() == 0 {
		t.Error("no transaction was ever committed ahead of an earlier one: the test did not exercise commit_order = dependency")
	}
}
