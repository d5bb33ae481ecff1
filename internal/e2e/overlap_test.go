package e2e

import (
	"context"
	"fmt"
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
	const rows = 2000
	e := slowReadEnv(t, 2*time.Millisecond, rows)
	for _, order := range []subscriber.CommitOrder{subscriber.CommitPreserve, subscriber.CommitDependency} {
		t.Run(string(order), func(t *testing.T) {
			cfg := e.config("overlap_" + string(order))
			cfg.Workers = 4
			cfg.CommitOrder = order
			cfg.SharedTables = true // each order's slot in turn
			slowBacklog(e, cfg, rows, 3000)
			// The catch-up is timed from the first change received: the
			// start's own checks and the wait for the walsender's first
			// change are not applying.
			r := e.start(cfg)
			began := time.Now()
			applying, timeline := e.waitApplied(r)
			if applying.IsZero() {
				t.Fatal("caught up without receiving a change")
			}
			took := time.Since(applying)
			t.Logf("streaming began %s before the first change arrived", applying.Sub(began).Round(time.Millisecond))
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
				t.Errorf("the workers were busy %s in all during a catch-up of %s: they did not apply at the same time; status by second:\n%s", busy, took, timeline)
			}
		})
	}
}

// slowReadEnv starts a publisher and a subscriber with a small
// shared_buffers whose every file read is delayed by delay (0: none), and
// a table "wide" of rows rows, one per page, on both.
func slowReadEnv(t *testing.T, delay time.Duration, rows int) *env {
	var env []string
	if delay > 0 {
		var err error
		if env, err = pgtest.ReadDelayEnv(delay); err != nil {
			t.Skip(err) // no C compiler here
		}
	}
	fsync := map[string]string{"fsync": "off", "synchronous_commit": "off"}
	subSettings := map[string]string{"fsync": "off", "synchronous_commit": "off", "shared_buffers": "2MB"}
	e := newEnvWith(t, `CREATE TABLE wide (id int PRIMARY KEY, n int NOT NULL, pad text) WITH (fillfactor = 10)`,
		pgtest.Options{Settings: fsync}, pgtest.Options{Settings: subSettings, Env: env})
	e.both(fmt.Sprintf(`INSERT INTO wide SELECT g, 0, repeat('p', 500) FROM generate_series(1, %d) g`, rows))
	return e
}

// slowBacklog creates cfg's slot (a run that stops at once), queues txns
// one-row updates of wide on the publisher, each on a row of its own page
// (the stride keeps neighbours apart), and restarts the subscriber so that
// its cache holds none of them.
func slowBacklog(e *env, cfg subscriber.Config, rows, txns int) {
	t := e.t
	t.Helper()
	r := e.start(cfg)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	b := &pgx.Batch{}
	for i := range txns {
		b.Queue("BEGIN")
		b.Queue("UPDATE wide SET n = n + 1 WHERE id = $1", 1+(i*7919)%rows)
		b.Queue("COMMIT")
	}
	if err := e.pub.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.pair.Subscriber.Restart(ctx, false); err != nil {
		t.Fatal(err)
	}
	e.sub.Close(ctx)
	var err error
	if e.sub, err = pgx.Connect(ctx, e.pair.Subscriber.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
}

// TestAutoWorkers runs workers = auto on two loads: a backlog whose
// updates wait on slow reads (it must move to the workers, and they must
// apply), and a load that never waits on reads, applied live (it must stay
// on the reader's connection and never open the workers). Both end equal to
// the publisher.
func TestAutoWorkers(t *testing.T) {
	t.Run("slow reads", func(t *testing.T) {
		const rows = 2000
		e := slowReadEnv(t, 2*time.Millisecond, rows)
		cfg := e.config("auto_slow")
		cfg.Workers, cfg.AutoWorkers = 4, true
		// Groups small enough that the switch (between groups) comes
		// early in a backlog this short.
		cfg.Group.MaxChanges = 200
		const txns = 6000
		slowBacklog(e, cfg, rows, txns)
		r := e.start(cfg)
		e.waitCaughtUp(r)
		e.verify("public.wide")
		st := r.s.Status()
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		var byWorkers int64
		for _, w := range st.Workers {
			byWorkers += w.Txns
		}
		t.Logf("%d switches, %d workers opened, %d of %d source transactions applied by them; last read-wait share %.2f",
			st.WorkerSwitches, len(st.Workers), byWorkers, st.Txns, st.ReadWaitShare)
		if st.WorkerSwitches < 1 || len(st.Workers) != 4 || byWorkers < txns/2 {
			t.Errorf("workers = auto did not move to its workers early while the apply waited on reads (%d switches, %d workers, %d of %d transactions)", st.WorkerSwitches, len(st.Workers), byWorkers, txns)
		}
	})
	t.Run("no reads", func(t *testing.T) {
		e := newEnv(t, `CREATE TABLE small (id int PRIMARY KEY, n int NOT NULL)`)
		cfg := e.config("auto_cpu")
		cfg.Workers, cfg.AutoWorkers = 4, true
		r := e.start(cfg)
		ctx := context.Background()
		deadline := time.Now().Add(3 * time.Second)
		for i := 0; time.Now().Before(deadline); i++ {
			b := &pgx.Batch{}
			for j := range 200 {
				b.Queue("INSERT INTO small VALUES ($1, 0) ON CONFLICT (id) DO UPDATE SET n = small.n + 1", (i*200+j)%500)
			}
			if err := e.pub.SendBatch(ctx, b).Close(); err != nil {
				t.Fatal(err)
			}
		}
		e.waitCaughtUp(r)
		e.verify("public.small")
		st := r.s.Status()
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("%d source transactions, %d switches, last read-wait share %.2f", st.Txns, st.WorkerSwitches, st.ReadWaitShare)
		if st.WorkerSwitches != 0 || len(st.Workers) != 0 {
			t.Errorf("workers = auto switched %d times (%d workers opened) on a load that never waits on reads", st.WorkerSwitches, len(st.Workers))
		}
	})
}
