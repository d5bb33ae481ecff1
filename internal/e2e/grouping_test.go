package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestGroupingKeepsCommitOrder builds a backlog of small transactions, each
// inserting its own sequence number and incrementing one of a few hot rows,
// then lets parapply apply it in groups while a reader polls the target.
// Every state the reader sees must be one the publisher had: a gap-free
// prefix of the sequence, with the hot rows' sum equal to its length.
// Repeated updates of a hot row are collapsed, except on a table with a
// trigger that fires on the target, which must see every update.
func TestGroupingKeepsCommitOrder(t *testing.T) {
	for _, workers := range []int{0, 2, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) { testGroupingOrder(t, workers) })
	}
}

func testGroupingOrder(t *testing.T, workers int) {
	e := newEnv(t, `CREATE TABLE seq (n int PRIMARY KEY);
		CREATE TABLE hot (id int PRIMARY KEY, v int NOT NULL, note text);
		CREATE TABLE watched (id int PRIMARY KEY, v int NOT NULL);
		INSERT INTO hot SELECT g, 0, 'row ' || g FROM generate_series(0, 4) g;
		INSERT INTO watched SELECT g, 0 FROM generate_series(0, 2) g`)
	e.exec(e.sub, `CREATE TABLE audit (id int, v int);
		CREATE FUNCTION audit() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO public.audit VALUES (NEW.id, NEW.v); RETURN NEW; END$$;
		CREATE TRIGGER audit AFTER UPDATE ON watched FOR EACH ROW EXECUTE FUNCTION audit();
		ALTER TABLE watched ENABLE ALWAYS TRIGGER audit`)
	cfg := e.config("grouping")
	cfg.Workers = workers
	r := e.start(cfg)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	const txns = 3000
	ctx := context.Background()
	for i := 1; i <= txns; i += 100 {
		b := &pgx.Batch{}
		for n := i; n < i+100; n++ {
			b.Queue("BEGIN")
			b.Queue("INSERT INTO seq VALUES ($1)", n)
			b.Queue("UPDATE hot SET v = v + 1 WHERE id = $1", n%5)
			if n%50 == 0 {
				// Twice in a row, so that the trigger could miss one.
				b.Queue("UPDATE watched SET v = v + 1 WHERE id = 1")
				b.Queue("UPDATE watched SET v = v + 1 WHERE id = 1")
			}
			b.Queue("COMMIT")
		}
		if err := e.pub.SendBatch(ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
	}

	// The reader: one statement, one snapshot.
	reader, err := pgx.Connect(ctx, e.pair.Subscriber.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var polls, bad int
	var firstBad string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			var count, highest, sum int64
			err := reader.QueryRow(ctx, `SELECT (SELECT count(*) FROM seq), (SELECT coalesce(max(n), 0) FROM seq), (SELECT sum(v) FROM hot)`).Scan(&count, &highest, &sum)
			if err != nil {
				bad++
				firstBad = err.Error()
				return
			}
			polls++
			if count != highest || sum != count {
				if bad == 0 {
					firstBad = fmt.Sprintf("first: %d rows in seq, highest %d, hot rows summing to %d", count, highest, sum)
				}
				bad++
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	r = e.start(cfg)
	e.waitCaughtUp(r)
	close(stop)
	wg.Wait()
	if bad > 0 {
		t.Fatalf("the reader saw %d states the publisher never had in %d polls (%s)", bad, polls, firstBad)
	}
	if polls < 5 {
		t.Fatalf("the reader polled only %d times", polls)
	}
	e.verify("seq", "hot", "watched")

	st := r.s.Status()
	t.Logf("%d source transactions in %d target transactions; %d updates collapsed; %d polls", st.Txns, st.Groups, st.Collapsed, polls)
	// How much is grouped depends on how far the reader gets ahead of
	// the target; at least half the commits must be saved.
	most := int64(txns / 2)
	if st.Txns != txns || st.Groups > most {
		t.Errorf("applied %d source transactions in %d target transactions; want %d in at most %d", st.Txns, st.Groups, txns, most)
	}
	if st.Collapsed == 0 {
		t.Error("no update of a hot row was collapsed")
	}
	var audited int
	if err := e.sub.QueryRow(ctx, "SELECT count(*) FROM audit").Scan(&audited); err != nil {
		t.Fatal(err)
	}
	if audited != 2*txns/50 {
		t.Errorf("the target's ALWAYS trigger saw %d updates of watched; the publisher made %d", audited, 2*txns/50)
	}
}

// TestGroupingOff applies every source transaction in a target transaction
// of its own when group_max_changes is 1.
func TestGroupingOff(t *testing.T) {
	e := newEnv(t, `CREATE TABLE t (id int PRIMARY KEY, v int)`)
	cfg := e.config("nogroup")
	cfg.Group.MaxChanges = 1
	r := e.start(cfg)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		e.exec(e.pub, "INSERT INTO t VALUES ($1, $1)", i)
	}
	r = e.start(cfg)
	e.waitCaughtUp(r)
	e.verify("t")
	if st := r.s.Status(); st.Txns != 50 || st.Groups != 50 {
		t.Errorf("applied %d source transactions in %d target transactions; want 50 in 50", st.Txns, st.Groups)
	}
}
