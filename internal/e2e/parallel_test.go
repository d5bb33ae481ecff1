package e2e

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestParallelAdversarial applies, at several worker counts, a backlog built
// to trip a parallel applier: hot rows updated by every transaction, unique
// values handed from one row to another across transactions, keys deleted
// and inserted again by consecutive transactions, parents and children linked
// by a foreign key, a table without any key, and a TRUNCATE in the middle.
// The target must equal the publisher each time.
func TestParallelAdversarial(t *testing.T) {
	for _, workers := range []int{0, 1, 2, 4, 8} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
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
			// Small units, so that many are in flight at once.
			cfg.Group.MaxChanges = 1
			r := e.start(cfg)
			if err := r.stop(); err != nil {
				t.Fatal(err)
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
				if n%100 == 0 {
					if err := e.pub.SendBatch(ctx, b).Close(); err != nil {
						t.Fatal(err)
					}
					b = &pgx.Batch{}
				}
			}
			r = e.start(cfg)
			e.waitCaughtUp(r)
			e.verify("hot", "uniq", "reborn", "parent", "child", "nokey", "scratch")
			st := r.s.Status()
			t.Logf("%d source transactions in %d target transactions, %d workers", st.Txns, st.Groups, len(st.Workers))
			if st.Groups < txns {
				t.Errorf("only %d target transactions: the units were not small", st.Groups)
			}
			if len(st.Workers) != workers {
				t.Errorf("status lists %d workers, want %d", len(st.Workers), workers)
			}
		})
	}
}

// TestWorkerConnectionLost terminates the workers' target sessions while
// they apply: each unit in flight is retried on a new connection (or found
// committed, when the session died after its COMMIT), and the target ends
// equal to the publisher without parapply stopping.
func TestWorkerConnectionLost(t *testing.T) {
	e := newEnv(t, `CREATE TABLE t (id int PRIMARY KEY, v int NOT NULL, pad text)`)
	cfg := e.config("lost")
	cfg.Workers = 2
	cfg.Group.MaxChanges = 50
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
	var retries int64
	for _, w := range st.Workers {
		retries += w.Retries
	}
	t.Logf("terminated %d worker sessions; %d retries; %d source transactions", killed, retries, st.Txns)
	if killed == 0 || retries == 0 {
		t.Fatalf("terminated %d worker sessions, retried %d times: the test did not exercise the retry", killed, retries)
	}
}
