package e2e

import (
	"strings"
	"testing"
)

// fkSchema is a parent and a child that references it, on both sides.
const fkSchema = `CREATE TABLE parent (id int PRIMARY KEY, v text);
CREATE TABLE child (id int PRIMARY KEY, parent_id int NOT NULL REFERENCES parent, v text)`

// fkEnv starts a publisher with rows in parent and child, published, and a
// target whose parent and child hold other rows.
func fkEnv(t *testing.T) *env {
	e := newEnv(t, "")
	e.both(fkSchema)
	e.exec(e.pub, `INSERT INTO parent SELECT g, 'p' || g FROM generate_series(1, 3000) g;
		INSERT INTO child SELECT g, 1 + g % 3000, 'c' || g FROM generate_series(1, 6000) g;
		CREATE PUBLICATION pub FOR TABLE parent, child`)
	e.exec(e.sub, `INSERT INTO parent SELECT g, 'old' FROM generate_series(10001, 10100) g;
		INSERT INTO child SELECT g, 10001 + g % 100, 'old' FROM generate_series(10001, 10300) g`)
	return e
}

// TestExistingTruncateForeignKey: existing_data = truncate empties every
// table of the copy in one statement, so tables tied by a foreign key are
// replaced whole.
func TestExistingTruncateForeignKey(t *testing.T) {
	e := fkEnv(t)
	cfg := e.config("fk")
	cfg.CopyData, cfg.ExistingData = true, "truncate"
	r := e.start(cfg)
	e.exec(e.pub, `INSERT INTO parent VALUES (5000, 'new'); INSERT INTO child VALUES (9000, 5000, 'new')`)
	e.waitCaughtUp(r)
	e.verify("public.parent", "public.child")
}

// TestExistingTruncateRefused: a target table outside the copy that
// references a table to truncate refuses the start before anything is
// truncated (or a slot created), naming the foreign key.
func TestExistingTruncateRefused(t *testing.T) {
	e := fkEnv(t)
	e.exec(e.sub, `CREATE TABLE audit (id int PRIMARY KEY, parent_id int CONSTRAINT audit_parent_fk REFERENCES parent);
		INSERT INTO audit SELECT g, 10001 + g % 100 FROM generate_series(1, 50) g`)
	cfg := e.config("fk")
	cfg.CopyData, cfg.ExistingData = true, "truncate"
	err := e.failStart(cfg)
	t.Logf("refused: %v", err)
	for _, want := range []string{"audit_parent_fk", `"public"."audit"`, `"public"."parent"`} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("the refusal %q does not name %s", err, want)
		}
	}
	for table, want := range map[string]int{"parent": 100, "child": 300, "audit": 50} {
		if n := e.count(`SELECT count(*) FROM ` + table); n != want {
			t.Fatalf("%s holds %d rows after the refusal, want its %d untouched", table, n, want)
		}
	}
	if s := e.slots("fk"); len(s) != 0 {
		t.Fatalf("the refused start left slots %v on the publisher", s)
	}
}

// TestInterruptedCopyReferenced: a table whose copy was interrupted is
// emptied and copied again even when a table already copied references
// it (a TRUNCATE of it alone is refused by PostgreSQL): its own rows are
// deleted instead.
func TestInterruptedCopyReferenced(t *testing.T) {
	e := fkEnv(t)
	e.exec(e.sub, `TRUNCATE parent, child`)
	cfg := e.config("fk")
	cfg.CopyData = true
	r := e.start(cfg)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	e.waitSlotReleased(t, "fk")
	// As a kill during parent's copy leaves it: child done, parent
	// recorded as copying with part of its rows.
	e.exec(e.sub, `UPDATE parapply.sync_state SET state = 'copying', finished_at = NULL WHERE table_name = '"public"."parent"';
		SET session_replication_role = replica; DELETE FROM parent WHERE id > 1000; RESET session_replication_role`)
	if n := e.count(`SELECT count(*) FROM parapply.sync_state WHERE state = 'copying'`); n != 1 {
		t.Fatalf("%d tables recorded as copying, want parent", n)
	}
	e.exec(e.pub, `UPDATE parent SET v = 'changed' WHERE id <= 20; INSERT INTO child VALUES (9000, 7, 'new')`)
	r = e.start(cfg)
	e.waitCaughtUp(r)
	e.verify("public.parent", "public.child")
	if n := e.count(`SELECT count(*) FROM parapply.sync_state WHERE slot_name = 'fk' AND state <> 'done'`); n != 0 {
		t.Fatalf("%d tables not done after the copy", n)
	}
}
