package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/parapply/parapply/sequences"
)

// TestSequences: the sequences of the published tables' serial and
// identity columns reach the target while parapply runs, never moving a
// target sequence backwards; a sequence no published table owns is left
// alone until parapply sync-sequences --sequences all, the cut-over
// command, brings it too.
func TestSequences(t *testing.T) {
	e := newEnv(t, `CREATE TABLE orders (id bigserial PRIMARY KEY, v int);
		CREATE TABLE ident (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int);
		CREATE SEQUENCE free_seq`)
	ctx := context.Background()
	e.exec(e.sub, `SELECT setval('ident_id_seq', 1000)`) // the target's own is ahead
	cfg := e.config("seq")
	cfg.Sequences = sequences.Owned
	cfg.SequenceSyncInterval = 200 * time.Millisecond
	r := e.start(cfg)
	e.exec(e.pub, `INSERT INTO orders (v) SELECT g FROM generate_series(1, 50) g`)
	e.exec(e.pub, `INSERT INTO ident (v) SELECT g FROM generate_series(1, 70) g`)
	e.exec(e.pub, `SELECT nextval('free_seq') FROM generate_series(1, 7)`)
	e.waitCaughtUp(r)
	last := func(seq string) int64 {
		t.Helper()
		var v *int64
		if err := e.sub.QueryRow(ctx, "SELECT last_value FROM pg_sequences WHERE sequencename = $1", seq).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v == nil {
			return 0
		}
		return *v
	}
	deadline := time.Now().Add(20 * time.Second)
	for last("orders_id_seq") < 50 {
		if time.Now().After(deadline) {
			t.Fatalf("orders_id_seq is at %d on the target 20s after the publisher's reached 50 (status %+v)", last("orders_id_seq"), r.s.Status().Sequences)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := last("orders_id_seq"); got != 50 {
		t.Errorf("orders_id_seq on the target: %d, want the publisher's 50", got)
	}
	if got := last("ident_id_seq"); got != 1000 {
		t.Errorf("ident_id_seq on the target: %d, want 1000 (it was ahead of the publisher's 70 and must not move back)", got)
	}
	if got := last("free_seq"); got != 0 {
		t.Errorf("free_seq on the target: %d, want it untouched (no published table owns it)", got)
	}
	// The target can take over: its next order gets the next id.
	var id int64
	if err := e.sub.QueryRow(ctx, "INSERT INTO orders (v) VALUES (0) RETURNING id").Scan(&id); err != nil || id != 51 {
		t.Errorf("a new order on the target got id %d (%v), want 51", id, err)
	}
	st := r.s.Status()
	if st.Sequences.At.IsZero() || st.Sequences.Sequences != 2 || st.SequenceError != "" {
		t.Errorf("status after the syncs: %+v, error %q; want 2 sequences synced, no error", st.Sequences, st.SequenceError)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	// The cut-over command, for every sequence.
	out, err := exec.CommandContext(ctx, parapplyBinary(t), "sync-sequences", "--source", e.pair.Publisher.DSN("postgres"),
		"--target", e.pair.Subscriber.DSN("postgres"), "--publication", "pub", "--sequences", "all").CombinedOutput()
	t.Logf("parapply sync-sequences --sequences all:\n%s", out)
	if err != nil {
		t.Fatalf("sync-sequences: %v", err)
	}
	if !strings.Contains(string(out), `"public"."free_seq": set to 7 (was unused)`) || !strings.Contains(string(out), "3 sequences: 1 moved forward") {
		t.Errorf("sync-sequences did not report free_seq set to 7 and 1 of 3 moved")
	}
	if got := last("free_seq"); got != 7 {
		t.Errorf("free_seq on the target after sync-sequences: %d, want 7", got)
	}
}
