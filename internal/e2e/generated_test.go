package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/subscriber"
)

// Generated columns, as the built-in subscription takes them (ported from
// 011_generated.pl): a column the publications send is copied and streamed
// with the publisher's values whatever its kind there; a column generated on
// the target is computed there, and one the publisher sends a value for is
// refused, as the built-in refuses it.

// TestGeneratedColumns: on every version, stored generated columns that the
// publication does not send (PostgreSQL 15-17 never send them; 18 not with
// publish_generated_columns = none) arrive NULL in a plain target column and
// are computed by the target's own expression in a generated one (under
// REPLICA IDENTITY FULL before 18, which refuses it). On 18,
// publish_generated_columns = stored sends them (a plain target column takes
// the publisher's value, in the copy as in the stream, so that under
// REPLICA IDENTITY FULL later updates and deletes find the copied rows), and
// so does a column list that names one, leaving the table's other generated
// column to the target's expression.
func TestGeneratedColumns(t *testing.T) {
	e := newEnv(t, "")
	v := e.pair.Publisher.Version
	pub := `CREATE TABLE gn (id int PRIMARY KEY, a int, g int GENERATED ALWAYS AS (a * 3) STORED);
		CREATE TABLE gnf (a int, g int GENERATED ALWAYS AS (a * 3) STORED)`
	if v < 18 {
		// PostgreSQL 18 refuses updates of a table whose replica identity
		// holds a generated column it does not publish.
		pub += `; ALTER TABLE gnf REPLICA IDENTITY FULL`
	} else {
		pub += `; ALTER TABLE gnf ADD PRIMARY KEY (a)`
	}
	sub := `CREATE TABLE gn (id int PRIMARY KEY, a int, g int);
		CREATE TABLE gnf (a int PRIMARY KEY, g int GENERATED ALWAYS AS (a * 7) STORED)`
	before := []string{`INSERT INTO gn (id, a) SELECT g, g FROM generate_series(1, 20) g`, `INSERT INTO gnf (a) SELECT g FROM generate_series(1, 20) g`}
	after := []string{
		`INSERT INTO gn (id, a) SELECT g, g FROM generate_series(21, 30) g`,
		`INSERT INTO gnf (a) SELECT g FROM generate_series(21, 30) g`,
		`UPDATE gn SET a = a + 100 WHERE id % 3 = 0`,
		`UPDATE gnf SET a = a + 100 WHERE a % 3 = 0`,
		`DELETE FROM gn WHERE id % 5 = 0`,
		`DELETE FROM gnf WHERE a % 5 = 0`,
	}
	tables := []string{"public.gn", "public.gnf"}
	pubs := []string{"pub_none"}
	// checks are queries that must read the same on the publisher and on
	// parapply's target.
	checks := []string{`SELECT id, a, NULL::int FROM gn ORDER BY id`, `SELECT a, a * 7 FROM gnf ORDER BY a`}
	targetChecks := []string{`SELECT id, a, g FROM gn ORDER BY id`, `SELECT a, g FROM gnf ORDER BY a`}
	if v >= 18 {
		pub += `; CREATE PUBLICATION pub_none FOR TABLE gn, gnf WITH (publish_generated_columns = none);
			CREATE TABLE gs (id int PRIMARY KEY, a int, g int GENERATED ALWAYS AS (a * 2) STORED);
			CREATE TABLE gsf (a int, b text, g text GENERATED ALWAYS AS (b || '/' || a) STORED);
			ALTER TABLE gsf REPLICA IDENTITY FULL;
			CREATE TABLE gl (id int PRIMARY KEY, a int, g int GENERATED ALWAYS AS (a + 1) STORED, h int GENERATED ALWAYS AS (a - 1) STORED);
			CREATE PUBLICATION pub_stored FOR TABLE gs, gsf WITH (publish_generated_columns = stored);
			CREATE PUBLICATION pub_list FOR TABLE gl (id, a, g)`
		sub += `; CREATE TABLE gs (id int PRIMARY KEY, a int, g int);
			CREATE TABLE gsf (a int, b text, g text);
			CREATE TABLE gl (id int PRIMARY KEY, a int, g int, h int GENERATED ALWAYS AS (a * 100) STORED)`
		before = append(before,
			`INSERT INTO gs (id, a) SELECT g, g FROM generate_series(1, 20) g`,
			`INSERT INTO gsf (a, b) SELECT g, 'r' || g FROM generate_series(1, 20) g`,
			`INSERT INTO gl (id, a) SELECT g, g FROM generate_series(1, 20) g`)
		after = append(after,
			`INSERT INTO gs (id, a) SELECT g, g FROM generate_series(21, 30) g`,
			`INSERT INTO gsf (a, b) SELECT g, 'r' || g FROM generate_series(21, 30) g`,
			`INSERT INTO gl (id, a) SELECT g, g FROM generate_series(21, 30) g`,
			`UPDATE gs SET a = a + 100 WHERE id % 3 = 0`,
			`UPDATE gsf SET b = b || '!' WHERE a % 3 = 0`, // copied rows, found by all their values
			`UPDATE gsf SET a = a + 100 WHERE a % 4 = 0`,
			`UPDATE gl SET a = a + 100 WHERE id % 3 = 0`,
			`DELETE FROM gs WHERE id % 5 = 0`,
			`DELETE FROM gsf WHERE a % 5 = 0`,
			`DELETE FROM gl WHERE id % 5 = 0`)
		tables = append(tables, "public.gs", "public.gsf", "public.gl")
		pubs = append(pubs, "pub_stored", "pub_list")
		checks = append(checks, `SELECT id, a, g FROM gs ORDER BY id`, `SELECT a, b, g FROM gsf ORDER BY a`, `SELECT id, a, g, a * 100 FROM gl ORDER BY id`)
		targetChecks = append(targetChecks, `SELECT id, a, g FROM gs ORDER BY id`, `SELECT a, b, g FROM gsf ORDER BY a`, `SELECT id, a, g, h FROM gl ORDER BY id`)
	} else {
		pub += `; CREATE PUBLICATION pub_none FOR TABLE gn, gnf`
	}
	e.runScenario(t, scenario{
		pub: pub, sub: sub, pubs: pubs, before: before, after: after,
		tables: tables, publishers: true,
	})
	for i, q := range checks {
		want, got := e.rowsText(e.pub, q), e.rowsText(e.sub, targetChecks[i])
		if want != got {
			t.Errorf("%s on the target reads\n%s\nwant (from the publisher: %s)\n%s", targetChecks[i], got, q, want)
		}
	}
}

// rowsText reads a query's rows as text, one row a line.
func (e *env) rowsText(c *pgx.Conn, q string) string {
	e.t.Helper()
	rows, err := c.Query(context.Background(), "SELECT x::text FROM ("+q+") x")
	if err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatalf("%s: %v", q, err)
	}
	if len(lines) == 0 {
		e.t.Fatalf("%s reads no rows: nothing to compare", q)
	}
	return strings.Join(lines, "\n")
}

// TestGeneratedOnTarget: a column generated on the target that the
// publisher sends values for (a plain column there, or on PostgreSQL 18 a
// generated one published by publish_generated_columns = stored or by a
// column list) stops parapply with an error naming the column and the fix,
// with nothing applied, in the copy and in the stream; the built-in
// subscription refuses the same tables (PostgreSQL 18: "incompatible
// generated column", before: "missing replicated column").
func TestGeneratedOnTarget(t *testing.T) {
	e := newEnv(t, "")
	v := e.pair.Publisher.Version
	cases := []struct {
		name, table, pub string
		from             int  // lowest PostgreSQL version the case exists on
		copy             bool // copy_data; off: the stream meets the column
	}{
		{"plain on the publisher", "tp", `CREATE TABLE tp (id int PRIMARY KEY, b int); CREATE PUBLICATION pub_tp FOR TABLE tp`, 0, true},
		{"plain on the publisher, streamed", "tps", `CREATE TABLE tps (id int PRIMARY KEY, b int); CREATE PUBLICATION pub_tps FOR TABLE tps`, 0, false},
		{"published generated", "tg", `CREATE TABLE tg (id int PRIMARY KEY, b int GENERATED ALWAYS AS (id * 2) STORED);
			CREATE PUBLICATION pub_tg FOR TABLE tg WITH (publish_generated_columns = stored)`, 18, true},
		{"generated in a column list", "tl", `CREATE TABLE tl (id int PRIMARY KEY, b int GENERATED ALWAYS AS (id * 2) STORED);
			CREATE PUBLICATION pub_tl FOR TABLE tl (id, b)`, 18, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if v < c.from {
				t.Skipf("PostgreSQL %d publishes no generated column", v)
			}
			ctx := context.Background()
			target := fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, b int GENERATED ALWAYS AS (id * 22) STORED)", c.table)
			e.exec(e.pub, c.pub)
			e.exec(e.sub, target)
			insert := fmt.Sprintf("INSERT INTO %s (id) SELECT coalesce(max(id), 0) + 1 FROM %[1]s", c.table)
			e.exec(e.pub, insert)

			// The built-in subscription, in a database of its own.
			db := "builtin_" + c.table
			e.exec(e.sub, "CREATE DATABASE "+db)
			bc, err := pgx.Connect(ctx, e.pair.Subscriber.DSN(db))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_, _ = bc.Exec(context.Background(), "DROP SUBSCRIPTION IF EXISTS "+db)
				bc.Close(context.Background())
			})
			e.exec(bc, target)
			e.exec(bc, fmt.Sprintf("CREATE SUBSCRIPTION %s CONNECTION '%s' PUBLICATION pub_%s", db, e.pair.Publisher.DSN("postgres"), c.table))

			cfg := e.config("gen_" + c.table)
			cfg.Source.Publications = []string{"pub_" + c.table}
			cfg.CopyData = c.copy
			err = runWhileInserting(e, cfg, insert)
			t.Logf("parapply: %v", err)
			if !errors.Is(err, apply.ErrSchema) {
				t.Fatalf("parapply ended with %v, want the target schema refused", err)
			}
			for _, w := range []string{fmt.Sprintf(`column "b" of published table "public".%q is generated on the target`, c.table), "DROP EXPRESSION"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error lacks %q", w)
				}
			}
			var n int
			if err := e.sub.QueryRow(ctx, "SELECT count(*) FROM "+c.table).Scan(&n); err != nil || n != 0 {
				t.Errorf("the target holds %d rows of %s (%v), want none", n, c.table, err)
			}

			// The built-in refuses it too: its workers fail, and
			// pg_stat_subscription_stats counts them (within a minute):
			// every *_error_count column, as 19 split sync_error_count
			// into sync_table_error_count and sync_seq_error_count.
			deadline := time.Now().Add(time.Minute)
			for {
				var errs int64
				if err := bc.QueryRow(ctx, `SELECT coalesce(sum(v.value::bigint), 0)::bigint FROM pg_stat_subscription_stats AS s, jsonb_each_text(to_jsonb(s)) AS v
					WHERE s.subname = $1 AND v.key LIKE '%error_count'`, db).Scan(&errs); err != nil {
					t.Fatal(err)
				}
				if errs > 0 {
					t.Logf("the built-in subscription failed %d times", errs)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the built-in subscription took %s within a minute without an error", c.table)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if err := bc.QueryRow(ctx, "SELECT count(*) FROM "+c.table).Scan(&n); err != nil || n != 0 {
				t.Errorf("the built-in subscription's database holds %d rows of %s (%v), want none", n, c.table, err)
			}
		})
	}
}

// runWhileInserting runs parapply until it stops by itself (within two
// minutes), running insert on the publisher every 200 ms meanwhile, so that
// a run without a copy meets the table in the stream; it returns the error
// parapply ended with (nil fails the test).
func runWhileInserting(e *env, cfg subscriber.Config, insert string) error {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- subscriber.New(cfg).Run(ctx) }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err == nil {
				e.t.Fatal("parapply ran for two minutes without an error")
			}
			return err
		case <-tick.C:
			e.exec(e.pub, insert)
		}
	}
}
