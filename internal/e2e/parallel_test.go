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
