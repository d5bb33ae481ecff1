package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/ddl"
	"github.com/parapply/parapply/schemacopy"
	"github.com/parapply/parapply/subscriber"
)

// schemaCopyPublisher is the publisher of the schema = copy tests: two
// schemas, an enum and a domain, a serial column, primary keys, a
// secondary index, a unique and a check constraint, a foreign key from one
// published table to the other, and beside them an unpublished table with
// a view over it (which the copy leaves out).
const schemaCopyPublisher = `CREATE SCHEMA s1; CREATE SCHEMA s2;
	CREATE TYPE s1.mood AS ENUM ('sad', 'ok', 'happy');
	CREATE DOMAIN s2.positive AS int CHECK (VALUE > 0);
	CREATE TABLE s1.parent (id serial PRIMARY KEY, code text NOT NULL, feel s1.mood, CONSTRAINT parent_code_key UNIQUE (code));
	CREATE INDEX parent_feel ON s1.parent (feel);
	CREATE TABLE s2.child (id bigint PRIMARY KEY, parent_id int NOT NULL REFERENCES s1.parent (id), qty s2.positive, note text CHECK (length(note) < 100));
	CREATE INDEX child_parent ON s2.child (parent_id);
	CREATE TABLE s1.hidden (id int PRIMARY KEY, secret text);
	CREATE VIEW s1.hidden_view AS SELECT id FROM s1.hidden;
	GRANT USAGE ON SCHEMA s1, s2 TO ` + replRole + `;
	GRANT SELECT ON ALL TABLES IN SCHEMA s1, s2 TO ` + replRole + `;
	GRANT SELECT ON ALL SEQUENCES IN SCHEMA s1, s2 TO ` + replRole + `;
	CREATE PUBLICATION pub FOR TABLE s1.parent, s2.child`

// schemaCopyPGDump is the pg_dump the tests run (PARAPPLY_PG_DUMP): CI
// must have one; elsewhere the test is skipped without.
func schemaCopyPGDump(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("PARAPPLY_PG_DUMP")
	if bin == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("PARAPPLY_PG_DUMP is not set: CI runs schema = copy with the pg_dump .ci/run fetches")
		}
		t.Skip("set PARAPPLY_PG_DUMP to a pg_dump as new as the servers to run schema = copy")
	}
	return bin
}

// schemaShape describes what the copy makes of the published tables,
// for the two sides to compare: columns with their types, defaults and
// NOT NULL, constraints, indexes, and the enums and domains of both
// schemas.
func schemaShape(t *testing.T, e *env, side string) string {
	t.Helper()
	conn := e.pub
	if side == "target" {
		conn = e.sub
	}
	var s string
	err := conn.QueryRow(context.Background(), `SELECT string_agg(x, E'\n' ORDER BY x) FROM (
		SELECT a.attrelid::regclass::text || ' column ' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
			|| coalesce(' default ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid), '') || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
		FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid IN ('s1.parent'::regclass, 's2.child'::regclass) AND a.attnum > 0 AND NOT a.attisdropped
		UNION ALL SELECT conrelid::regclass::text || ' constraint ' || conname || ' ' || pg_catalog.pg_get_constraintdef(oid)
		FROM pg_constraint WHERE conrelid IN ('s1.parent'::regclass, 's2.child'::regclass)
		UNION ALL SELECT indrelid::regclass::text || ' index ' || pg_catalog.pg_get_indexdef(indexrelid)
		FROM pg_index WHERE indrelid IN ('s1.parent'::regclass, 's2.child'::regclass)
		UNION ALL SELECT 'type ' || t.typnamespace::regnamespace::text || '.' || t.typname || ' ' || t.typtype::text
			|| coalesce(' ' || (SELECT string_agg(pg_catalog.pg_get_constraintdef(c.oid), ', ') FROM pg_constraint c WHERE c.contypid = t.oid), '')
		FROM pg_type t WHERE t.typnamespace IN ('s1'::regnamespace, 's2'::regnamespace) AND t.typtype IN ('e', 'd')) s(x)`).Scan(&s)
	if err != nil {
		t.Fatalf("reading the %s's published tables: %v", side, err)
	}
	return s
}

// schemaCopyConfig is a run with schema = copy and the test's pg_dump.
func schemaCopyConfig(e *env, slot, bin string) subscriber.Config {
	cfg := e.config(slot)
	cfg.CopyData, cfg.CopyWorkers = true, 1
	cfg.Schema, cfg.PGDump = schemacopy.Copy, bin
	return cfg
}

// schemaCopyCompare: the target has the publisher's published tables,
// the same in every part schemaShape reads, their rows identical, and
// neither the unpublished table nor the view over it.
func schemaCopyCompare(t *testing.T, e *env) {
	t.Helper()
	if pub, sub := schemaShape(t, e, "publisher"), schemaShape(t, e, "target"); pub != sub {
		t.Fatalf("the target's published tables differ from the publisher's:\npublisher:\n%s\ntarget:\n%s", pub, sub)
	}
	var left int
	if err := e.sub.QueryRow(context.Background(), `SELECT count(*) FROM pg_class WHERE relname IN ('hidden', 'hidden_view')`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("the target has %d of the unpublished table and its view (%v): the copy is of published tables alone", left, err)
	}
	e.verify("s1.parent", "s2.child")
}

// TestSchemaCopy: schema = copy on an empty target database, as the
// least-privilege roles, makes the published tables with their types,
// domains, sequences, indexes and constraints (the foreign key too), copies
// their rows, and streams changes into them.
func TestSchemaCopy(t *testing.T) {
	bin := schemaCopyPGDump(t)
	e := newEnv(t, "")
	e.exec(e.pub, schemaCopyPublisher)
	e.exec(e.pub, `INSERT INTO s1.parent (code, feel) SELECT 'c' || i, (ARRAY['sad', 'ok', 'happy']::s1.mood[])[1 + i % 3] FROM generate_series(1, 500) i;
		INSERT INTO s2.child SELECT i, 1 + i % 500, 1 + i % 7, 'n' || i FROM generate_series(1, 2000) i;
		INSERT INTO s1.hidden VALUES (1, 'not for the target')`)
	r := e.start(schemaCopyConfig(e, "schemacopy", bin))
	schemaCopyCompare(t, e)
	e.exec(e.pub, `INSERT INTO s1.parent (code, feel) VALUES ('new', 'happy');
		UPDATE s2.child SET qty = qty + 1, note = 'changed' WHERE id % 10 = 0;
		DELETE FROM s2.child WHERE id % 13 = 0`)
	e.waitCaughtUp(r)
	e.verify("s1.parent", "s2.child")
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	// A later start finds every table there and copies nothing.
	r = e.start(schemaCopyConfig(e, "schemacopy", bin))
	e.exec(e.pub, `INSERT INTO s2.child VALUES (100000, 1, 3, 'after the restart')`)
	e.waitCaughtUp(r)
	schemaCopyCompare(t, e)
	if !strings.Contains(e.log.String(), "the target has every published table; nothing to copy") {
		t.Fatal("the restart did not say it found every published table on the target")
	}
}

// TestSchemaCopyRestart: a run stopped during the initial copy, after the
// tables were made and before their indexes and foreign key were, leaves
// what is still to build on the target; the next start builds it once
// and the tables end identical to the publisher's.
func TestSchemaCopyRestart(t *testing.T) {
	bin := schemaCopyPGDump(t)
	e := newEnv(t, "")
	e.exec(e.pub, schemaCopyPublisher)
	e.exec(e.pub, `INSERT INTO s1.parent (code, feel) SELECT 'c' || i, 'ok' FROM generate_series(1, 20000) i;
		INSERT INTO s2.child SELECT i, 1 + i % 20000, 1 + i % 7, repeat('n', 90) FROM generate_series(1, 400000) i`)
	cfg := schemaCopyConfig(e, "schemacopy", bin)
	ctx, cancel := context.WithCancel(context.Background())
	s := subscriber.New(cfg)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(60 * time.Second)
	for s.Status().State != subscriber.StateCopying {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the run did not start copying in 60s: %v", <-done)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	var tables, waiting int
	if err := e.sub.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM pg_class WHERE oid IN (pg_catalog.to_regclass('s1.parent'), pg_catalog.to_regclass('s2.child'))),
		(SELECT count(*) FROM parapply.deferred_ddl)`).Scan(&tables, &waiting); err != nil {
		t.Fatal(err)
	}
	if tables != 2 || waiting == 0 {
		t.Fatalf("stopped during the copy, the target has %d of the 2 tables and %d statements waiting for after the copy; want both tables and the foreign key waiting", tables, waiting)
	}
	r := e.start(cfg)
	schemaCopyCompare(t, e)
	if err := e.sub.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM parapply.deferred_ddl) + (SELECT count(*) FROM parapply.deferred_index)`).Scan(&waiting); err != nil || waiting != 0 {
		t.Fatalf("after the restart's copy %d statements still wait (%v)", waiting, err)
	}
	e.exec(e.pub, `UPDATE s2.child SET qty = 5 WHERE id <= 100`)
	e.waitCaughtUp(r)
	e.verify("s2.child")
}

// TestSchemaCopyNoPGDump: schema = copy without a usable pg_dump refuses
// the start, naming the fix, before the slot is made; parapply check says
// the same.
func TestSchemaCopyNoPGDump(t *testing.T) {
	e := newEnv(t, "")
	e.exec(e.pub, schemaCopyPublisher)
	cfg := schemaCopyConfig(e, "schemacopy", "/nonexistent/pg_dump")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := subscriber.New(cfg).Run(ctx)
	const fix = "set pg_dump = /path/to/pg_dump of version"
	if err == nil || !strings.Contains(err.Error(), fix) || !strings.Contains(err.Error(), "install postgresql-client-") {
		t.Fatalf("a run without pg_dump ended with %v; want the refusal naming the fix", err)
	}
	var slots int
	if err := e.pub.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'schemacopy'`).Scan(&slots); err != nil || slots != 0 {
		t.Fatalf("the refused start left %d slots (%v)", slots, err)
	}
	rep, code, out := runCheck(t, "--source", e.sourceDSN(), "--target", e.targetDSN(), "--publication", "pub", "--slot", "schemacopy",
		"--schema", "copy", "--pg-dump", "/nonexistent/pg_dump")
	if code == 0 || !strings.Contains(out, fix) {
		t.Fatalf("parapply check exited %d without naming the fix:\n%s", code, out)
	}
	for _, r := range rep.Results {
		if r.Check == "published tables" && r.Status != "ok" {
			t.Fatalf("with schema = copy, parapply check refused the missing tables: %+v", r)
		}
	}
}

// tableShape describes table on one side (conn): its columns with their
// types and defaults, constraints, indexes, and the labels of the enums
// its columns have.
func tableShape(t *testing.T, conn *pgx.Conn, table string) string {
	t.Helper()
	var s string
	err := conn.QueryRow(context.Background(), `SELECT string_agg(x, E'\n' ORDER BY x) FROM (
		SELECT 'column ' || a.attname || ' ' || pg_catalog.format_type(a.atttypid, a.atttypmod)
			|| coalesce(' default ' || pg_catalog.pg_get_expr(d.adbin, d.adrelid), '') || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
			|| coalesce(' enum ' || (SELECT string_agg(e.enumlabel::text, ',' ORDER BY e.enumsortorder) FROM pg_enum e WHERE e.enumtypid = a.atttypid), '')
		FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped
		UNION ALL SELECT 'constraint ' || conname || ' ' || pg_catalog.pg_get_constraintdef(oid) || CASE WHEN convalidated THEN '' ELSE ' not valid' END
		FROM pg_constraint WHERE conrelid = $1::regclass
		UNION ALL SELECT 'index ' || pg_catalog.pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = $1::regclass) s(x)`, table).Scan(&s)
	if err != nil {
		t.Fatalf("reading %s: %v", table, err)
	}
	return s
}

// sameTable: the target has table as the publisher has it, in every part
// tableShape reads, with identical rows.
func sameTable(t *testing.T, e *env, table string) {
	t.Helper()
	if pub, sub := tableShape(t, e.pub, table), tableShape(t, e.sub, table); pub != sub {
		t.Fatalf("the target's %s differs from the publisher's:\npublisher:\n%s\ntarget:\n%s", table, pub, sub)
	}
	e.verify(table)
}

// TestSchemaCopyJoined: under schema = copy, a table that joins the
// publication while parapply runs (with an enum of its own, an index, a
// serial, and a foreign key to a table the target has) is made on the
// target, copied and streamed into; a table that joins while parapply is
// stopped is made at the next start, beside the tables the target has.
func TestSchemaCopyJoined(t *testing.T) {
	bin := schemaCopyPGDump(t)
	e := newEnv(t, "")
	e.exec(e.pub, schemaCopyPublisher)
	e.exec(e.pub, `INSERT INTO s1.parent (code, feel) SELECT 'c' || i, 'ok' FROM generate_series(1, 300) i`)
	cfg := schemaCopyConfig(e, "schemacopy", bin)
	cfg.PublicationRefresh = time.Second
	r := e.start(cfg)
	e.exec(e.pub, `CREATE TYPE s1.size AS ENUM ('s', 'm', 'l');
		CREATE TABLE s1.extra (id int PRIMARY KEY, parent_id int NOT NULL REFERENCES s1.parent (id), sz s1.size, n serial);
		CREATE INDEX extra_sz ON s1.extra (sz, parent_id);
		INSERT INTO s1.parent (code, feel) VALUES ('for extra', 'happy');
		INSERT INTO s1.extra (id, parent_id, sz) SELECT i, 1 + i % 301, (ARRAY['s', 'm', 'l']::s1.size[])[1 + i % 3] FROM generate_series(1, 1000) i;
		GRANT SELECT ON s1.extra TO `+replRole+`;
		ALTER PUBLICATION pub ADD TABLE s1.extra`)
	e.waitLog(r, "copied tables that joined the publication", 1)
	e.exec(e.pub, `INSERT INTO s1.extra (id, parent_id, sz) VALUES (5000, 301, 'l');
		UPDATE s1.extra SET sz = 's' WHERE id % 7 = 0; DELETE FROM s1.extra WHERE id % 11 = 0`)
	e.waitCaughtUp(r)
	// Its foreign key waits for the stream to bring s1.parent up to the
	// copy's snapshot, tried again at each read of the publication.
	e.waitLog(r, "ran what waited for the copy of tables that joined the publication", 1)
	sameTable(t, e, "s1.extra")
	schemaCopyCompare(t, e)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	// Joined while stopped: made at the start, beside the others.
	e.exec(e.pub, `CREATE TABLE s2.later (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, child_id bigint REFERENCES s2.child (id), qty s2.positive);
		GRANT SELECT ON s2.later TO `+replRole+`;
		ALTER PUBLICATION pub ADD TABLE s2.later;
		INSERT INTO s2.later (qty) SELECT 1 + i % 9 FROM generate_series(1, 200) i`)
	r = e.start(cfg)
	e.exec(e.pub, `INSERT INTO s2.later (qty) VALUES (4); INSERT INTO s1.extra (id, parent_id, sz) VALUES (5001, 1, 'm')`)
	e.waitCaughtUp(r)
	sameTable(t, e, "s2.later")
	sameTable(t, e, "s1.extra")
	schemaCopyCompare(t, e)
	var waiting int
	if err := e.sub.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM parapply.deferred_ddl) + (SELECT count(*) FROM parapply.deferred_index)`).Scan(&waiting); err != nil || waiting != 0 {
		t.Fatalf("%d statements of the made tables still wait (%v)", waiting, err)
	}
}

// TestSchemaCopyDDL: schema = copy with ddl = apply: the first start
// makes the published tables from the publisher's definitions; a table
// created later on the publisher arrives by its DDL in the stream (not by
// a schema copy), and takes its rows from the stream.
func TestSchemaCopyDDL(t *testing.T) {
	bin := schemaCopyPGDump(t)
	e := newEnv(t, "")
	ctx := context.Background()
	e.exec(e.pub, `CREATE SCHEMA app;
		CREATE TYPE app.kind AS ENUM ('x', 'y');
		CREATE TABLE app.a (id serial PRIMARY KEY, k app.kind NOT NULL);
		CREATE INDEX a_k ON app.a (k);
		INSERT INTO app.a (k) SELECT (ARRAY['x', 'y']::app.kind[])[1 + i % 2] FROM generate_series(1, 300) i;
		GRANT USAGE ON SCHEMA app TO `+replRole+`;
		ALTER DEFAULT PRIVILEGES IN SCHEMA app GRANT SELECT ON TABLES TO `+replRole+`;
		GRANT SELECT ON ALL TABLES IN SCHEMA app TO `+replRole+`;
		CREATE PUBLICATION pub FOR TABLES IN SCHEMA app`)
	if err := ddl.Install(ctx, e.pub, []string{"pub"}, true); err != nil {
		t.Fatal(err)
	}
	cfg := schemaCopyConfig(e, "schemacopyddl", bin)
	cfg.DDL, cfg.PublicationRefresh = subscriber.DDLApply, time.Second
	r := e.start(cfg)
	sameTable(t, e, "app.a")
	e.exec(e.pub, `CREATE TABLE app.b (id int PRIMARY KEY, a_id int REFERENCES app.a (id), k app.kind);
		CREATE INDEX b_k ON app.b (k);
		INSERT INTO app.b SELECT i, i, 'y' FROM generate_series(1, 200) i;
		UPDATE app.a SET k = 'y' WHERE id <= 10`)
	e.waitCaughtUp(r)
	sameTable(t, e, "app.b")
	sameTable(t, e, "app.a")
	if strings.Contains(e.log.String(), "making tables that joined the publication") {
		t.Fatal("with ddl = apply, the schema copy made a table its DDL in the stream makes")
	}
}
