package e2e

import (
	"context"
	"fmt"
	"maps"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/subscriber"
)

// TestUpdateDeleted: with detect_update_deleted, a row deleted on the
// target by an ordinary session and then updated on the publisher is
// update_deleted (not update_missing), skipped by default, and under
// last_update_wins re-created when the remote update is the later (it
// carries every column) and left deleted when the local delete is; a row
// deleted with no record of it (here: by a session that marks itself as
// parapply's) stays update_missing. Workers 0 and 4; track_commit_timestamp
// on, so the record's commit time and origin are the delete's.
func TestUpdateDeleted(t *testing.T) {
	cases := []conflictCase{
		{name: "ud_skip", before: []string{`INSERT INTO ud_skip VALUES (1, 'a'), (2, 'b')`}, local: []string{`DELETE FROM ud_skip WHERE id = 1`},
			pub: []string{`UPDATE ud_skip SET v = v || '!'`}, want: "2:b!", log: `update_deleted/skip/false/{"id": "1"}//a!`},
		{name: "ud_lww_remote", before: []string{`INSERT INTO ud_lww_remote VALUES (1, 'a'), (2, 'b')`}, local: []string{`DELETE FROM ud_lww_remote WHERE id = 1`},
			pub: []string{`UPDATE ud_lww_remote SET v = 'newer'`}, rules: "update_deleted=last_update_wins",
			want: "1:newer,2:newer", log: `update_deleted/last_update_wins/true/{"id": "1"}//newer`},
		{name: "ud_lww_local", before: []string{`INSERT INTO ud_lww_local VALUES (1, 'a'), (2, 'b')`}, pub: []string{`UPDATE ud_lww_local SET v = 'older'`},
			late: []string{`DELETE FROM ud_lww_local WHERE id = 1`}, rules: "update_deleted=last_update_wins",
			want: "2:older", log: `update_deleted/last_update_wins/false/{"id": "1"}//older`},
		{name: "ud_apply", before: []string{`INSERT INTO ud_apply VALUES (1, 'a')`}, local: []string{`DELETE FROM ud_apply`},
			pub: []string{`UPDATE ud_apply SET v = 'back'`}, rules: "update_deleted=apply_remote", want: "1:back", log: `update_deleted/apply_remote/true/{"id": "1"}//back`},
		{name: "ud_missing", before: []string{`INSERT INTO ud_missing VALUES (1, 'a'), (2, 'b')`},
			local: []string{`BEGIN; SET LOCAL parapply.origin = 'not recorded'; DELETE FROM ud_missing WHERE id = 1; COMMIT`},
			pub:   []string{`UPDATE ud_missing SET v = v || '!'`}, want: "2:b!", log: `update_missing/skip/false/{"id": "1"}//a!`},
	}
	on := func(cfg *subscriber.Config) { cfg.DetectUpdateDeleted, cfg.MaxClockSkew = true, time.Hour }
	for _, workers := range []int{0, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) { testConflicts(t, workers, cases, on) })
	}
	// The first conflict of a run is met by the ordinary statement.
	t.Run("ud_skip/first", func(t *testing.T) { testConflicts(t, 0, cases[:1], on) })
}

// TestTombstones: the trigger is installed on published tables with a key
// (not on one with REPLICA IDENTITY FULL; on one published since, at the
// next start), a table's own triggers are
// left alone, parapply's own deletes leave no record; records are pruned
// once a remote transaction that committed after the delete is applied
// (max_clock_skew 0), and at max_retention_duration whatever the horizon
// (counted; a later update of the row is then update_missing); turning
// detect_update_deleted off removes the triggers and the table, once no
// other slot keeps them.
func TestTombstones(t *testing.T) {
	sub := maps.Clone(fast)
	sub["track_commit_timestamp"] = "on"
	e := newEnvSettings(t, `CREATE TABLE kept (id int PRIMARY KEY, v text); CREATE TABLE fullid (id int, v text);
		ALTER TABLE fullid REPLICA IDENTITY FULL`, fast, sub)
	ctx := context.Background()
	e.exec(e.sub, `CREATE TABLE audit (n int); CREATE FUNCTION own_trigger() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN INSERT INTO audit VALUES (1); RETURN NULL; END$$;
		CREATE TRIGGER own AFTER DELETE ON kept FOR EACH STATEMENT EXECUTE FUNCTION own_trigger()`)
	e.exec(e.pub, `INSERT INTO kept SELECT g, 'x' FROM generate_series(1, 10) g; INSERT INTO fullid VALUES (1, 'x')`)
	cfg := e.config("tombs")
	e.applyOwnsTables() // detect_update_deleted installs a trigger: the apply role owns the tables (docs/operations.md)
	cfg.CopyData, cfg.DetectUpdateDeleted, cfg.MaxClockSkew = true, true, 0
	r := e.start(cfg)
	e.waitCaughtUp(r)
	count := func(q string) int {
		t.Helper()
		var n int
		if err := e.sub.QueryRow(ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(`SELECT count(*) FROM pg_trigger WHERE tgname = 'parapply_tombstones' AND tgenabled = 'A' AND tgrelid = 'kept'::regclass`); n != 1 {
		t.Fatalf("%d tombstone triggers on kept, want 1 (ENABLE ALWAYS)", n)
	}
	if n := count(`SELECT count(*) FROM pg_trigger WHERE tgname = 'parapply_tombstones' AND tgrelid = 'fullid'::regclass`); n != 0 {
		t.Fatalf("a tombstone trigger on fullid (REPLICA IDENTITY FULL: no key to look rows up by)")
	}
	// parapply's own deletes: no record.
	e.exec(e.pub, `DELETE FROM kept WHERE id = 10`)
	e.waitCaughtUp(r)
	if n := count(`SELECT count(*) FROM parapply.tombstones`); n != 0 {
		t.Fatalf("%d records after a replicated delete, want 0", n)
	}
	// A local delete: recorded, then pruned once a later remote
	// transaction is applied.
	e.exec(e.sub, `DELETE FROM kept WHERE id IN (1, 2)`)
	if n := count(`SELECT count(*) FROM parapply.tombstones WHERE key = '{"id": 1}'`); n != 1 {
		t.Fatalf("%d records of the local delete of id 1, want 1", n)
	}
	time.Sleep(10 * time.Millisecond)
	e.exec(e.pub, `UPDATE kept SET v = 'later' WHERE id = 3`)
	e.waitCaughtUp(r)
	waitFor(t, 10*time.Second, "the records to be pruned", func() bool { return count(`SELECT count(*) FROM parapply.tombstones`) == 0 })
	if st := r.s.Status(); st.TombstonesPruned != 2 || st.TombstonesExpired != 0 {
		t.Fatalf("pruned %d, expired %d; want 2, 0", st.TombstonesPruned, st.TombstonesExpired)
	}
	if n := count(`SELECT count(*) FROM audit`); n != 1 {
		t.Fatalf("the table's own trigger fired %d times, want once (for the local delete; not in parapply's sessions, as in the built-in's)", n)
	}
	_ = r.stop()

	// max_retention_duration: the horizon never passes (skew of an hour),
	// the record goes anyway, and the update that follows is
	// update_missing.
	// A table published since gets the trigger at the next start.
	for _, c := range []*pgx.Conn{e.pub, e.sub} {
		e.exec(c, `CREATE TABLE added (id int PRIMARY KEY)`)
	}
	e.applyOwnsTables()
	cfg.MaxClockSkew, cfg.MaxRetention = time.Hour, time.Second
	r = e.start(cfg)
	e.waitCaughtUp(r)
	if n := count(`SELECT count(*) FROM pg_trigger WHERE tgname = 'parapply_tombstones' AND tgrelid = 'added'::regclass`); n != 1 {
		t.Fatalf("no tombstone trigger on a table published since the last start")
	}
	e.exec(e.sub, `DELETE FROM kept WHERE id = 4`)
	waitFor(t, 10*time.Second, "the record to expire", func() bool { return count(`SELECT count(*) FROM parapply.tombstones`) == 0 })
	if st := r.s.Status(); st.TombstonesExpired != 1 {
		t.Fatalf("expired %d, want 1", st.TombstonesExpired)
	}
	e.exec(e.pub, `UPDATE kept SET v = 'gone' WHERE id = 4`)
	e.waitCaughtUp(r)
	var ctype string
	if err := e.sub.QueryRow(ctx, `SELECT string_agg(conflict_type, ',') FROM parapply.conflicts WHERE key = '{"id": "4"}'`).Scan(&ctype); err != nil || ctype != "update_missing" {
		t.Fatalf("the update of an expired record's row was logged as %q (%v), want update_missing", ctype, err)
	}
	_ = r.stop()

	// Off for a slot while another keeps them: they stay. Off for the
	// last: triggers and table removed, the table's own trigger kept.
	e.exec(e.sub, `INSERT INTO parapply.tombstone_slots VALUES ('other')`)
	cfg.DetectUpdateDeleted = false
	r = e.start(cfg)
	e.waitCaughtUp(r)
	_ = r.stop()
	if n := count(`SELECT count(*) FROM pg_trigger WHERE tgname = 'parapply_tombstones'`); n != 2 {
		t.Fatalf("%d tombstone triggers with another slot keeping them, want 2", n)
	}
	e.exec(e.sub, `DELETE FROM parapply.tombstone_slots WHERE slot_name = 'other'`)
	r = e.start(cfg)
	e.waitCaughtUp(r)
	_ = r.stop()
	if n := count(`SELECT count(*) FROM pg_trigger WHERE tgname = 'parapply_tombstones'`); n != 0 {
		t.Fatalf("%d tombstone triggers left with detect_update_deleted off", n)
	}
	if n := count(`SELECT count(*) FROM pg_class WHERE relname = 'tombstones' AND relnamespace = 'parapply'::regnamespace`); n != 0 {
		t.Fatalf("parapply.tombstones left with detect_update_deleted off")
	}
	if n := count(`SELECT count(*) FROM pg_trigger WHERE tgname = 'own'`); n != 1 {
		t.Fatalf("the table's own trigger is gone")
	}
	e.verify("public.fullid")
	var rows string
	if err := e.sub.QueryRow(ctx, `SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM kept`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if want := "3:later,5:x,6:x,7:x,8:x,9:x"; rows != want {
		t.Fatalf("kept holds %s, want %s", rows, want)
	}
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestUpdateDeletedKilled: rows the target deleted (recorded) are updated
// on the publisher while parapply is killed with SIGKILL several times:
// each is logged once as update_deleted and stays deleted (skip), and
// every other row equals the publisher's.
func TestUpdateDeletedKilled(t *testing.T) {
	e := newEnv(t, `CREATE TABLE ux (id bigint PRIMARY KEY, v text)`)
	ctx := context.Background()
	const rows = 300000
	for _, c := range []*pgx.Conn{e.pub, e.sub} {
		e.exec(c, `INSERT INTO ux SELECT g, 'both' FROM generate_series(1, $1::int) g`, rows)
	}
	extra := []string{"--detect-update-deleted", "on", "--max-clock-skew", "1h"}
	e.applyOwnsTables() // detect_update_deleted installs a trigger: the apply role owns the tables (docs/operations.md)
	// A first run installs the trigger; the target then deletes rows.
	p := e.runProcess(t, append([]string{"--publication", "pub", "--slot", "udk", "--copy-data", "off"}, extra...)...)
	e.waitSlotExists(t, "udk", p)
	p.signal(syscall.SIGTERM)
	e.exec(e.sub, `DELETE FROM ux WHERE id % 5 = 0`)
	txns := e.killWhileWriting(t, "udk", extra, 5, 200*time.Millisecond, func(n int64) (*pgx.Batch, int) {
		b := &pgx.Batch{}
		b.Queue("UPDATE ux SET v = $2 WHERE id = $1", n, fmt.Sprintf("pub %d", n))
		return b, 1
	})
	if err := e.pub.QueryRow(ctx, `SELECT count(*) FROM ux WHERE v <> 'both'`).Scan(&txns); err != nil {
		t.Fatal(err)
	}
	t.Logf("publisher updated %d rows", txns)
	var logged, keys, wrong int
	if err := e.sub.QueryRow(ctx, `SELECT count(*), count(DISTINCT key), count(*) FILTER (WHERE conflict_type <> 'update_deleted' OR resolution <> 'skip'
			OR remote_applied OR (key->>'id')::bigint % 5 <> 0 OR (key->>'id')::bigint > $1 OR local_commit_time IS NULL)
		FROM parapply.conflicts WHERE table_name = 'public.ux'`, txns).Scan(&logged, &keys, &wrong); err != nil {
		t.Fatal(err)
	}
	if logged != txns/5 || keys != logged || wrong != 0 {
		t.Errorf("parapply.conflicts holds %d rows for %d keys (%d wrong); want one update_deleted per deleted row the publisher updated: %d", logged, keys, wrong, txns/5)
	}
	e.exec(e.pub, `DELETE FROM ux WHERE id % 5 = 0`)
	e.verify("public.ux")
}
