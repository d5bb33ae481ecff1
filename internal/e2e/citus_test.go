package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/citus"
	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/preflight"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/tablesync"
)

// The Citus tests apply to a coordinator and two workers (Debian's
// postgresql-15 with Citus, see pgtest.CitusBinaries; skipped where it is
// not installed) from an embedded publisher, and compare the tables
// through the coordinator, where Citus queries look.

// citusSchema is the publisher's tables; citusDistribute makes the
// coordinator's distributed (accounts, and orders colocated with it by
// account_id, 8 shards) and reference (kinds) tables.
const (
	citusSchema = `CREATE TABLE accounts (id bigint PRIMARY KEY, balance int NOT NULL, note text);
		CREATE TABLE orders (account_id bigint, id bigint, amount int, kind int, note text, PRIMARY KEY (account_id, id));
		CREATE TABLE kinds (id int PRIMARY KEY, name text);`
	citusDistribute = `SET citus.shard_count = 8;
		SELECT create_distributed_table('accounts', 'id');
		SELECT create_distributed_table('orders', 'account_id', colocate_with => 'accounts');
		SELECT create_reference_table('kinds');`
)

// newCitusEnv starts a publisher and a Citus cluster, creates schema on
// both (then distribute on the coordinator) and a publication "pub" for
// all tables.
func newCitusEnv(t *testing.T, schema, distribute string) (*env, *pgtest.Cluster) {
	t.Helper()
	if _, err := pgtest.CitusBinaries(); err != nil {
		if os.Getenv("PARAPPLY_TEST_REQUIRE_CITUS") != "" {
			t.Fatalf("PARAPPLY_TEST_REQUIRE_CITUS is set, and %v", err)
		}
		t.Skipf("no Citus here: %v", err)
	}
	ctx := context.Background()
	var cl *pgtest.Cluster
	var pub *pgtest.Server
	var errC, errP error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); cl, errC = pgtest.StartCitus(ctx, 2, pgtest.Options{Settings: fast}) }()
	go func() {
		defer wg.Done()
		pub, errP = pgtest.StartPublisher(ctx, pgtest.Options{Name: "publisher", Settings: fast})
	}()
	wg.Wait()
	if errC != nil || errP != nil {
		if cl != nil {
			cl.Stop()
		}
		if pub != nil {
			pub.Stop()
		}
		t.Fatal(errC, errP)
	}
	e := &env{t: t, pair: &pgtest.Pair{Publisher: pub, Subscriber: cl.Coordinator}, log: &logTail{}, nodes: cl.Workers,
		superuser: "a Citus target: the apply role's grants would have to reach every worker's shards (docs/operations.md has no Citus block)"}
	t.Cleanup(func() {
		if t.Failed() {
			if tail := e.log.String(); tail != "" {
				t.Logf("the subscribers' log (its last %d kB):\n%s", logTailSize>>10, tail)
			}
		}
		e.pub.Close(context.Background())
		e.sub.Close(context.Background())
		pub.Stop()
		cl.Stop()
	})
	var err error
	if e.pub, err = pgx.Connect(ctx, pub.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	if e.sub, err = pgx.Connect(ctx, cl.Coordinator.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	e.both(schema)
	e.exec(e.sub, distribute)
	e.exec(e.pub, "CREATE PUBLICATION pub FOR ALL TABLES")
	return e, cl
}

// citusConfig is a test's configuration for a Citus target: conflict
// detection off (refused there), workers as given.
func (e *env) citusConfig(slot string, workers int) subscriber.Config {
	cfg := e.config(slot)
	cfg.DetectConflicts, cfg.Workers, cfg.AutoWorkers, cfg.CopyData = false, workers, false, true
	return cfg
}

// TestCitus applies the initial copy and every kind of change to a
// distributed table, a colocated one and a reference table on a Citus
// coordinator (updates of the key, of the distribution column, across
// tables in one transaction, TRUNCATE), then a 10-second load of four
// clients, at workers 0 and 4, and compares the tables through the
// coordinator after each step.
func TestCitus(t *testing.T) {
	for _, workers := range []int{0, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			e, cl := newCitusEnv(t, citusSchema, citusDistribute)
			tables := []string{"accounts", "orders", "kinds"}
			e.exec(e.pub, `INSERT INTO kinds SELECT g, 'kind ' || g FROM generate_series(1, 5) g;
				INSERT INTO accounts SELECT g, g * 10, 'account ' || g FROM generate_series(1, 200) g;
				INSERT INTO orders SELECT g % 200 + 1, g, g, g % 5 + 1, 'order ' || g FROM generate_series(1, 600) g`)
			r := e.start(e.citusConfig("citus", workers))
			e.waitCaughtUp(r)
			e.verify(tables...)

			// Every kind of change, the distribution column's among them.
			e.exec(e.pub, `INSERT INTO accounts SELECT g, 0, NULL FROM generate_series(201, 300) g`)
			e.exec(e.pub, `UPDATE accounts SET balance = balance + 1 WHERE id % 3 = 0`)
			e.exec(e.pub, `UPDATE orders SET id = id + 10000 WHERE id % 7 = 0`) // the key, not the distribution column
			e.exec(e.pub, `UPDATE orders SET account_id = account_id % 50 + 201 WHERE id % 11 = 0`)
			e.exec(e.pub, `UPDATE accounts SET id = id + 1000 WHERE id BETWEEN 290 AND 300`) // a distributed table's key
			e.exec(e.pub, `BEGIN; UPDATE accounts SET balance = balance - 5 WHERE id = 7; INSERT INTO orders VALUES (7, 50000, 5, 1, 'paid');
				UPDATE orders SET account_id = 8, note = 'moved and back' WHERE account_id = 7 AND id = 50000;
				UPDATE orders SET account_id = 7 WHERE account_id = 8 AND id = 50000; COMMIT`)
			e.exec(e.pub, `DELETE FROM orders WHERE id % 13 = 0`)
			e.exec(e.pub, `UPDATE kinds SET name = name || '!' WHERE id < 3; DELETE FROM kinds WHERE id = 5; INSERT INTO kinds VALUES (6, 'six')`)
			e.waitCaughtUp(r)
			e.verify(tables...)

			// TRUNCATE reaches the shards, of a distributed and a
			// reference table.
			e.exec(e.pub, `TRUNCATE orders, kinds`)
			e.exec(e.pub, `INSERT INTO kinds VALUES (1, 'one'); INSERT INTO orders VALUES (1, 1, 1, 1, 'after the truncate')`)
			e.waitCaughtUp(r)
			e.verify(tables...)

			before := citusSessions(t, cl)
			citusLoad(t, e, 4, 10*time.Second)
			e.waitCaughtUp(r)
			e.verify(tables...)
			// parapply's sessions keep their connections to the workers:
			// Citus would open one per shard written in every
			// transaction (see citus.Enabled).
			for i, n := range citusSessions(t, cl) {
				if opened := n - before[i]; opened > 40 {
					t.Errorf("%s: %d sessions opened during the load; want a few per parapply session", cl.Workers[i].Name, opened)
				}
			}
		})
	}
}

// citusLoad runs clients writers on the publisher for d: each transaction
// inserts or updates accounts, orders and kinds (a reference table),
// sometimes moving an order to another account.
func citusLoad(t *testing.T, e *env, clients int, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	seed := time.Now().UnixNano()
	t.Logf("load seed %d", seed)
	var wg sync.WaitGroup
	errs := make([]error, clients)
	var txns [8]int
	stop := time.Now().Add(d)
	for c := range clients {
		wg.Add(1)
		conn := pgtest.Connect(ctx, t, e.pair.Publisher.DSN("postgres"))
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(seed), uint64(c)))
			for n := 0; time.Now().Before(stop); n++ {
				a, b := rng.IntN(400)+1, rng.IntN(400)+1
				id := c*1_000_000 + n
				var sql string
				switch rng.IntN(5) {
				case 0:
					sql = fmt.Sprintf(`INSERT INTO accounts VALUES (%d, 0, 'load') ON CONFLICT (id) DO UPDATE SET balance = accounts.balance + 1`, a)
				case 1:
					sql = fmt.Sprintf(`BEGIN; UPDATE accounts SET balance = balance - 1 WHERE id = %d; UPDATE accounts SET balance = balance + 1 WHERE id = %d;
						INSERT INTO orders VALUES (%d, %d, 1, %d, 'transfer'); COMMIT`, a, b, a, id, rng.IntN(6)+1)
				case 2:
					sql = fmt.Sprintf(`UPDATE orders SET amount = amount + 1, note = 'load' WHERE account_id = %d`, a)
				case 3:
					sql = fmt.Sprintf(`UPDATE orders SET account_id = %d WHERE account_id = %d AND id IN (SELECT id FROM orders WHERE account_id = %d LIMIT 2)`, b, a, a)
				default:
					sql = fmt.Sprintf(`INSERT INTO kinds VALUES (%d, 'load') ON CONFLICT (id) DO UPDATE SET name = 'load ' || %d`, rng.IntN(10)+1, id)
				}
				if _, err := conn.Exec(ctx, sql); err != nil {
					if strings.Contains(err.Error(), "duplicate key") || strings.Contains(err.Error(), "deadlock") {
						continue // two clients moving orders onto one key
					}
					errs[c] = fmt.Errorf("client %d: %s: %w", c, sql, err)
					return
				}
				txns[c%len(txns)]++
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("load: %v transactions per client in %s", txns[:clients], d)
}

// TestCitusConflicts: on a Citus coordinator conflict detection and
// two_phase are refused at start (and by parapply check) with the setting
// to change; a copy with existing_data = truncate empties the shards; with
// detection off, an update or
// delete whose row is missing is counted and skipped, an insert that
// meets an existing row stops the run naming the key (Citus reports it as
// an internal error, told apart by its message), and with on_error =
// skip_transaction that transaction is skipped and logged while the rest
// is applied. Also: the shards the apply computes for distribution values
// are Citus' own.
func TestCitusConflicts(t *testing.T) {
	e, _ := newCitusEnv(t, citusSchema, citusDistribute)
	ctx := context.Background()

	// Shard placement: citus.Table.Shard against the coordinator.
	var oid uint32
	if err := e.sub.QueryRow(ctx, "SELECT 'orders'::regclass::oid").Scan(&oid); err != nil {
		t.Fatal(err)
	}
	ct, err := citus.Read(ctx, e.sub, oid)
	if err != nil || ct == nil || ct.Kind != citus.Distributed || ct.Column != "account_id" || ct.Shards != 8 {
		t.Fatalf("citus.Read(orders) = %+v, %v; want distributed by account_id over 8 shards", ct, err)
	}
	for v := int64(-50); v < 500; v += 7 {
		var want int
		if err := e.sub.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_dist_shard s WHERE s.logicalrelid = 'orders'::regclass
			AND s.shardminvalue::int < (SELECT shardminvalue::int FROM pg_dist_shard WHERE shardid = get_shard_id_for_distribution_column('orders', $1::bigint)))`, v).Scan(&want); err != nil {
			t.Fatal(err)
		}
		if got, ok := ct.Shard([]byte(fmt.Sprint(v)), false); !ok || got != want {
			t.Errorf("shard of account_id %d: got %d (%v), Citus says %d", v, got, ok, want)
		}
	}
	if rt, err := e.sub.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(rt, err)
	}
	var kinds uint32
	if err := e.sub.QueryRow(ctx, "SELECT 'kinds'::regclass::oid").Scan(&kinds); err != nil {
		t.Fatal(err)
	}
	if kt, err := citus.Read(ctx, e.sub, kinds); err != nil || kt == nil || kt.Kind != citus.Reference {
		t.Fatalf("citus.Read(kinds) = %+v, %v; want a reference table", kt, err)
	}

	// parapply check names the Citus tables, and fails detection there
	// when it was asked for (detect_conflicts = on); at its default (auto)
	// it says detection is off for them.
	for _, c := range []struct {
		detect, asked, twoPhase bool
		want                    preflight.Status
		detail                  string
	}{
		{true, true, false, preflight.Failed, "public.kinds"},
		{true, false, false, preflight.OK, "public.orders; conflict detection off for these (detect_conflicts = auto), on for the others"},
		{false, true, true, preflight.Failed, "public.kinds"},
		{false, true, false, preflight.OK, "public.kinds"},
	} {
		cfg := e.config("checked")
		cfg.CopyData, cfg.DetectConflicts, cfg.DetectConflictsAsked, cfg.Source.TwoPhase = true, c.detect, c.asked, c.twoPhase
		rep := preflight.Run(ctx, cfg)
		found := false
		for _, res := range rep.Results {
			if res.Check == "Citus tables" {
				found = true
				if res.Status != c.want || !strings.Contains(res.Detail, c.detail) {
					t.Errorf("check with detect_conflicts %v (asked %v), two_phase %v: %+v; want %s, detail with %q", c.detect, c.asked, c.twoPhase, res, c.want, c.detail)
				}
			}
		}
		if !found {
			t.Errorf("check with detect_conflicts %v, two_phase %v has no Citus line: %+v", c.detect, c.twoPhase, rep.Results)
		}
	}

	// Detection asked for (detect_conflicts = on) is refused at start.
	cfg := e.config("refused")
	cfg.Workers, cfg.AutoWorkers, cfg.DetectConflictsAsked = 0, false, true
	runCtx, cancel := context.WithTimeout(ctx, time.Minute)
	err = subscriber.New(cfg).Run(runCtx)
	cancel()
	if err == nil || !errors.Is(err, subscriber.ErrPermanent) || !strings.Contains(err.Error(), "set detect_conflicts = auto") || !strings.Contains(err.Error(), "public.accounts") {
		t.Fatalf("a start with conflict detection on a Citus target: %v; want a refusal naming detect_conflicts = auto and the tables", err)
	}
	// And two_phase, which Citus cannot prepare.
	cfg = e.citusConfig("refused", 0)
	cfg.Source.TwoPhase = true
	runCtx, cancel = context.WithTimeout(ctx, time.Minute)
	err = subscriber.New(cfg).Run(runCtx)
	cancel()
	if err == nil || !errors.Is(err, subscriber.ErrPermanent) || !strings.Contains(err.Error(), "two_phase = off") {
		t.Fatalf("a start with two_phase on a Citus target: %v; want a refusal naming two_phase = off", err)
	}

	// At the defaults (detect_conflicts = auto) a run starts: detection
	// is off for the tables Citus manages, said once, and on for a plain
	// table of the coordinator. The copy empties a table with
	// existing_data = truncate (through Citus' trigger, which truncates
	// the shards); then missing rows of a Citus table are counted and
	// skipped, those of the plain table detected and logged.
	e.both(`CREATE TABLE plain (id int PRIMARY KEY, v int)`)
	e.exec(e.pub, `INSERT INTO accounts SELECT g, 0 FROM generate_series(1, 10) g; INSERT INTO plain VALUES (1, 0), (2, 0)`)
	e.exec(e.sub, `INSERT INTO accounts VALUES (999, 999)`)
	cfg = e.citusConfig("citusconf", 0)
	cfg.DetectConflicts, cfg.DetectConflictsAsked = true, false
	cfg.ExistingData = tablesync.ExistingTruncate
	r := e.start(cfg)
	e.waitCaughtUp(r)
	e.verify("accounts", "plain")
	e.exec(e.sub, `DELETE FROM accounts WHERE id IN (3, 4); DELETE FROM plain WHERE id = 2`)
	e.exec(e.pub, `UPDATE accounts SET balance = 1 WHERE id = 3; DELETE FROM accounts WHERE id = 4`)
	e.waitCaughtUp(r)
	if m := r.s.Status().Missing; m != 2 {
		t.Errorf("status counts %d rows not found, want 2 (an update and a delete)", m)
	}
	// Apart: a conflict replays its target transaction, whose other
	// statements then count their missing rows again.
	e.exec(e.pub, `UPDATE plain SET v = 1 WHERE id = 2`)
	e.waitCaughtUp(r)
	var detected, detectedCitus int
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FILTER (WHERE table_name LIKE '%plain%'), count(*) FILTER (WHERE table_name LIKE '%accounts%')
		FROM parapply.conflicts WHERE conflict_type = 'update_missing'`).Scan(&detected, &detectedCitus); err != nil || detected != 1 || detectedCitus != 0 {
		t.Errorf("parapply.conflicts logs %d update_missing of plain and %d of accounts (%v), want 1 and 0: detection on for the plain table only", detected, detectedCitus, err)
	}
	if n := strings.Count(e.log.String(), "conflict detection is off for the tables Citus manages (public.accounts, public.kinds, public.orders)"); n != 1 && !testing.Verbose() {
		t.Errorf("the run said %d times that detection is off for the Citus tables, want once", n)
	}
	e.exec(e.sub, `INSERT INTO accounts VALUES (3, 1); INSERT INTO plain VALUES (2, 1)`)
	e.verify("accounts", "plain")

	// An insert meeting an existing row stops the run, naming the key.
	e.exec(e.sub, `INSERT INTO accounts VALUES (11, 99)`)
	e.exec(e.pub, `INSERT INTO accounts VALUES (11, 0)`)
	select {
	case err := <-r.done:
		r.done <- err
		if err == nil || !strings.Contains(err.Error(), "duplicate key") || !strings.Contains(err.Error(), "(id)=(11)") || !strings.Contains(err.Error(), "SQLSTATE 23505") {
			t.Fatalf("the run ended with %v; want the duplicate key (id)=(11) as a unique violation", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the run did not stop at an insert meeting an existing row")
	}

	// With on_error = skip_transaction the transaction is skipped and
	// logged, the next applied.
	e.exec(e.pub, `INSERT INTO accounts VALUES (12, 0)`)
	cfg.OnError = subscriber.OnErrorSkip
	r = e.start(cfg)
	e.waitCaughtUp(r)
	var logged int
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM parapply.conflicts WHERE conflict_type = 'apply_error' AND key->>'id' = '11' AND detail LIKE '%duplicate key%'`).Scan(&logged); err != nil || logged != 1 {
		t.Errorf("parapply.conflicts holds %d skipped inserts of id 11 (%v), want 1", logged, err)
	}
	e.exec(e.sub, `UPDATE accounts SET balance = 0 WHERE id = 11`)
	e.verify("accounts")
}

// sessionsOn describes the client sessions of a Citus node and the locks
// they wait for, for a failure message.
func sessionsOn(s *pgtest.Server) string {
	c, err := pgx.Connect(context.Background(), s.DSN("postgres"))
	if err != nil {
		return err.Error()
	}
	defer c.Close(context.Background())
	var out string
	err = c.QueryRow(context.Background(), `SELECT coalesce(string_agg(format('pid %s %s state %s wait %s/%s blocked by %s waiting for %s: %s', a.pid, a.application_name, a.state, a.wait_event_type, a.wait_event,
		pg_blocking_pids(a.pid), (SELECT string_agg(l.locktype || ' ' || coalesce(l.relation::regclass::text, '') || ' ' || l.mode, ', ') FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted), left(a.query, 150)), E'\n'), '')
		FROM pg_stat_activity a WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid() AND a.state <> 'idle'`).Scan(&out)
	if err != nil {
		return err.Error()
	}
	return out
}

// citusSessions returns how many sessions each worker node of cl has
// started.
func citusSessions(t *testing.T, cl *pgtest.Cluster) []int64 {
	t.Helper()
	var out []int64
	for _, n := range cl.Workers {
		c := pgtest.Connect(context.Background(), t, n.DSN("postgres"))
		var sessions int64
		if err := c.QueryRow(context.Background(), "SELECT sessions FROM pg_stat_database WHERE datname = 'postgres'").Scan(&sessions); err != nil {
			t.Fatal(err)
		}
		out = append(out, sessions)
	}
	return out
}
