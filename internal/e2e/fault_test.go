package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/subscriber"
)

// The fault tests run a mixed workload with an audit row per transaction
// while a server restarts (immediately: a crash, with fsync on) or the
// network between parapply and a server is cut, at several worker counts
// and both commit orders; parapply (in the test process) rides the faults
// out, and at the end every table, the audit table included, must equal the
// publisher's: a transaction lost or applied twice shows there.

const faultSchema = `
CREATE TABLE customers (id int PRIMARY KEY, balance bigint NOT NULL, email text UNIQUE);
CREATE TABLE orders (id bigint PRIMARY KEY, customer int NOT NULL REFERENCES customers, total bigint NOT NULL, note text);
CREATE TABLE order_lines (order_id bigint NOT NULL REFERENCES orders ON DELETE CASCADE, line int NOT NULL, qty int NOT NULL, PRIMARY KEY (order_id, line));
CREATE TABLE keyless (k int, v text);
ALTER TABLE keyless REPLICA IDENTITY FULL;
CREATE TABLE bulk (id bigserial PRIMARY KEY, k int NOT NULL, pad text);
CREATE TABLE audit (txn bigint PRIMARY KEY, writer int NOT NULL, kind text NOT NULL);
`

// faultWriter writes transactions of the fault workload; its randomness
// comes from the test's seed, so a failing run can be replayed.
type faultWriter struct {
	id  int
	r   *rand.Rand
	n   int64
	big bool // may write a large (streamed) transaction now and then
}

const faultCustomers = 20

func (w *faultWriter) batch() *pgx.Batch {
	w.n++
	txn := int64(w.id)*1_000_000_000 + w.n
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	kind := "order"
	switch x := w.r.IntN(100); {
	case x < 45:
		// An order with lines for a hot customer.
		cust := 1 + w.r.IntN(faultCustomers)
		oid := txn
		lines := 1 + w.r.IntN(5)
		b.Queue("INSERT INTO orders VALUES ($1, $2, 0, $3)", oid, cust, fmt.Sprintf("writer %d order %d", w.id, w.n))
		total := 0
		for l := 1; l <= lines; l++ {
			q := 1 + w.r.IntN(9)
			total += q
			b.Queue("INSERT INTO order_lines VALUES ($1, $2, $3)", oid, l, q)
		}
		b.Queue("UPDATE orders SET total = $2 WHERE id = $1", oid, total)
		b.Queue("UPDATE customers SET balance = balance + $2 WHERE id = $1", cust, total)
	case x < 60:
		// A unique value moves between rows: through a spare value, as
		// the publisher's unique index demands.
		a, c := 1+w.r.IntN(faultCustomers), 1+w.r.IntN(faultCustomers)
		kind = "email"
		b.Queue("UPDATE customers SET email = NULL WHERE id = $1", a)
		b.Queue("UPDATE customers SET email = $2 WHERE id = $1", c, fmt.Sprintf("w%d-%d@example.org", w.id, w.n))
		b.Queue("UPDATE customers SET email = $2 WHERE id = $1", a, fmt.Sprintf("w%d-%d-b@example.org", w.id, w.n))
	case x < 75:
		// Delete an order of this writer's and insert it again.
		kind = "reinsert"
		old := int64(w.id)*1_000_000_000 + 1 + w.r.Int64N(w.n)
		b.Queue("DELETE FROM orders WHERE id = $1", old)
		b.Queue("INSERT INTO orders SELECT $1, 1 + $1 % 20, 0, 'again' WHERE NOT EXISTS (SELECT 1 FROM orders WHERE id = $1)", old)
	case x < 90:
		// The keyless table: insert, update and delete by value.
		kind = "keyless"
		k := w.r.IntN(50)
		b.Queue("INSERT INTO keyless VALUES ($1, $2)", k, fmt.Sprintf("w%d", w.id))
		b.Queue("UPDATE keyless SET v = v || '+' WHERE ctid = (SELECT ctid FROM keyless WHERE k = $1 LIMIT 1)", w.r.IntN(50))
		b.Queue("DELETE FROM keyless WHERE ctid = (SELECT ctid FROM keyless WHERE k = $1 LIMIT 1)", w.r.IntN(50))
	case x < 92 && w.big && w.n%10 == 0:
		// A large transaction: streamed while in progress.
		kind = "big"
		b.Queue("INSERT INTO bulk (k, pad) SELECT g % 50, repeat('x', 200) FROM generate_series(1, 4000) g")
		b.Queue("DELETE FROM bulk WHERE k = $1", w.r.IntN(50))
	default:
		kind = "balance"
		for i := 0; i < 3; i++ {
			b.Queue("UPDATE customers SET balance = balance - 1 WHERE id = $1", 1+w.r.IntN(faultCustomers))
		}
	}
	b.Queue("INSERT INTO audit VALUES ($1, $2, $3)", txn, w.id, kind)
	b.Queue("COMMIT")
	return b
}

// faultRun is one run of the fault workload.
type faultRun struct {
	workers int
	order   subscriber.CommitOrder
	// switching: workers = auto, switching between the reader and the
	// workers every 20 ms whatever the load.
	switching bool
	// fault injects one fault; n counts from 1.
	fault  func(t *testing.T, n int)
	faults int
	// sourceDSN, targetDSN override the servers' own (to go through a
	// proxy).
	sourceDSN, targetDSN string
}

// runFaults writes with three writers while parapply applies, injects the
// faults at random moments, then waits until parapply caught up and
// compares every table.
func (e *env) runFaults(t *testing.T, fr faultRun) {
	t.Helper()
	ctx := context.Background()
	s := seed(t)
	r := rand.New(rand.NewPCG(s, 1))
	e.exec(e.pub, `INSERT INTO customers SELECT g, 0, 'c' || g || '@example.org' FROM generate_series(1, 20) g`)
	e.exec(e.sub, `INSERT INTO customers SELECT g, 0, 'c' || g || '@example.org' FROM generate_series(1, 20) g`)
	cfg := e.config("faults")
	cfg.Workers, cfg.CommitOrder = fr.workers, fr.order
	if fr.switching {
		cfg.AutoWorkers, cfg.AutoSwitchEvery = true, 20*time.Millisecond
	}
	cfg.ReconnectTimeout = 2 * time.Minute
	cfg.Source.DecodingWorkMem = "64kB"
	cfg.Source.Streaming = true
	cfg.Source.StatusInterval = 200 * time.Millisecond
	cfg.Target.LockTimeout = "2s"
	if fr.sourceDSN != "" {
		cfg.Source.DSN = fr.sourceDSN
	}
	if fr.targetDSN != "" {
		cfg.Target.DSN = fr.targetDSN
	}
	run := e.start(cfg)

	wctx, stopWriting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var committed atomic.Int64
	for id := 1; id <= 3; id++ {
		w := &faultWriter{id: id, r: rand.New(rand.NewPCG(s, uint64(100+id))), big: id == 1}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var c *pgx.Conn
			defer func() {
				if c != nil {
					c.Close(ctx)
				}
			}()
			for wctx.Err() == nil {
				if c == nil {
					var err error
					if c, err = pgx.Connect(wctx, e.pair.Publisher.DSN("postgres")); err != nil {
						time.Sleep(100 * time.Millisecond) // the publisher may be restarting
						continue
					}
				}
				b := w.batch()
				if err := c.SendBatch(wctx, b).Close(); err != nil {
					// The outcome is the publisher's to tell; the
					// comparison at the end uses its tables.
					c.Close(ctx)
					c = nil
					continue
				}
				committed.Add(1)
			}
		}()
	}
	for n := 1; n <= fr.faults; n++ {
		time.Sleep(time.Duration(700+r.IntN(1300)) * time.Millisecond)
		fr.fault(t, n)
	}
	time.Sleep(500 * time.Millisecond)
	stopWriting()
	wg.Wait()
	// A fresh connection: the test's own may have been cut by a restart.
	e.reconnect()
	e.waitCaughtUp(run)
	st := run.s.Status()
	t.Logf("%d transactions committed by the writers; parapply rode out faults %v (%v), %d source transactions applied in its last run",
		committed.Load(), st.Reconnects, subscriber.FaultCauses, st.Txns)
	var sum int64
	for _, n := range st.Reconnects {
		sum += n
	}
	if sum == 0 {
		t.Errorf("no fault was met: the test injected none that parapply noticed")
	}
	if err := run.stop(); err != nil {
		t.Fatalf("parapply stopped with an error: %v", err)
	}
	var audited int64
	if err := e.pub.QueryRow(ctx, "SELECT count(*) FROM audit").Scan(&audited); err != nil {
		t.Fatal(err)
	}
	if audited == 0 {
		t.Fatal("the publisher's audit table is empty: nothing was written")
	}
	e.verify("public.audit", "public.customers", "public.orders", "public.order_lines", "public.keyless", "public.bulk")
}

// reconnect replaces the test's connections to both servers (a restart
// may have ended them), trying for up to ten seconds.
func (e *env) reconnect() {
	e.t.Helper()
	ctx := context.Background()
	for _, c := range []struct {
		conn **pgx.Conn
		s    *pgtest.Server
	}{{&e.pub, e.pair.Publisher}, {&e.sub, e.pair.Subscriber}} {
		(*c.conn).Close(ctx)
		var err error
		for i := 0; i < 100; i++ {
			if *c.conn, err = pgx.Connect(ctx, c.s.DSN("postgres")); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

// faultMatrix is the worker counts and commit orders the fault tests run:
// workers 0 and 4 (both orders), and workers = auto switching all the time,
// by default; PARAPPLY_FAULT_MATRIX=full adds workers 8.
func faultMatrix() []faultRun {
	m := []faultRun{{workers: 0}, {workers: 4, order: subscriber.CommitPreserve}, {workers: 4, order: subscriber.CommitDependency},
		{workers: 4, order: subscriber.CommitPreserve, switching: true}}
	if os.Getenv("PARAPPLY_FAULT_MATRIX") == "full" {
		m = append(m, faultRun{workers: 8, order: subscriber.CommitPreserve}, faultRun{workers: 8, order: subscriber.CommitDependency})
	}
	return m
}

func (fr faultRun) name() string {
	if fr.workers == 0 {
		return "workers0"
	}
	if fr.switching {
		return "auto" + strconv.Itoa(fr.workers) + "_switching_" + string(fr.order)
	}
	return "workers" + strconv.Itoa(fr.workers) + "_" + string(fr.order)
}

// durable are server settings under which a crash loses only what was not
// flushed: fsync and full-page writes on.
var durable = map[string]string{"fsync": "on", "full_page_writes": "on", "synchronous_commit": "off"}

// faultCount is the number of faults per run (PARAPPLY_FAULTS, default 5).
func faultCount() int {
	if n, _ := strconv.Atoi(os.Getenv("PARAPPLY_FAULTS")); n > 0 {
		return n
	}
	return 5
}

// TestTargetCrash restarts the target immediately (a crash: commits that
// returned but were not flushed are lost) five times during the load.
func TestTargetCrash(t *testing.T) {
	for _, fr := range faultMatrix() {
		t.Run(fr.name(), func(t *testing.T) {
			e := newEnvSettings(t, faultSchema, fast, durable)
			fr.faults = faultCount()
			fr.fault = func(t *testing.T, n int) {
				if err := e.pair.Subscriber.Restart(context.Background(), true); err != nil {
					t.Fatal(err)
				}
				t.Logf("fault %d: target restarted (immediate)", n)
			}
			e.runFaults(t, fr)
		})
	}
}

// TestPublisherRestart restarts the publisher, alternately fast and
// immediate, during the load.
func TestPublisherRestart(t *testing.T) {
	for _, fr := range faultMatrix() {
		t.Run(fr.name(), func(t *testing.T) {
			e := newEnvSettings(t, faultSchema, durable, fast)
			fr.faults = faultCount()
			fr.fault = func(t *testing.T, n int) {
				immediate := n%2 == 1
				if err := e.pair.Publisher.Restart(context.Background(), immediate); err != nil {
					t.Fatal(err)
				}
				t.Logf("fault %d: publisher restarted (immediate %v)", n, immediate)
			}
			e.runFaults(t, fr)
		})
	}
}

// TestNetworkCut cuts parapply's connections to the publisher, the target,
// or both, refusing new ones for a moment, during the load.
func TestNetworkCut(t *testing.T) {
	for _, fr := range faultMatrix() {
		t.Run(fr.name(), func(t *testing.T) {
			e := newEnv(t, faultSchema)
			toPub, err := pgtest.NewProxy(e.pair.Publisher.Port)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(toPub.Close)
			toSub, err := pgtest.NewProxy(e.pair.Subscriber.Port)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(toSub.Close)
			fr.sourceDSN, fr.targetDSN = toPub.DSNAs("postgres", replRole), toSub.DSNAs("postgres", applyRole)
			fr.faults = faultCount()
			fr.fault = func(t *testing.T, n int) {
				var cut []string
				for i, p := range []*pgtest.Proxy{toPub, toSub} {
					if n%3 == i || n%3 == 2 {
						p.Cut(300 * time.Millisecond)
						cut = append(cut, []string{"publisher", "target"}[i])
					}
				}
				t.Logf("fault %d: cut the connections to the %s", n, strings.Join(cut, " and "))
			}
			e.runFaults(t, fr)
		})
	}
}
