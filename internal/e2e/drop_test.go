package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/targetdb"
)

// TestDrop: parapply drop retires a slot as DROP SUBSCRIPTION does: it
// refuses while parapply runs on the slot, dropping nothing; once stopped,
// the slot's replication origins, its rows in parapply's tables on the
// target and the slot on the publisher are gone, and another slot may
// claim its tables.
func TestDrop(t *testing.T) {
	e := newEnv(t, `CREATE TABLE t (id int PRIMARY KEY, v text)`)
	ctx := context.Background()
	cfg := e.config("dropme")
	cfg.Workers, cfg.AutoWorkers = 2, false
	r := e.start(cfg)
	e.exec(e.pub, `INSERT INTO t SELECT g, 'x' FROM generate_series(1, 100) g`)
	e.waitCaughtUp(r)
	origins := func() int {
		var n int
		if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM pg_replication_origin WHERE roname ~ $1`, targetdb.OriginPattern("dropme")).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if origins() < 2 {
		t.Fatalf("the slot's run made %d origins; the test needs the reader's and a worker's", origins())
	}
	args := []string{"drop", "--source", e.sourceDSN(), "--target", e.targetDSN(), "--slot", "dropme"}
	out, err := runOnce(t, args...)
	if err == nil || !strings.Contains(out, "slot dropme is in use") {
		t.Fatalf("drop while parapply runs: %v, want a refusal; output:\n%s", err, out)
	}
	if origins() < 2 {
		t.Fatal("the refused drop dropped origins")
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	// Both made read-only, as a cut-over does: drop writes all the same.
	for _, c := range []*pgx.Conn{e.pub, e.sub} {
		e.exec(c, `ALTER DATABASE postgres SET default_transaction_read_only = on`)
		defer e.exec(c, `ALTER DATABASE postgres RESET default_transaction_read_only`)
	}
	out, err = runOnce(t, args...)
	if err != nil {
		t.Fatalf("drop: %v; output:\n%s", err, out)
	}
	t.Logf("drop:\n%s", out)
	if n := origins(); n != 0 {
		t.Errorf("%d origins of the dropped slot are left", n)
	}
	var slots, rows int
	if err := e.pub.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'dropme'`).Scan(&slots); err != nil {
		t.Fatal(err)
	}
	// The only slot: its rows went, and the schema with them.
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'parapply'`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if slots != 0 || rows != 0 || !strings.Contains(out, "dropped schema parapply") {
		t.Errorf("after drop: %d slots on the publisher, schema parapply there: %v", slots, rows != 0)
	}
	for _, c := range []*pgx.Conn{e.pub, e.sub} {
		e.exec(c, `ALTER DATABASE postgres RESET default_transaction_read_only`)
	}
	// Its table is free for another slot.
	r = e.start(e.config("successor"))
	e.exec(e.pub, `INSERT INTO t VALUES (1000, 'after')`)
	e.waitCaughtUp(r)
}
