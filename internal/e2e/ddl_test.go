package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/ddl"
	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/pgoutput"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/subscriber"
)

const ddlSchema = `
CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, note text);
CREATE TABLE events (id bigserial PRIMARY KEY, account_id bigint, payload text);
CREATE TABLE old_stuff (id int PRIMARY KEY, v text);
INSERT INTO accounts SELECT g, 0, 'n' || g FROM generate_series(1, 500) g;
INSERT INTO old_stuff SELECT g, 'old' FROM generate_series(1, 50) g;`

// ddlMigration is the migration TestDDLMigration runs on the publisher
// under load: 23 schema changes (and some row changes between them), each
// statement string sent as it is written (several hold more than one
// statement, or DDL and DML in one transaction).
var ddlMigration = []string{
	`ALTER TABLE accounts ADD COLUMN tier text`,
	`ALTER TABLE accounts ALTER COLUMN tier SET DEFAULT 'basic'`,
	`ALTER TABLE accounts ADD COLUMN score numeric(10,2) NOT NULL DEFAULT 0`,
	`BEGIN; UPDATE accounts SET score = id % 97, tier = 'gold' WHERE id % 7 = 0; ALTER TABLE accounts ALTER COLUMN score TYPE numeric(12,2); COMMIT`,
	`CREATE INDEX accounts_tier_idx ON accounts (tier)`,
	`CREATE INDEX CONCURRENTLY accounts_score_idx ON accounts (score)`,
	`ALTER TABLE accounts RENAME COLUMN note TO memo`,
	`ALTER TABLE accounts ADD CONSTRAINT balance_sane CHECK (balance > -1000000000)`,
	`BEGIN; CREATE TABLE audit (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, account_id bigint NOT NULL, what text);
	 INSERT INTO audit (account_id, what) SELECT id, 'created' FROM accounts WHERE id <= 50; COMMIT`,
	`ALTER TABLE audit ADD COLUMN at timestamptz DEFAULT '2026-01-01 00:00:00+00'`,
	`INSERT INTO audit (account_id, what) SELECT id, 'later' FROM accounts WHERE id <= 20`,
	`ALTER TABLE events ALTER COLUMN payload SET NOT NULL`,
	`ALTER TABLE events ADD COLUMN kind int`,
	`UPDATE events SET kind = id % 3 WHERE id % 5 = 0`,
	`ALTER TABLE events DROP COLUMN kind`,
	`CREATE TABLE measurements (id bigint NOT NULL, at date NOT NULL, v int, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
	 CREATE TABLE measurements_2026 PARTITION OF measurements FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')`,
	`INSERT INTO measurements SELECT g, date '2026-01-01' + g % 300, g FROM generate_series(1, 200) g`,
	`CREATE TABLE measurements_2027 (id bigint NOT NULL, at date NOT NULL, v int, PRIMARY KEY (id, at))`,
	`INSERT INTO measurements_2027 SELECT g, date '2027-01-01' + g % 300, g FROM generate_series(1, 100) g`,
	`ALTER TABLE measurements ATTACH PARTITION measurements_2027 FOR VALUES FROM ('2027-01-01') TO ('2028-01-01')`,
	`INSERT INTO measurements SELECT g, date '2027-01-01' + g % 300, -g FROM generate_series(101, 150) g`,
	`ALTER TABLE measurements DETACH PARTITION measurements_2027`,
	`DROP INDEX accounts_tier_idx`,
	`ALTER TABLE accounts DROP CONSTRAINT balance_sane`,
	`ALTER TABLE accounts ALTER COLUMN tier DROP DEFAULT, ALTER COLUMN memo SET NOT NULL`,
	`COMMENT ON TABLE accounts IS 'after the migration'`,
	`DROP TABLE old_stuff`,
	`SELECT parapply.replicate_ddl($$ALTER TABLE events ADD COLUMN source text DEFAULT 'app'$$)`,
}

// TestDDLMigration runs a migration of 23 mixed schema changes on the
// publisher while 4 clients write to the tables it changes, with ddl =
// apply, at workers 0 and 4: the target ends with the publisher's schema
// (every table's columns, defaults, constraints, indexes, partitions and
// comment; and pg_dump --schema-only's text where a pg_dump for the
// server's version is at hand) and its rows.
func TestDDLMigration(t *testing.T) {
	for _, workers := range []int{0, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			e := newEnv(t, ddlSchema)
			ctx := context.Background()
			if err := ddl.Install(ctx, e.pub, []string{"pub"}, true); err != nil {
				t.Fatal(err)
			}
			cfg := e.config(fmt.Sprintf("ddl%d", workers))
			e.applyOwnsTables() // ddl = apply alters the tables and creates in their schema: the apply role owns them (docs/operations.md)
			cfg.Workers, cfg.AutoWorkers, cfg.DDL = workers, false, subscriber.DDLApply
			r := e.start(cfg)

			stop := clientLoad(t, e.pair.Publisher.DSN("postgres"), 4, seed(t), ddlLoad)
			defer stop()
			for i, step := range ddlMigration {
				_, err := e.pub.Exec(ctx, step)
				for try := 1; err != nil && strings.Contains(err.Error(), "SQLSTATE 40P01") && try < 5; try++ {
					// A step that locks rows the clients update, then
					// takes the table's lock: a migration tool retries
					// (a step that opens a transaction left it aborted).
					_, _ = e.pub.Exec(ctx, "ROLLBACK")
					_, err = e.pub.Exec(ctx, step)
				}
				if err != nil {
					stop()
					t.Fatalf("migration step %d: %v", i+1, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(300 * time.Millisecond)
			stop()
			e.waitCaughtUp(r)

			pubSchema, subSchema := ddlSchemaOf(t, e.pub), ddlSchemaOf(t, e.sub)
			if pubSchema != subSchema {
				t.Fatalf("the target's schema differs from the publisher's:\npublisher:\n%s\ntarget:\n%s", pubSchema, subSchema)
			}
			t.Logf("schemas identical:\n%s", pubSchema)
			ddlCompareDumps(t, e)
			e.verify("public.accounts", "public.events", "public.audit", "public.measurements_2026", "public.measurements_2027")
			if n := r.s.Status().DDL; n != 23 {
				t.Errorf("status counts %d DDL messages applied, want 23 (the migration's statement strings that hold DDL)", n)
			}
		})
	}
}

// ddlLoad is one step of a client of TestDDLMigration's load: a small
// transaction on accounts or events, of the columns no step of the
// migration renames or drops.
func ddlLoad(ctx context.Context, c *pgx.Conn, rng *rand.Rand) error {
	id := rng.Int64N(500) + 1
	var err error
	switch rng.IntN(3) {
	case 0:
		_, err = c.Exec(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = $2`, rng.Int64N(100)-50, id)
	case 1:
		_, err = c.Exec(ctx, `INSERT INTO events (account_id, payload) VALUES ($1, $2)`, id, fmt.Sprintf("p%d", rng.IntN(1000)))
	case 2:
		_, err = c.Exec(ctx, `DELETE FROM events WHERE id = (SELECT min(id) FROM events WHERE account_id = $1)`, id)
	}
	return err
}

// ddlSchemaOf describes every table of schema public as its catalog holds
// it: columns in order (type, NOT NULL, default, identity, generated),
// constraints, indexes, partition bound and comment.
func ddlSchemaOf(t *testing.T, c *pgx.Conn) string {
	t.Helper()
	return ddlSchemaIn(t, c, "public")
}

// ddlSchemaIn is ddlSchemaOf for the tables of schema.
func ddlSchemaIn(t *testing.T, c *pgx.Conn, schema string) string {
	t.Helper()
	pubMajor, err := pgtest.PublisherMajor()
	if err != nil {
		t.Fatal(err)
	}
	targetMajor, err := pgtest.Major()
	if err != nil {
		t.Fatal(err)
	}
	// NOT NULL is catalogued as a constraint from PostgreSQL 18 on, with a
	// name an older publisher has none of: listed where both sides have
	// them (the columns' "not null" says it on every version).
	notNullNamed := min(pubMajor, targetMajor) >= 18
	var out string
	err = c.QueryRow(context.Background(), `
SELECT coalesce(string_agg(d, E'\n' ORDER BY d), '') FROM (
  SELECT format('table %s (%s) kind %s partition of %s %s comment %s', c.relname,
    (SELECT string_agg(format('%s %s%s%s%s%s', a.attname, format_type(a.atttypid, a.atttypmod),
            CASE WHEN a.attnotnull THEN ' not null' ELSE '' END,
            coalesce(' default ' || pg_get_expr(ad.adbin, ad.adrelid), ''),
            CASE WHEN a.attidentity <> '' THEN ' identity ' || a.attidentity::text ELSE '' END,
            CASE WHEN a.attgenerated <> '' THEN ' generated' ELSE '' END), ', ' ORDER BY a.attnum)
     FROM pg_attribute a LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
     WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
    c.relkind,
    coalesce((SELECT p.relname FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent WHERE i.inhrelid = c.oid), '-'),
    coalesce(pg_get_expr(c.relpartbound, c.oid), ''),
    coalesce(obj_description(c.oid, 'pg_class'), '-'))
  || coalesce((SELECT string_agg(E'\n  constraint ' || conname || ' ' || pg_get_constraintdef(oid), '' ORDER BY conname)
               FROM pg_constraint WHERE conrelid = c.oid AND (contype <> 'n' OR $2)), '')
  || coalesce((SELECT string_agg(E'\n  ' || pg_get_indexdef(indexrelid), '' ORDER BY pg_get_indexdef(indexrelid))
               FROM pg_index WHERE indrelid = c.oid), '') AS d
  FROM pg_class c WHERE c.relnamespace = $1::text::regnamespace AND c.relkind IN ('r', 'p')) s`, schema, notNullNamed).Scan(&out)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ddlCompareDumps compares pg_dump --schema-only of schema public on both
// servers, with PARAPPLY_PG_DUMP (a pg_dump as new as the servers, which
// .ci/run fetches) or the pg_dump installed for the servers' major version
// (Debian's postgresql-15 has one; the embedded servers come without),
// of the newer server where the publisher is older than the target.
// Owners and grants are left out: the target's tables belong to the role
// that applies (docs/operations.md), the publisher's to their own.
func ddlCompareDumps(t *testing.T, e *env) {
	t.Helper()
	major := max(e.pair.Publisher.Version, e.pair.Subscriber.Version)
	bin := os.Getenv("PARAPPLY_PG_DUMP")
	if bin == "" {
		bin = filepath.Join("/usr/lib/postgresql", fmt.Sprint(major), "bin", "pg_dump")
	}
	if _, err := os.Stat(bin); err != nil {
		t.Logf("no pg_dump for PostgreSQL %d here (%s; set PARAPPLY_PG_DUMP): the catalogs' descriptions above are what was compared", major, bin)
		return
	}
	dump := func(dsn string) string {
		var out, stderr bytes.Buffer
		cmd := exec.Command(bin, "--schema-only", "--schema=public", "--no-publications", "--no-subscriptions", "--no-owner", "--no-privileges", "-d", dsn)
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s: %v: %s", bin, err, stderr.String())
		}
		// \restrict and \unrestrict lines carry a random key; the
		// header names each server's version, which differ where the
		// publisher is older than the target.
		dump := regexp.MustCompile(`(?m)^(\\(un)?restrict |-- Dumped from database version ).*$`).ReplaceAllString(out.String(), "")
		if min(e.pair.Publisher.Version, e.pair.Subscriber.Version) < 18 {
			// A NOT NULL of 18 on has a name, which pg_dump writes
			// where it is not the default one; an older side has none.
			dump = regexp.MustCompile(` CONSTRAINT \S+ NOT NULL`).ReplaceAllString(dump, " NOT NULL")
		}
		return dump
	}
	pub, sub := dump(e.pair.Publisher.DSN("postgres")), dump(e.pair.Subscriber.DSN("postgres"))
	if pub != sub {
		t.Fatalf("pg_dump --schema-only differs:\npublisher:\n%s\ntarget:\n%s", pub, sub)
	}
	t.Logf("pg_dump --schema-only identical (%d lines)", strings.Count(pub, "\n"))
}

// TestDDLInTransactions: DDL inside a streamed transaction and inside a
// prepared one, CREATE and DROP INDEX CONCURRENTLY (one an earlier build
// left invalid on the target built again), a DDL the target refuses (it stops, naming the statement
// and the skip command; parapply skip --ddl passes over the DDL alone and
// the transaction's rows are applied), and ddl = off leaving the messages
// alone.
func TestDDLInTransactions(t *testing.T) {
	settings := map[string]string{"max_prepared_transactions": "10"}
	for k, v := range fast {
		settings[k] = v
	}
	e := newEnvSettings(t, `CREATE TABLE big (id int PRIMARY KEY, v text)`, settings, settings)
	ctx := context.Background()
	ddlCheck := func(want string) {
		t.Helper()
		rep, _, out := runCheck(t, "--source", e.sourceDSN(), "--target", e.targetDSN(),
			"--publication", "pub", "--slot", "ddlcheck", "--ddl", "apply")
		for _, r := range rep.Results {
			if r.Check == "DDL capture" {
				text := r.Detail
				for _, p := range r.Problems {
					text += "\n" + p.What + " (fix: " + p.Fix + ")"
				}
				if !strings.Contains(text, want) {
					t.Fatalf("parapply check's DDL capture line lacks %q:\n%s", want, text)
				}
				return
			}
		}
		t.Fatalf("parapply check has no DDL capture line:\n%s", out)
	}
	ddlCheck("parapply ddl install --source DSN --publication pub")
	if err := ddl.Install(ctx, e.pub, []string{"pub"}, true); err != nil {
		t.Fatal(err)
	}
	ddlCheck("event triggers follow pub")
	cfg := e.config("ddltx")
	e.applyOwnsTables() // ddl = apply alters the tables and creates in their schema: the apply role owns them (docs/operations.md)
	cfg.DDL = subscriber.DDLApply
	cfg.Source.TwoPhase, cfg.Source.Streaming, cfg.Source.DecodingWorkMem = true, true, "64kB"
	r := e.start(cfg)

	// Streamed: rows, the DDL, rows using the new column.
	e.exec(e.pub, `BEGIN;
		INSERT INTO big SELECT g, repeat('x', 100) FROM generate_series(1, 5000) g;
		ALTER TABLE big ADD COLUMN extra int DEFAULT 7;
		UPDATE big SET extra = id WHERE id % 2 = 0;
		COMMIT`)
	// Prepared, then committed.
	e.exec(e.pub, `BEGIN; ALTER TABLE big ADD COLUMN p text; INSERT INTO big (id, v, p) VALUES (6001, 'prepared', 'p'); PREPARE TRANSACTION 'ddl'`)
	e.exec(e.pub, `COMMIT PREPARED 'ddl'`)
	e.waitCaughtUp(r)
	if a, b := ddlSchemaOf(t, e.pub), ddlSchemaOf(t, e.sub); a != b {
		t.Fatalf("schemas differ:\n%s\n%s", a, b)
	}
	e.verify("public.big")
	st := r.s.Status()
	if st.StreamedAtCommit == 0 {
		t.Errorf("the streamed transaction holding DDL was not applied at its commit (status %+v)", st)
	}

	// CREATE INDEX CONCURRENTLY where an earlier build left the index
	// invalid: built again; then DROP INDEX CONCURRENTLY.
	if _, err := e.sub.Exec(ctx, `CREATE UNIQUE INDEX CONCURRENTLY big_v_u ON big ((1))`); err == nil {
		t.Fatal("a unique index on a constant over many rows was built")
	}
	e.exec(e.pub, `CREATE UNIQUE INDEX CONCURRENTLY big_v_u ON big (id, v)`)
	e.waitCaughtUp(r)
	var valid bool
	var def string
	if err := e.sub.QueryRow(ctx, `SELECT indisvalid, pg_get_indexdef(indexrelid) FROM pg_index WHERE indexrelid = 'big_v_u'::regclass`).Scan(&valid, &def); err != nil || !valid || !strings.Contains(def, "(id, v)") {
		t.Fatalf("the index built concurrently on the target: valid %v, %q, %v", valid, def, err)
	}
	e.exec(e.pub, `DROP INDEX CONCURRENTLY big_v_u`)
	e.waitCaughtUp(r)
	var left *string
	if err := e.sub.QueryRow(ctx, `SELECT to_regclass('big_v_u')::text`).Scan(&left); err != nil || left != nil {
		t.Fatalf("DROP INDEX CONCURRENTLY left %v on the target (%v)", left, err)
	}

	// Refused on the target: an index of that name is there already.
	e.exec(e.sub, `CREATE INDEX big_extra_idx ON big (v)`)
	tx, err := e.pub.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var xid string
	if _, err := tx.Exec(ctx, `CREATE INDEX big_extra_idx ON big (extra)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `INSERT INTO big (id, v) VALUES (7001, 'after') RETURNING pg_current_xact_id()::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var commit string
	if err := e.pub.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&commit); err != nil {
		t.Fatal(err)
	}
	var runErr error
	select {
	case runErr = <-r.done:
		r.done <- runErr
	case <-time.After(60 * time.Second):
		t.Fatal("parapply did not stop at a DDL the target refuses")
	}
	for _, want := range []string{`CREATE INDEX big_extra_idx ON big (extra)`, "already exists", "parapply skip"} {
		if runErr == nil || !strings.Contains(runErr.Error(), want) {
			t.Fatalf("the error does not say %q: %v", want, runErr)
		}
	}
	lsn := regexp.MustCompile(`commit ([0-9A-F]+/[0-9A-F]+)`).FindStringSubmatch(runErr.Error())
	if lsn == nil {
		t.Fatalf("the error names no commit LSN: %v", runErr)
	}
	t.Logf("the stop: %v", runErr)
	// The stop names the source transaction (its xid, not the 0 a
	// message carries outside a streamed transaction) and the skip
	// command as it runs.
	for _, want := range []string{"source transaction " + xid + " (commit " + lsn[1] + ")", "parapply skip --slot ddltx --lsn " + lsn[1] + " --ddl"} {
		if !strings.Contains(runErr.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, runErr)
		}
	}
	skipAt, err := parapply.ParseLSN(lsn[1])
	if err != nil {
		t.Fatal(err)
	}
	if err := progress.SetSkip(ctx, e.sub, "ddltx", skipAt, progress.SkipDDL); err != nil {
		t.Fatal(err)
	}
	r = e.start(cfg)
	e.waitCaughtUp(r)
	var n int
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM big WHERE id = 7001`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the row of the transaction whose DDL was skipped: %d, %v", n, err)
	}
	if err := e.sub.QueryRow(ctx, `SELECT pg_get_indexdef('big_extra_idx'::regclass)`).Scan(&def); err != nil || !strings.Contains(def, "(v)") {
		t.Fatalf("the target's own index was changed: %q, %v", def, err)
	}
	_ = r.stop()
	// What stands for the skipped statement, run by hand.
	e.exec(e.sub, `DROP INDEX big_extra_idx; CREATE INDEX big_extra_idx ON big (extra)`)

	// A start while the publisher's schema is ahead, by DDL still in the
	// stream: parapply check warns (no refusal), and the run starts and
	// applies it.
	e.exec(e.pub, `ALTER TABLE big ADD COLUMN later int; INSERT INTO big (id, v, later) VALUES (7501, 'later', 1)`)
	rep, _, out := runCheck(t, "--source", e.sourceDSN(), "--target", e.targetDSN(),
		"--publication", "pub", "--slot", "ddltx", "--ddl", "apply")
	warned := false
	for _, res := range rep.Results {
		for _, p := range res.Problems {
			if strings.Contains(p.What, "column later ") {
				if p.Fails {
					t.Errorf("parapply check fails a start whose DDL is still in the stream: %s %s", res.Check, p.What)
				}
				warned = warned || strings.Contains(p.What, "ddl = apply")
			}
		}
	}
	if !warned {
		t.Errorf("parapply check does not warn that the target lacks column later:\n%s", out)
	}
	r = e.start(cfg)
	e.waitCaughtUp(r)
	if a, b := ddlSchemaOf(t, e.pub), ddlSchemaOf(t, e.sub); a != b {
		t.Fatalf("schemas differ after a start behind the publisher:\n%s\n%s", a, b)
	}
	e.verify("public.big")
	_ = r.stop()

	// ddl = off: the messages are passed over.
	cfg.DDL = subscriber.DDLOff
	r = e.start(cfg)
	e.exec(e.pub, `SELECT parapply.replicate_ddl('COMMENT ON TABLE big IS ''from the publisher''')`)
	e.exec(e.pub, `INSERT INTO big (id, v) VALUES (8001, 'off')`)
	e.waitCaughtUp(r)
	var comment *string
	if err := e.sub.QueryRow(ctx, `SELECT obj_description('big'::regclass, 'pg_class')`).Scan(&comment); err != nil || comment != nil {
		t.Fatalf("with ddl = off the target's table got a comment: %v, %v", comment, err)
	}
	e.verify("public.big")
}

// TestDDLCapture: what the publisher's event triggers send, read from a
// slot: DDL on a published table (and on an index of one), a new table in
// a published schema, a dropped published table; not DDL on a table of no
// followed publication, and the user's DDL never fails because the
// capture does; uninstall leaves no event trigger.
func TestDDLCapture(t *testing.T) {
	ctx, srv := pgtest.ForTest(t, "ddlcapture", 3*time.Minute)
	c := pgtest.Connect(ctx, t, srv.DSN("postgres"))
	run := func(sql string) {
		t.Helper()
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	run(`CREATE SCHEMA app; CREATE TABLE pubd (id int PRIMARY KEY); CREATE TABLE other (id int PRIMARY KEY);
		CREATE PUBLICATION p1 FOR TABLE pubd; CREATE PUBLICATION p2 FOR TABLES IN SCHEMA app; CREATE PUBLICATION unfollowed FOR TABLE other`)
	if err := ddl.Install(ctx, c, []string{"p1", "p2", "missing"}, true); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("a publication that does not exist: %v", err)
	}
	if err := ddl.Install(ctx, c, []string{"p1", "p2"}, true); err != nil {
		t.Fatal(err)
	}
	run(`SELECT pg_create_logical_replication_slot('cap', 'pgoutput')`)
	run(`ALTER TABLE pubd ADD COLUMN a int`)
	// The capture runs under its own search_path and gives the user's
	// back; the message carries the user's.
	run(`SET search_path = app, public`)
	run(`CREATE INDEX pubd_a ON pubd (a)`)
	var path string
	if err := c.QueryRow(ctx, `SHOW search_path`).Scan(&path); err != nil || path != "app, public" {
		t.Fatalf("search_path after a captured DDL: %q, %v", path, err)
	}
	run(`RESET search_path`)
	run(`ALTER TABLE other ADD COLUMN a int`)
	run(`CREATE TABLE app.fresh (id int PRIMARY KEY)`)
	run(`CREATE TEMP TABLE scratch (id int)`)
	run(`DROP TABLE pubd`)
	run(`ALTER TABLE other ADD COLUMN b int; COMMENT ON TABLE app.fresh IS 'x'`)
	// The capture failing leaves the user's DDL alone.
	run(`ALTER FUNCTION parapply.ddl_followed() RENAME TO ddl_followed_away`)
	run(`CREATE TABLE app.second (id int)`)
	run(`ALTER FUNCTION parapply.ddl_followed_away() RENAME TO ddl_followed`)

	rows, err := c.Query(ctx, `SELECT data FROM pg_logical_slot_peek_binary_changes('cap', NULL, NULL,
			'proto_version', '1', 'publication_names', 'p1', 'messages', 'true')`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	dec := pgoutput.Decoder{ProtoVersion: 1}
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			t.Fatal(err)
		}
		m, err := dec.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		if lm, ok := m.(*pgoutput.LogicalMessage); ok && lm.Prefix == ddl.Prefix {
			msg, err := ddl.Parse(lm.Content)
			if err != nil {
				t.Fatalf("%q: %v", lm.Content, err)
			}
			got = append(got, msg.SQL)
			if msg.SQL == `CREATE INDEX pubd_a ON pubd (a)` && strings.Join(msg.SearchPath, ",") != "app,public" {
				t.Errorf("the message of %q carries search_path %q, want app, public", msg.SQL, msg.SearchPath)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := []string{`ALTER TABLE pubd ADD COLUMN a int`, `CREATE INDEX pubd_a ON pubd (a)`, `CREATE TABLE app.fresh (id int PRIMARY KEY)`,
		`DROP TABLE pubd`, `ALTER TABLE other ADD COLUMN b int; COMMENT ON TABLE app.fresh IS 'x'`}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("messages sent:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if st, err := ddl.Inspect(ctx, c); err != nil || !st.Triggers || !st.Function || strings.Join(st.Publications, ",") != "p1,p2" || !st.PublicMessages {
		t.Fatalf("Inspect() = %+v, %v", st, err)
	}
	// With pg_logical_emit_message revoked from PUBLIC, a role that may
	// run DDL but not write messages still has it sent (the capture runs
	// as its owner), and cannot write one of its own.
	run(ddl.RevokeMessages)
	run(`CREATE ROLE migrator; GRANT ALL ON SCHEMA app TO migrator; ALTER TABLE app.fresh OWNER TO migrator`)
	run(`SET ROLE migrator`)
	run(`ALTER TABLE app.fresh ADD COLUMN m int`)
	if _, err := c.Exec(ctx, `SELECT pg_logical_emit_message(true, 'parapply.ddl', '{"sql": "DROP TABLE x"}')`); err == nil {
		t.Error("a role without EXECUTE on pg_logical_emit_message wrote a message")
	}
	run(`RESET ROLE`)
	if st, err := ddl.Inspect(ctx, c); err != nil || st.PublicMessages {
		t.Fatalf("Inspect() after the revoke = %+v, %v", st, err)
	}
	var sent int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_peek_binary_changes('cap', NULL, NULL,
			'proto_version', '1', 'publication_names', 'p1', 'messages', 'true') WHERE position('ADD COLUMN m int' in encode(data, 'escape')) > 0`).Scan(&sent); err != nil || sent != 1 {
		t.Fatalf("the DDL of a role that may not write messages: %d sent, %v", sent, err)
	}

	// Without event triggers: replicate_ddl only.
	if err := ddl.Install(ctx, c, []string{"p1"}, false); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'parapply%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("event triggers left by an install without them: %d, %v", n, err)
	}
	if st, err := ddl.Inspect(ctx, c); err != nil || st.Triggers || !st.Function {
		t.Fatalf("Inspect() without event triggers = %+v, %v", st, err)
	}
	run(`SELECT parapply.replicate_ddl('ALTER TABLE app.fresh ADD COLUMN z int')`)
	if err := ddl.Uninstall(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'parapply%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("event triggers left after uninstall: %d, %v", n, err)
	}
	if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'parapply'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("schema parapply left after uninstall: %d, %v", n, err)
	}
}

// TestDDLCommands runs the commands as a DBA would: parapply ddl install
// and status on the publisher, parapply run --ddl apply as a process, a
// schema change that reaches the target, parapply status naming the DDL
// applied, and parapply ddl uninstall.
func TestDDLCommands(t *testing.T) {
	e := newEnv(t, `CREATE TABLE shop (id int PRIMARY KEY, name text)`)
	ctx := context.Background()
	// parapply ddl install makes event triggers: a superuser's command.
	src, dst := e.superSource(), e.targetDSN()
	e.applyOwnsTables() // ddl = apply alters the tables and creates in their schema: the apply role owns them (docs/operations.md)
	mustRun := func(want string, args ...string) string {
		t.Helper()
		out, err := runOnce(t, args...)
		if err != nil || !strings.Contains(out, want) {
			t.Fatalf("parapply %s: %v, output lacks %q:\n%s", strings.Join(args[:2], " "), err, want, out)
		}
		return out
	}
	if out, err := runOnce(t, "ddl", "--source", src); err == nil || !strings.Contains(out, "install, uninstall or status") {
		t.Fatalf("parapply ddl without a subcommand: %v\n%s", err, out)
	}
	mustRun("no DDL capture installed", "ddl", "status", "--source", src)
	mustRun("DDL on the tables of publication pub is sent to parapply from now on", "ddl", "install", "--source", src, "--publication", "pub")
	out := mustRun("DDL on the tables of publication pub is sent to parapply (event triggers", "ddl", "status", "--source", src)
	if !strings.Contains(out, "WARNING: every role may call pg_logical_emit_message") {
		t.Errorf("parapply ddl status does not warn that every role may write messages:\n%s", out)
	}

	p := e.runProcess(t, "--publication", "pub", "--slot", "ddlcmd", "--ddl", "apply", "--status-interval", "1s")
	e.waitSlotExists(t, "ddlcmd", p)
	e.exec(e.pub, `ALTER TABLE shop ADD COLUMN price numeric(10,2) DEFAULT 0`)
	e.exec(e.pub, `INSERT INTO shop VALUES (1, 'one', 9.50)`)
	e.waitSlotConfirmed("ddlcmd", 2*time.Minute, p.alive)
	e.verify("public.shop")
	deadline := time.Now().Add(30 * time.Second)
	for {
		// The running parapply records its status every second.
		text, _ := runOnce(t, "status", "--target", dst, "--slot", "ddlcmd")
		if strings.Contains(text, "schema changes") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("parapply status does not show the DDL applied:\n%s", text)
		}
		time.Sleep(200 * time.Millisecond)
	}
	st, _ := statusJSON(t, "--target", dst, "--slot", "ddlcmd")
	if st["ddl_statements"] != float64(1) {
		t.Errorf("parapply status --json: ddl_statements = %v, want 1", st["ddl_statements"])
	}

	// After the read-only step of a cut-over, uninstall writes all the same.
	e.exec(e.pub, `ALTER DATABASE postgres SET default_transaction_read_only = on`)
	defer e.exec(e.pub, `ALTER DATABASE postgres RESET default_transaction_read_only`)
	mustRun("the DDL capture is removed", "ddl", "uninstall", "--source", src)
	var n int
	if err := e.pub.QueryRow(ctx, `SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'parapply%'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("event triggers left after parapply ddl uninstall: %d, %v", n, err)
	}
}
