package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/subscriber"
)

// TestParallelAdversarial applies, at several worker counts, a backlog built
// to trip a parallel applier: hot rows updated by every transaction, unique
// values handed from one row to another across transactions, keys deleted
// and inserted again by consecutive transactions, parents and children linked
// by a foreign key, a table without any key, and a TRUNCATE in the middle.
// The target must equal the publisher each time, in both commit orders.
func TestParallelAdversarial(t *testing.T) {
	type run struct {
		workers int
		order   subscriber.CommitOrder
		batches bool // default unit sizes: workers merge ready units
		// switching: workers = auto, made to switch between the reader
		// and the workers every few milliseconds whatever the load.
		switching bool
	}
	var runs []run
	for _, w := range []int{0, 1, 2, 4, 8} {
		runs = append(runs, run{w, subscriber.CommitPreserve, false, false})
	}
	for _, w := range []int{2, 4, 8} {
		runs = append(runs, run{w, subscriber.CommitDependency, false, false})
	}
	for _, w := range []int{2, 8} {
		runs = append(runs, run{w, subscriber.CommitPreserve, true, false}, run{w, subscriber.CommitDependency, true, false})
	}
	runs = append(runs, run{4, subscriber.CommitPreserve, true, true}, run{4, subscriber.CommitDependency, true, true})
	for _, rn := range runs {
		workers := rn.workers
		name := fmt.Sprintf("workers=%d/%s", workers, rn.order)
		if rn.batches {
			name += "/batches"
		}
		if rn.switching {
			name += "/switching"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, `CREATE TABLE hot (id int PRIMARY KEY, v int NOT NULL);
				CREATE TABLE uniq (id int PRIMARY KEY, u int NOT NULL UNIQUE);
				CREATE TABLE reborn (id int PRIMARY KEY, gen int NOT NULL);
				CREATE TABLE parent (id int PRIMARY KEY, name text);
				CREATE TABLE child (id int PRIMARY KEY, parent int NOT NULL REFERENCES parent, v int);
				CREATE TABLE nokey (a int, b text);
				ALTER TABLE nokey REPLICA IDENTITY FULL;
				CREATE TABLE scratch (id int PRIMARY KEY, v int);
				INSERT INTO hot SELECT g, 0 FROM generate_series(1, 3) g;
				INSERT INTO uniq SELECT g, g FROM generate_series(1, 20) g;
				INSERT INTO nokey SELECT g % 10, 'row' FROM generate_series(1, 50) g`)
			cfg := e.config(fmt.Sprintf("adv%d", workers))
			cfg.Workers = workers
			cfg.CommitOrder = rn.order
			if rn.switching {
				cfg.AutoWorkers, cfg.AutoSwitchEvery = true, 5*time.Millisecond
			}
			if !rn.batches {
				// One unit per source transaction, so that many are in
				// flight at once.
				cfg.Group.MaxChanges = 1
			}
			r := e.start(cfg)
			if !rn.switching {
				// A backlog: applied after the last transaction is in.
				if err := r.stop(); err != nil {
					t.Fatal(err)
				}
			}
			ctx := context.Background()
			const txns = 1200
			uval := map[int]int{}
			for i := 1; i <= 20; i++ {
				uval[i] = i
			}
			b := &pgx.Batch{}
			for n := 1; n <= txns; n++ {
				b.Queue("BEGIN")
				b.Queue("UPDATE hot SET v = v + 1 WHERE id = $1", n%3+1)
				switch n % 6 {
				case 0:
					// Hand row a's unique value to row c: a moves to a
					// fresh value in one transaction, c takes a's old one
					// in the next.
					a, c := n%20+1, (n+7)%20+1
					old := uval[a]
					uval[a], uval[c] = 100000+n, old
					b.Queue("UPDATE uniq SET u = $2 WHERE id = $1", a, uval[a])
					b.Queue("COMMIT")
					b.Queue("BEGIN")
					b.Queue("UPDATE uniq SET u = $2 WHERE id = $1", c, old)
				case 1:
					b.Queue("DELETE FROM reborn WHERE id = $1", n%7)
					b.Queue("COMMIT")
					b.Queue("BEGIN")
					b.Queue("INSERT INTO reborn VALUES ($1, $2)", n%7, n)
				case 2:
					b.Queue("INSERT INTO parent VALUES ($1, 'p')", n)
					b.Queue("COMMIT")
					b.Queue("BEGIN")
					b.Queue("INSERT INTO child VALUES ($1, $1, 0)", n)
				case 3:
					b.Queue("UPDATE child SET v = v + 1 WHERE parent = $1", n-1)
					if n%12 == 3 {
						b.Queue("DELETE FROM child WHERE parent = $1", n-1)
						b.Queue("COMMIT")
						b.Queue("BEGIN")
						b.Queue("DELETE FROM parent WHERE id = $1", n-1)
					}
				case 4:
					b.Queue("UPDATE nokey SET b = b || 'x' WHERE a = $1", n%10)
					b.Queue("DELETE FROM nokey WHERE ctid = (SELECT min(ctid) FROM nokey WHERE a = $1)", (n+3)%10)
					b.Queue("INSERT INTO nokey VALUES ($1, 'new')", (n+3)%10)
				case 5:
					b.Queue("INSERT INTO scratch VALUES ($1, $1)", n)
				}
				b.Queue("COMMIT")
				if n == txns/2 {
					b.Queue("TRUNCATE scratch")
				}
				if n%100 == 0 || rn.switching && n%10 == 0 {
					if err := e.pub.SendBatch(ctx, b).Close(); err != nil {
						t.Fatal(err)
					}
					b = &pgx.Batch{}
					if rn.switching {
						// Applied as it comes, while the run switches.
						time.Sleep(3 * time.Millisecond)
					}
				}
			}
			if !rn.switching {
				r = e.start(cfg)
			}
			e.waitCaughtUp(r)
			counts := func() (st subscriber.Status, units, batches int64) {
				st = r.s.Status()
				for _, w := range st.Workers {
					units += w.UnitsApplied
					batches += w.Units
				}
				return st, units, batches
			}
			if rn.switching {
				// Which way each group went hangs on when it was ready
				// (under the race detector a backlog can come as a few
				// large groups, all met in one mode). Until both ways
				// have applied, one more small transaction at a time,
				// each its own group, spaced across the switches.
				deadline := time.Now().Add(30 * time.Second)
				for n := 0; time.Now().Before(deadline); n++ {
					st, units, batches := counts()
					if units > 0 && st.Groups > batches {
						break
					}
					e.exec(e.pub, fmt.Sprintf("UPDATE hot SET v = v + 1 WHERE id = %d", n%3+1))
					time.Sleep(7 * time.Millisecond)
				}
				e.waitCaughtUp(r)
			}
			e.verify("hot", "uniq", "reborn", "parent", "child", "nokey", "scratch")
			st, units, batches := counts()
			t.Logf("%d source transactions in %d target transactions, %d workers (%d units in %d batches)", st.Txns, st.Groups, len(st.Workers), units, batches)
			if !rn.batches && st.Groups < txns {
				t.Errorf("only %d target transactions: the units were not small", st.Groups)
			}
			if rn.switching {
				// Both ways, more than once, and both applied.
				t.Logf("%d switches between the reader and the workers", st.WorkerSwitches)
				if st.WorkerSwitches < 4 || units == 0 || st.Groups <= batches {
					t.Errorf("%d switches, %d units applied by workers in %d of %d target transactions: the run did not apply both ways", st.WorkerSwitches, units, batches, st.Groups)
				}
				return
			}
			if rn.batches && units <= batches {
				t.Errorf("%d units in %d target transactions: no worker put ready units together", units, batches)
			}
			if len(st.Workers) != workers {
				t.Errorf("status lists %d workers, want %d", len(st.Workers), workers)
			}
		})
	}
}

// TestWorkerConnectionLost terminates the workers' target sessions while
// they apply: each termination ends the run (what the other workers
// committed is known only from the target's record), a new run starts from
// the progress row, and the target ends equal to the publisher without
// parapply stopping.
func TestWorkerConnectionLost(t *testing.T) {
	e := newEnv(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	cfg := e.config("lost")
	cfg.Workers = 2
	cfg.Group.MaxChanges = 50
	cfg.ReconnectTimeout = time.Minute
	r := e.start(cfg)
	ctx := context.Background()
	killed := 0
	for round := range 5 {
		b := &pgx.Batch{}
		for n := range 400 {
			id := round*400 + n
			b.Queue("BEGIN")
			b.Queue("INSERT INTO t VALUES ($1, 0, repeat('x', 200))", id)
			b.Queue("UPDATE t SET v = v + 1 WHERE id = $1", id/2)
			b.Queue("COMMIT")
		}
		if err := e.pub.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := e.sub.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name LIKE 'parapply test worker %'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		killed += n
	}
	e.waitCaughtUp(r)
	e.verify("t")
	st := r.s.Status()
	faults := st.Reconnects[0] + st.Reconnects[1]
	t.Logf("terminated %d worker sessions; %d new runs after faults; %d source transactions", killed, faults, st.Txns)
	if killed == 0 || faults == 0 {
		t.Fatalf("terminated %d worker sessions, %d new runs: the test did not exercise riding out a lost connection", killed, faults)
	}
}

// TestUniqueValuesParallel: transactions that touch different rows but take
// the same unique values (swaps through a spare value, a value freed by a
// delete and taken by the next transaction's insert, a NULLS NOT DISTINCT
// index) run on several workers, keyed by the values they take: a freed
// value has no key, so the transaction taking it either waits on the target
// or meets a unique violation and is tried again once everything before it
// has committed. The target must equal the publisher; a unique value the
// target holds and the publisher does not still stops parapply, naming the
// key.
func TestUniqueValuesParallel(t *testing.T) {
	for _, workers := range []int{2, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			e := newEnv(t, `CREATE TABLE acct (id int PRIMARY KEY, email text NOT NULL UNIQUE, code int, tag text);
				CREATE UNIQUE INDEX acct_code ON acct (code, tag);
				INSERT INTO acct SELECT g, 'u' || g || '@x', g, 't' FROM generate_series(1, 40) g`)
			ctx := context.Background()
			nnd := e.pub.PgConn().ParameterStatus("server_version") >= "15"
			if nnd {
				e.both(`CREATE TABLE slot1 (id int PRIMARY KEY, k int, UNIQUE NULLS NOT DISTINCT (k)); INSERT INTO slot1 VALUES (1, NULL)`)
			}
			cfg := e.config(fmt.Sprintf("uniq%d", workers))
			cfg.Workers = workers
			cfg.Group.MaxChanges = 1
			r := e.start(cfg)
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			email := map[int]string{}
			code := map[int]int{}
			tag := map[int]any{}
			for i := 1; i <= 40; i++ {
				email[i], code[i], tag[i] = fmt.Sprintf("u%d@x", i), i, "t"
			}
			b := &pgx.Batch{}
			// txn queues one source transaction (a batch is otherwise one).
			txn := func(sql string, args ...any) {
				b.Queue("BEGIN")
				b.Queue(sql, args...)
				b.Queue("COMMIT")
			}
			next := 1000
			for n := 1; n <= 900; n++ {
				a, c := n%40+1, (n*7+3)%40+1
				switch n % 5 {
				case 0, 1:
					if a == c {
						continue
					}
					// Swap two rows' emails through a spare value, one
					// step per transaction.
					ea, ec := email[a], email[c]
					txn("UPDATE acct SET email = 'spare' WHERE id = $1", a)
					txn("UPDATE acct SET email = $2 WHERE id = $1", c, ea)
					txn("UPDATE acct SET email = $2 WHERE id = $1", a, ec)
					email[a], email[c] = ec, ea
				case 2:
					// Delete a row and give its email to a new row in the
					// next transaction, which the one after renumbers.
					txn("DELETE FROM acct WHERE id = $1", a)
					txn("INSERT INTO acct VALUES ($1, $2, $1, 't')", next, email[a])
					txn("UPDATE acct SET id = $1 WHERE id = $2", a, next)
					code[a], tag[a] = next, "t"
					next++
				case 3:
					if a == c {
						continue
					}
					// Hand row a's (code, tag) to row c and c's to a.
					ca, ta, cc, tc := code[a], tag[a], code[c], tag[c]
					txn("UPDATE acct SET code = NULL WHERE id = $1", a)
					txn("UPDATE acct SET code = $2, tag = $3 WHERE id = $1", c, ca, ta)
					txn("UPDATE acct SET code = $2, tag = $3 WHERE id = $1", a, cc, tc)
					code[a], tag[a], code[c], tag[c] = cc, tc, ca, ta
				case 4:
					if nnd {
						// The one NULL moves to a new row.
						txn("UPDATE slot1 SET k = $1 WHERE k IS NULL", n)
						txn("INSERT INTO slot1 VALUES ($1, NULL)", n+1)
					}
				}
				if b.Len() > 300 {
					if err := e.pub.SendBatch(ctx, b).Close(); err != nil {
						t.Fatal(err)
					}
					b = &pgx.Batch{}
				}
			}
			if err := e.pub.SendBatch(ctx, b).Close(); err != nil {
				t.Fatal(err)
			}
			r = e.start(cfg)
			e.waitCaughtUp(r)
			tables := []string{"acct"}
			if nnd {
				tables = append(tables, "slot1")
			}
			e.verify(tables...)
			var retried int64
			for _, w := range r.s.Status().Workers {
				retried += w.RetriesBy[3]
			}
			t.Logf("%d transactions tried again after a unique violation", retried)

			// A value only the target holds: a real conflict, which stops
			// parapply with the key named instead of being retried forever.
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			e.exec(e.sub, `INSERT INTO acct VALUES (-1, 'only-on-target', -1, 'x')`)
			b = &pgx.Batch{}
			for n := 0; n < 50; n++ {
				txn("UPDATE acct SET code = code + 100000 WHERE id = $1", n%40+1)
			}
			txn("INSERT INTO acct VALUES (-2, 'only-on-target', -2, 'x')")
			if err := e.pub.SendBatch(ctx, b).Close(); err != nil {
				t.Fatal(err)
			}
			r = e.start(cfg)
			select {
			case err := <-r.done:
				r.done <- err
				if err == nil || !strings.Contains(err.Error(), "only-on-target") {
					t.Fatalf("want a unique violation naming the value, got %v", err)
				}
			case <-time.After(time.Minute):
				t.Fatal("parapply kept running past a unique value only the target holds")
			}
		})
	}
}

// TestDependencySchemaChange: with commit_order = dependency a worker may
// apply a unit from before a column was added after one from after it; it
// must apply each with the table's description as of that unit.
func TestDependencySchemaChange(t *testing.T) {
	e := newEnv(t, `CREATE TABLE t (id int PRIMARY KEY, v int); INSERT INTO t VALUES (0, 0)`)
	e.exec(e.sub, `ALTER TABLE t ADD COLUMN w text`)
	cfg := e.config("depschema")
	cfg.Workers, cfg.CommitOrder, cfg.Group.MaxChanges = 4, subscriber.CommitDependency, 1
	r := e.start(cfg)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for round := 0; round < 4; round++ {
		b := &pgx.Batch{}
		if round == 1 {
			// One transaction touches every row so far; the rest of the
			// round each touch one of them, so they all wait for it, and
			// become ready together once it commits.
			b.Queue("UPDATE t SET v = v + 1 WHERE id BETWEEN 0 AND 300")
		}
		for n := 1; n <= 300; n++ {
			id := round*1000 + n
			b.Queue("BEGIN")
			switch {
			case round == 1:
				b.Queue("UPDATE t SET v = v + 10 WHERE id = $1", n)
			case round >= 2:
				b.Queue("INSERT INTO t VALUES ($1, $1, $2)", id, fmt.Sprint("w", id))
			default:
				b.Queue("INSERT INTO t VALUES ($1, $1)", id)
			}
			b.Queue("COMMIT")
		}
		if err := e.pub.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
		if round == 1 {
			e.exec(e.pub, `ALTER TABLE t ADD COLUMN w text`)
		}
	}
	// Hold row 0 on the target, so that the transaction touching every
	// row waits, until the units after the column was added have
	// committed: the workers then come back to the units waiting for it
	// with the newer description loaded.
	lock, err := e.sub.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.Exec(ctx, "SELECT * FROM t WHERE id = 0 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	r = e.start(cfg)
	for i := 0; ; i++ {
		var n int
		if err := lock.QueryRow(ctx, "SELECT count(*) FROM t WHERE w IS NOT NULL").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n >= 600 {
			break
		}
		if i == 600 {
			t.Fatal("the units after the column was added did not commit while an earlier unit waited")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp(r)
	e.verify("t")
}
