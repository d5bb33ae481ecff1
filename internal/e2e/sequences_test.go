package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	last := func(seq string) int64 { t.Helper(); return sequenceLast(t, e.sub, seq) }
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
	// (Read before the target takes over below: a sync after that counts
	// orders_id_seq ahead too.)
	st := r.s.Status()
	if st.Sequences.At.IsZero() || st.Sequences.Sequences != 2 || st.Sequences.Ahead != 1 || st.SequenceError != "" {
		t.Errorf("status after the syncs: %+v, error %q; want 2 sequences, ident_id_seq counted ahead, no error", st.Sequences, st.SequenceError)
	}
	// The target can take over: its next order gets the next id.
	var id int64
	if err := e.sub.QueryRow(ctx, "INSERT INTO orders (v) VALUES (0) RETURNING id").Scan(&id); err != nil || id != 51 {
		t.Errorf("a new order on the target got id %d (%v), want 51", id, err)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	// The cut-over command, for every sequence.
	out, err := exec.CommandContext(ctx, parapplyBinary(t), "sync-sequences", "--source", e.sourceDSN(),
		"--target", e.targetDSN(), "--publication", "pub", "--sequences", "all").CombinedOutput()
	t.Logf("parapply sync-sequences --sequences all:\n%s", out)
	if err != nil {
		t.Fatalf("sync-sequences: %v", err)
	}
	// orders_id_seq is ahead too now: the target handed out 51.
	for _, line := range []string{`"public"."free_seq": moved forward to 7 (it was unused, its next value 1)`,
		`"public"."orders_id_seq": ahead of the publisher (at 50); left at 51`, "3 sequences: 1 moved forward, 0 already there, 2 ahead of the publisher"} {
		if !strings.Contains(string(out), line) {
			t.Errorf("sync-sequences did not say %q", line)
		}
	}
	if got := last("free_seq"); got != 7 {
		t.Errorf("free_seq on the target after sync-sequences: %d, want 7", got)
	}
}

// applyRoleGrants are the target grants the README lists for the apply
// role (tables, the parapply schema, session_replication_role, replication
// origins, and SELECT and UPDATE on the sequences), given to role.
func applyRoleGrants(role string) string {
	return `CREATE ROLE ` + role + ` LOGIN;
		GRANT SET ON PARAMETER session_replication_role TO ` + role + `;
		GRANT CREATE ON DATABASE postgres TO ` + role + `;
		GRANT USAGE ON SCHEMA public TO ` + role + `;
		GRANT INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA public TO ` + role + `;
		GRANT SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO ` + role + `;
		GRANT EXECUTE ON FUNCTION pg_replication_origin_create(text), pg_replication_origin_oid(text), pg_replication_origin_session_setup,
			pg_replication_origin_xact_setup(pg_lsn, timestamp with time zone), pg_replication_origin_drop(text) TO ` + role
}

// TestSequenceSafety runs parapply and then parapply sync-sequences with a
// least-privilege target role (only the README's grants) and checks that
// each ownership kind's sequence reaches the publisher's value under
// sequences = owned: a plain table's serial, an identity column, the
// bigserial of a partitioned root published through its leaves, and of one
// published through its root (publish_via_partition_root), and the serial
// of an inheritance parent whose child alone is published; that a target
// sequence ahead of the publisher's stays where it is and is reported as
// ahead; and that one the role may not read (UPDATE without SELECT) is
// refused with the GRANT it needs and left untouched, never set blind.
func TestSequenceSafety(t *testing.T) {
	e := newEnv(t, `CREATE TABLE plain (id serial PRIMARY KEY, v int);
		CREATE TABLE ident (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY, v int);
		CREATE TABLE leaves (id bigserial PRIMARY KEY, v int) PARTITION BY RANGE (id);
		CREATE TABLE leaves_1 PARTITION OF leaves FOR VALUES FROM (MINVALUE) TO (1000000);
		CREATE TABLE viaroot (id bigserial PRIMARY KEY, v int) PARTITION BY RANGE (id);
		CREATE TABLE viaroot_1 PARTITION OF viaroot FOR VALUES FROM (MINVALUE) TO (1000000);
		CREATE TABLE parent (id serial PRIMARY KEY, v int);
		CREATE TABLE child () INHERITS (parent);
		CREATE TABLE ahead (id bigserial PRIMARY KEY, v int);
		CREATE TABLE hidden (id bigserial PRIMARY KEY, v int);
		CREATE TABLE readonly (id bigserial PRIMARY KEY, v int)`)
	ctx := context.Background()
	e.exec(e.pub, `CREATE PUBLICATION pub_owners FOR TABLE plain, ident, leaves, child, ahead, hidden, readonly;
		CREATE PUBLICATION pub_root FOR TABLE viaroot WITH (publish_via_partition_root = true)`)
	want := map[string]int64{"plain_id_seq": 10, "ident_id_seq": 20, "leaves_id_seq": 30, "viaroot_id_seq": 40, "parent_id_seq": 50}
	for _, q := range []string{"plain", "ident", "leaves", "viaroot", "child", "ahead", "hidden", "readonly"} {
		n := map[string]int64{"child": 50, "ahead": 100, "hidden": 60, "readonly": 30}[q]
		if n == 0 {
			n = want[q+"_id_seq"]
		}
		e.exec(e.pub, `INSERT INTO `+q+` (v) SELECT g FROM generate_series(1, $1::int) g`, n)
	}
	// On the target: one sequence far ahead (the publisher's must not pull
	// it back), one as far ahead that the role may set but not read (set
	// blind, it would go back to the publisher's 60), and one behind that
	// it may read but not set.
	e.exec(e.sub, `SELECT setval('ahead_id_seq', 900000), setval('hidden_id_seq', 900000), setval('readonly_id_seq', 3)`)
	e.exec(e.sub, applyRoleGrants("apply")+`; REVOKE SELECT ON SEQUENCE hidden_id_seq FROM apply; REVOKE UPDATE ON SEQUENCE readonly_id_seq FROM apply`)
	target := strings.Replace(e.pair.Subscriber.DSN("postgres"), "user=postgres", "user=apply", 1)

	last := func(seq string) int64 {
		t.Helper()
		var v int64
		if err := e.sub.QueryRow(ctx, `SELECT last_value FROM `+seq).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	check := func(when string) {
		t.Helper()
		for seq, n := range want {
			if got := last(seq); got != n {
				t.Errorf("%s: %s on the target at %d, want the publisher's %d", when, seq, got, n)
			}
		}
		if got := last("ahead_id_seq"); got != 900000 {
			t.Errorf("%s: ahead_id_seq on the target at %d, want it left at 900000 (ahead of the publisher's 100)", when, got)
		}
		if got := last("hidden_id_seq"); got != 900000 {
			t.Errorf("%s: hidden_id_seq on the target at %d, want it untouched at 900000 (the role may not read it)", when, got)
		}
		if got := last("readonly_id_seq"); got != 3 {
			t.Errorf("%s: readonly_id_seq on the target at %d, want it untouched at 3 (the role may not set it)", when, got)
		}
	}

	// parapply run: the sync at its start (the same code syncs every
	// sequence_sync_interval). Without the copy: the rows are not what
	// this test is about.
	cfg := e.config("seq_safety")
	cfg.Source.Publications = []string{"pub_owners", "pub_root"}
	cfg.Target.DSN = target
	cfg.Sequences = sequences.Owned
	r := e.start(cfg)
	deadline := time.Now().Add(60 * time.Second)
	for r.s.Status().Sequences.At.IsZero() {
		if time.Now().After(deadline) {
			t.Fatalf("no sequence sync 60s after the start (error %q)", r.s.Status().SequenceError)
		}
		time.Sleep(100 * time.Millisecond)
	}
	st := r.s.Status()
	t.Logf("run's sync: %+v, error %q", st.Sequences, st.SequenceError)
	if sq := st.Sequences; sq.Sequences != 8 || sq.Moved != 5 || sq.Ahead != 1 || sq.Refused != 2 || sq.Unchanged != 0 || st.SequenceError != "" {
		t.Errorf("run's sync: %+v, error %q; want 8 sequences: 5 moved, 1 ahead, 2 refused, no error", sq, st.SequenceError)
	}
	check("after parapply run")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	// parapply sync-sequences: the same, and says so sequence by sequence.
	e.exec(e.pub, `INSERT INTO plain (v) VALUES (11)`)
	want["plain_id_seq"] = 11
	out, err := runOnce(t, "sync-sequences", "--source", e.sourceDSN(), "--target", target, "--publication", "pub_owners,pub_root")
	t.Logf("parapply sync-sequences:\n%s", out)
	if err == nil {
		t.Errorf("sync-sequences exited 0 with a sequence refused")
	}
	for _, line := range []string{
		`"public"."plain_id_seq": moved forward from 10 to 11`,
		`"public"."ident_id_seq": already at 20`,
		`"public"."ahead_id_seq": ahead of the publisher (at 100); left at 900000`,
		`"public"."hidden_id_seq": refused, the target role may not read and set it: GRANT SELECT ON SEQUENCE "public"."hidden_id_seq" TO "apply"; left untouched`,
		`"public"."readonly_id_seq": refused, the target role may not read and set it: GRANT UPDATE ON SEQUENCE "public"."readonly_id_seq" TO "apply"; left untouched`,
		`8 sequences: 1 moved forward, 4 already there, 1 ahead of the publisher, 2 refused`,
	} {
		if !strings.Contains(out, line) {
			t.Errorf("sync-sequences did not say %q", line)
		}
	}
	check("after sync-sequences")
}

// sequenceLast is the last value of the target's sequence seq (0 when it
// was never used).
func sequenceLast(t *testing.T, conn *pgx.Conn, seq string) int64 {
	t.Helper()
	var v *int64
	if err := conn.QueryRow(context.Background(), "SELECT last_value FROM pg_sequences WHERE sequencename = $1", seq).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v == nil {
		return 0
	}
	return *v
}
