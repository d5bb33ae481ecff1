package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/subscriber"
)

// TestWorkersOverlapSlowReads applies a backlog of one-row updates spread
// over a table that does not fit in the target's shared_buffers, with every
// file read of the target delayed, as on a network-attached disk: the
// apply waits on reads, and the workers must wait on them at the same time.
// It checks the target against the publisher, that every worker applied
// units, and that the workers' busy times add up to clearly more than the
// time the catch-up took (they overlapped, not took turns).
func TestWorkersOverlapSlowReads(t *testing.T) {
	delay, err := pgtest.ReadDelayEnv(2 * time.Millisecond)
	if err != nil {
		t.Skip(err) // no C compiler here
	}
	fsync := map[string]string{"fsync": "off", "synchronous_commit": "off"}
	subSettings := map[string]string{"fsync": "off", "synchronous_commit": "off", "shared_buffers": "2MB"}
	e := newEnvWith(t, `CREATE TABLE wide (id int PRIMARY KEY, n int NOT NULL, pad text) WITH (fillfactor = 10)`,
		pgtest.Options{Settings: fsync}, pgtest.Options{Settings: subSettings, Env: delay})
	const rows = 2000
	e.both(`INSERT INTO wide SELECT g, 0, repeat('p', 500) FROM generate_series(1, 2000) g`)
	for _, order := range []string{subscriber.CommitPreserve, subscriber.CommitDependency} {
		t.Run(order, func(t *testing.T) {
			cfg := e.config("overlap_" + order)
			cfg.Workers = 4
			cfg.CommitOrder = order
			r := e.start(cfg)
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			// A backlog of one-row transactions, each on a row of its own
			// page; the stride keeps neighbours apart.
			ctx := context.Background()
			const txns = 3000
			b := &pgx.Batch{}
			for i := range txns {
				b.Queue("BEGIN")
				b.Queue("UPDATE wide SET n = n + 1 WHERE id = $1", 1+(i*7919)%rows)
				b.Queue("COMMIT")
			}
			if err := e.pub.SendBatch(ctx, b).Close(); err != nil {
				t.Fatal(err)
			}
			// The target's cache holds none of it.
			if err := e.pair.Subscriber.Restart(ctx, false); err != nil {
				t.Fatal(err)
			}
			e.sub.Close(ctx)
			if e.sub, err = pgx.Connect(ctx, e.pair.Subscriber.DSN("postgres")); err != nil {
				t.Fatal(err)
			}
			began := time.Now()
			r = e.start(cfg)
			e.waitCaughtUp(r)
			took := time.Since(began)
			e.verify("public.wide")
			st := r.s.Status()
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			var busy time.Duration
			for _, w := range st.Workers {
				t.Logf("worker %d: %d source transactions in %d target transactions, busy %s, dependency wait %s, commit wait %s",
					w.Worker, w.Txns, w.Units, w.Busy.Round(time.Millisecond), w.DependencyWait.Round(time.Millisecond), w.CommitWait.Round(time.Millisecond))
				if w.Units == 0 {
					t.Errorf("worker %d applied nothing", w.Worker)
				}
				busy += w.Busy
			}
			t.Logf("catch-up took %s; the workers were busy %s in all (%.1fx)", took.Round(time.Millisecond), busy.Round(time.Millisecond), busy.Seconds()/took.Seconds())
			if busy < 2*took {
				t.Errorf("the workers were busy %s in all during a catch-up of %s: they did not apply at the same time", busy, took)
			}
		})
	}
}
