package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStreamStall: a streamed transaction applied in flight holds its
// locks on the target until its commit, and a later transaction (committed
// first on the publisher) waits on one of them on the target alone, where a
// trigger or a unique index exists that the publisher lacks. Nothing
// releases the lock but the streamed transaction's commit, which the reader
// delivers only after that later transaction: the wait must end (at
// lock_timeout), and parapply must go on with streamed transactions applied
// at their commit, ending applied or with a clear error, never hung.
func TestStreamStall(t *testing.T) {
	for _, c := range []struct {
		name, target string
		wantErr      string // "" if it must apply
	}{
		{"target trigger", `CREATE TABLE counts (id int PRIMARY KEY, n int NOT NULL);
			INSERT INTO counts VALUES (1, 0);
			CREATE FUNCTION count_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE public.counts SET n = n + 1 WHERE id = 1; RETURN NULL; END $$;
			CREATE TRIGGER count_row AFTER INSERT ON t FOR EACH ROW EXECUTE FUNCTION count_row();
			ALTER TABLE t ENABLE ALWAYS TRIGGER count_row;`, ""},
		{"target unique index", `CREATE UNIQUE INDEX t_v ON t (v)`, "conflict insert_exists on public.t"},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			e := newEnv(t, "CREATE TABLE t (id int PRIMARY KEY, v int, pad text)")
			e.exec(e.sub, c.target)
			cfg := e.config("stall")
			cfg.Workers = 0
			cfg.Source.Streaming = true
			cfg.Source.DecodingWorkMem = "64kB"
			cfg.Target.LockTimeout = "1s"
			cfg.ReconnectTimeout = time.Minute
			r := e.start(cfg)
			ctx := context.Background()

			// A: a large transaction, streamed while open; its first row
			// takes v = 42.
			a, err := pgx.Connect(ctx, e.pair.Publisher.DSN("postgres"))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(ctx)
			e.exec(a, "BEGIN")
			e.exec(a, "INSERT INTO t VALUES (1000000, 42, 'a')")
			e.exec(a, "INSERT INTO t SELECT g, NULL, repeat('x', 100) FROM generate_series(1, 3000) g")
			deadline := time.Now().Add(30 * time.Second)
			for r.s.Status().StreamsInFlight == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the open transaction was not applied in flight within 30s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			// B: commits first, taking the same v (the publisher has no
			// unique index) and firing the same trigger on the target.
			e.exec(e.pub, "INSERT INTO t VALUES (2000000, 42, 'b')")
			time.Sleep(500 * time.Millisecond)
			e.exec(a, "COMMIT")

			if c.wantErr != "" {
				select {
				case err := <-r.done:
					r.done <- err
					if err == nil || !strings.Contains(err.Error(), c.wantErr) {
						t.Fatalf("parapply ended with %v, want an error saying %q", err, c.wantErr)
					}
					t.Logf("parapply stopped: %v", err)
				case <-time.After(90 * time.Second):
					t.Fatalf("parapply neither applied nor stopped within 90s (status %+v); target sessions: %s", r.s.Status(), e.targetSessions())
				}
				return
			}
			e.waitCaughtUp(r)
			st := r.s.Status()
			if st.Reconnects[3] == 0 {
				t.Errorf("no lock stall was met (faults ridden out: %v): the test did not build the stall it is about", st.Reconnects)
			}
			e.verify("public.t")
			var n int
			if err := e.sub.QueryRow(ctx, "SELECT n FROM counts").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 3002 {
				t.Fatalf("the target trigger counted %d rows, want 3002 (each applied once)", n)
			}
		})
	}
}
