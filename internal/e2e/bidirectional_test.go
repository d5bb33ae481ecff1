package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/conflict"
	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/source"
)

// TestBidirectional: two databases, each publishing its table to the other
// through parapply with origin = none. Writes on each side's own keys come
// back from neither (no conflict is logged, rows keep their local origin);
// then both sides insert and update the same keys at once, and with
// last_update_wins both end equal, with conflicts logged on both.
func TestBidirectional(t *testing.T) {
	major, err := pgtest.Major()
	if err != nil {
		t.Fatal(err)
	}
	pubMajor, err := pgtest.PublisherMajor()
	if err != nil {
		t.Fatal(err)
	}
	if min(major, pubMajor) < 16 { // each server publishes to the other
		t.Skip("origin = none needs PostgreSQL 16 or later")
	}
	settings := maps.Clone(fast)
	settings["track_commit_timestamp"] = "on"
	e := newEnvSettings(t, "", settings, settings)
	ctx := context.Background()
	a, b := e.pub, e.sub
	for _, c := range []*pgx.Conn{a, b} {
		e.exec(c, `CREATE TABLE kv (id int PRIMARY KEY, v text, side text)`)
		e.exec(c, `CREATE PUBLICATION both_ways FOR TABLE kv`)
	}
	rules, err := conflict.Parse("insert_exists=last_update_wins, update_origin_differs=last_update_wins, delete_origin_differs=last_update_wins, update_missing=apply_remote")
	if err != nil {
		t.Fatal(err)
	}
	// Each server is a publisher and a target: both roles on both.
	e.exec(a, rolesSQL(t, "target"))
	e.exec(b, rolesSQL(t, "publisher"))
	aDSN, bDSN := e.pair.Publisher.DSNAs("postgres", applyRole), e.pair.Subscriber.DSNAs("postgres", replRole)
	ab := e.config("a_to_b")
	ab.Source.Publications, ab.Source.Origin, ab.Conflicts = []string{"both_ways"}, source.OriginNone, rules
	ab.Workers, ab.AutoWorkers = 0, false
	ba := ab
	ba.Source.DSN, ba.Target.DSN = bDSN, aDSN
	ba.Source.Slot, ba.Target.Slot = "b_to_a", "b_to_a"
	ba.Workers = 4
	rab, rba := e.start(ab), e.start(ba)
	lsn := func(c *pgx.Conn) parapply.LSN {
		var s string
		if err := c.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
			t.Fatal(err)
		}
		l, _ := parapply.ParseLSN(s)
		return l
	}
	settle := func() {
		t.Helper()
		for range 2 {
			for _, p := range []struct {
				r   *running
				src *pgx.Conn
			}{{rab, a}, {rba, b}} {
				want, deadline := lsn(p.src), time.Now().Add(waitCaughtUpFor)
				for p.r.s.Status().Durable < want {
					if time.Now().After(deadline) {
						t.Fatalf("not caught up within %s: %+v", waitCaughtUpFor, p.r.s.Status())
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		}
	}
	same := func(when string) {
		t.Helper()
		var rows [2]string
		for i, c := range []*pgx.Conn{a, b} {
			if err := c.QueryRow(ctx, `SELECT coalesce(string_agg(id || ':' || v || ':' || side, ',' ORDER BY id), '') FROM kv`).Scan(&rows[i]); err != nil {
				t.Fatal(err)
			}
		}
		if rows[0] != rows[1] {
			t.Fatalf("%s: the sides differ:\nA: %s\nB: %s", when, rows[0], rows[1])
		}
	}
	conflicts := func(c *pgx.Conn) int {
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM parapply.conflicts`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Each side writes its own keys: everything reaches the other side
	// once, nothing comes back.
	for i := 1; i <= 50; i++ {
		e.exec(a, `INSERT INTO kv VALUES ($1, 'a', 'A')`, i)
		e.exec(b, `INSERT INTO kv VALUES ($1, 'b', 'B')`, 100+i)
	}
	e.exec(a, `UPDATE kv SET v = v || '!' WHERE id <= 50 AND id % 2 = 0`)
	e.exec(b, `DELETE FROM kv WHERE id > 140`)
	settle()
	same("own keys")
	if na, nb := conflicts(a), conflicts(b); na+nb != 0 {
		t.Fatalf("writes on each side's own keys logged %d conflicts on A and %d on B: changes came back", na, nb)
	}
	var looped int
	if err := a.QueryRow(ctx, `SELECT count(*) FROM kv WHERE side = 'A' AND (pg_xact_commit_timestamp_origin(xmin)).roident <> 0`).Scan(&looped); err != nil || looped != 0 {
		t.Fatalf("%d rows A wrote were written again on A by replication (%v)", looped, err)
	}

	// Both sides write the same keys at once.
	s := seed(t)
	var wg sync.WaitGroup
	for i, c := range []*pgx.Conn{a, b} {
		side := string(rune('A' + i))
		r := rand.New(rand.NewPCG(s, uint64(i)))
		wg.Go(func() {
			for n := range 300 {
				id := 1000 + r.IntN(20)
				q := `UPDATE kv SET v = $2, side = $3 WHERE id = $1`
				if r.IntN(3) == 0 {
					q = `INSERT INTO kv VALUES ($1, $2, $3) ON CONFLICT (id) DO UPDATE SET v = excluded.v, side = excluded.side`
				}
				if _, err := c.Exec(ctx, q, id, fmt.Sprint(n), side); err != nil {
					t.Errorf("side %s: %v", side, err)
					return
				}
			}
		})
	}
	wg.Wait()
	settle()
	same("shared keys, last_update_wins")
	na, nb := conflicts(a), conflicts(b)
	t.Logf("conflicts logged: %d on A, %d on B", na, nb)
	if na == 0 || nb == 0 {
		t.Errorf("writes on shared keys logged %d conflicts on A and %d on B; want some on both", na, nb)
	}
}
