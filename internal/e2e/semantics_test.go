package e2e

import (
	"context"
	"testing"
	"time"
)

// TestStreamedTransactions asks the publisher to stream large transactions
// before they commit: a streamed transaction with rolled-back
// subtransactions, one aborted whole, and one interleaved with small
// transactions must leave the target equal to the publisher.
func TestStreamedTransactions(t *testing.T) {
	e := newEnv(t, `CREATE TABLE big (id int PRIMARY KEY, v text); CREATE TABLE small (id int PRIMARY KEY, v int)`)
	e.exec(e.pub, `ALTER SYSTEM SET logical_decoding_work_mem = '64kB'`)
	e.exec(e.pub, `SELECT pg_reload_conf()`)
	cfg := e.config("streamed")
	cfg.Source.Streaming = true
	r := e.start(cfg)
	// Subtransactions: the second is rolled back, the third kept.
	e.exec(e.pub, `BEGIN;
		INSERT INTO big SELECT g, repeat('a', 100) FROM generate_series(1, 3000) g;
		SAVEPOINT s1;
		INSERT INTO big SELECT g, 'rolled back' FROM generate_series(3001, 6000) g;
		UPDATE big SET v = 'rolled back' WHERE id <= 1000;
		ROLLBACK TO SAVEPOINT s1;
		SAVEPOINT s2;
		UPDATE big SET v = 'kept' WHERE id <= 500;
		RELEASE SAVEPOINT s2;
		DELETE FROM big WHERE id % 10 = 0;
		COMMIT`)
	// Aborted whole after it has been streamed: the publisher streams an
	// in-progress transaction once it outgrows logical_decoding_work_mem,
	// so the rollback comes after its chunks were sent.
	ctx := context.Background()
	doomed, err := e.pub.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := doomed.Exec(ctx, `INSERT INTO big SELECT g, 'aborted' FROM generate_series(100001, 150000) g`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := doomed.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// A small transaction while a streamed one is open elsewhere.
	other, err := e.pub.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `INSERT INTO big SELECT g, 'late' FROM generate_series(20001, 25000) g`); err != nil {
		t.Fatal(err)
	}
	e.exec(e.pub, `INSERT INTO small VALUES (1, 1)`)
	if _, err := other.Exec(ctx, `UPDATE small SET v = 2 WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	e.waitCaughtUp(r)
	e.verify("public.big", "public.small")
}

// TestSchemaChangeAndTruncate changes a published table's columns while
// parapply runs (relation messages announce the change) and truncates with
// CASCADE and RESTART IDENTITY.
func TestSchemaChangeAndTruncate(t *testing.T) {
	e := newEnv(t, `CREATE TABLE parent (id serial PRIMARY KEY, name text);
		CREATE TABLE child (id int PRIMARY KEY, parent int REFERENCES parent, note text)`)
	r := e.start(e.config("schema"))
	e.exec(e.pub, `INSERT INTO parent (name) SELECT 'p' || g FROM generate_series(1, 100) g; INSERT INTO child SELECT g, g, 'c' FROM generate_series(1, 100) g`)
	e.waitCaughtUp(r)
	// Add a column on the target first, then on the publisher, as a DBA would.
	e.exec(e.sub, `ALTER TABLE child ADD COLUMN extra int`)
	e.exec(e.pub, `ALTER TABLE child ADD COLUMN extra int`)
	e.exec(e.pub, `UPDATE child SET extra = id * 2 WHERE id <= 50; INSERT INTO child VALUES (101, 1, 'new', 7)`)
	// Drop a column on the publisher: later changes no longer carry it.
	e.exec(e.pub, `ALTER TABLE child DROP COLUMN note`)
	e.exec(e.pub, `UPDATE child SET extra = 0 WHERE id > 90`)
	e.waitCaughtUp(r)
	e.exec(e.sub, `ALTER TABLE child DROP COLUMN note`)
	e.verify("public.parent", "public.child")
	e.exec(e.pub, `TRUNCATE parent RESTART IDENTITY CASCADE; INSERT INTO parent (name) VALUES ('after')`)
	e.waitCaughtUp(r)
	e.verify("public.parent", "public.child")
}
