package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/internal/verify"
	"github.com/parapply/parapply/subscriber"
)

// Publication semantics, scenario by scenario, ported from PostgreSQL's own
// subscription tests (src/test/subscription/t): each runs the same
// publisher workload under parapply (target database "postgres") and under
// the built-in subscription (database "builtin" on the same subscriber
// server, same schema), and the two must leave the same rows. Where the
// published rows are the publisher's own (no column list or row filter),
// parapply's target must also equal the publisher.

// scenario is one ported test: the publisher's schema and publications,
// the subscriber's schema (the same on both subscriber databases), what the
// publisher writes before the copy and after it, and the tables compared.
// Scenarios that share one pair of servers (runScenarios) each need a name
// and tables and publications of their own.
type scenario struct {
	name       string
	pub, sub   string
	pubs       []string
	before     []string
	after      []string
	tables     []string
	publishers bool // the target must equal the publisher too
	// builtinFrom is the lowest PostgreSQL major version whose built-in
	// subscription gets the scenario right (0: all).
	builtinFrom int
	// config, when set, changes parapply's configuration; stopped, when
	// set, examines the run once parapply has stopped.
	config  func(*subscriber.Config)
	stopped func(*running)
	// from is the lowest PostgreSQL major version the scenario can run on
	// (0: all): its schema needs a later server.
	from int
	// streaming asks the publisher to stream large in-progress
	// transactions (the pair's logical_decoding_work_mem is set low).
	streaming bool
	// skip, when not empty, is why the scenario is skipped: a known
	// difference from the built-in subscription, named.
	skip string
	// check, when set, asserts more of parapply's target after the run.
	check func(t *testing.T, e *env)
}

// runScenarios runs each scenario on one pair of servers, one after the
// other, as a subtest of its name.
func (e *env) runScenarios(t *testing.T, scs []scenario) {
	t.Helper()
	for _, sc := range scs {
		t.Run(sc.name, func(t *testing.T) {
			if sc.skip != "" {
				t.Skip(sc.skip)
			}
			if v := e.pair.Publisher.Version; v < sc.from {
				t.Skipf("needs PostgreSQL %d or later (the servers run %d)", sc.from, v)
			}
			e.runScenario(t, sc)
		})
	}
}

func (e *env) runScenario(t *testing.T, sc scenario) {
	t.Helper()
	ctx := context.Background()
	// runScenario may run as a subtest: its failures are the subtest's.
	t0 := e.t
	e.t = t
	defer func() { e.t = t0 }()
	e.exec(e.pub, sc.pub)
	e.exec(e.sub, sc.sub)
	for _, q := range sc.before {
		e.exec(e.pub, q)
	}
	builtin := e.builtinSubscription(t, sc.name, sc.sub, sc.pubs, sc.builtinFrom)
	slot := "scenario"
	if sc.name != "" {
		slot = "sc_" + sc.name
	}
	cfg := e.config(slot)
	cfg.Source.Publications = sc.pubs
	cfg.Source.Streaming = sc.streaming
	cfg.CopyData = true
	if sc.config != nil {
		sc.config(&cfg)
	}
	r := e.start(cfg)
	for _, q := range sc.after {
		e.exec(e.pub, q)
	}
	e.waitCaughtUp(r)
	if err := r.stop(); err != nil {
		t.Fatalf("parapply stopped with an error: %v", err)
	}
	if sc.stopped != nil {
		sc.stopped(r)
	}
	if sc.name != "" {
		// The next scenario on these servers needs no slot of this one
		// (its walsender may take a moment to end).
		e.dropSlot(slot)
	}
	if sc.publishers {
		e.verify(sc.tables...)
	}
	if sc.check != nil {
		sc.check(t, e)
	}
	if builtin == nil {
		return
	}
	// The built-in catches up in its own time: the same rows, within a
	// minute.
	deadline := time.Now().Add(time.Minute)
	for {
		res, err := verify.Tables(ctx, builtin, e.sub, sc.tables...)
		if err == nil {
			for _, x := range res {
				t.Logf("%s: %d rows, the same under the built-in subscription and parapply", x.Table, x.Rows)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the built-in subscription (database %s) and parapply (database postgres) differ: %v", builtinName(sc.name), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// dropSlot drops a slot on the publisher once no walsender holds it
// (within 30 seconds).
func (e *env) dropSlot(slot string) {
	e.t.Helper()
	retry := func(c *pgx.Conn, sql string) {
		e.t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			_, err := c.Exec(context.Background(), sql, slot)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				e.t.Fatalf("retiring slot %s: %s: %v", slot, sql, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	retry(e.pub, "SELECT pg_drop_replication_slot($1)")
	// Its origins hold origin states of the subscriber cluster, which the
	// next scenarios' built-in subscriptions need too; its progress row
	// would keep its claim on the scenario's tables.
	retry(e.sub, "SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin WHERE roname ~ ('^parapply_' || $1 || '(_[wsc][0-9]+)?$')")
	retry(e.sub, "DELETE FROM parapply.progress WHERE slot_name = $1")
}

// builtinName is the database, and the subscription, a scenario's
// built-in subscription uses.
func builtinName(scenario string) string {
	if scenario == "" {
		return "builtin"
	}
	return "builtin_" + scenario
}

// builtinSubscription creates a database on the subscriber server with the
// schema, and a built-in subscription there to the publications; nil when
// the servers' version predates from (the built-in is known to get the
// scenario wrong there). The subscription is dropped when t ends.
func (e *env) builtinSubscription(t *testing.T, scenario, schema string, pubs []string, from int) *pgx.Conn {
	t.Helper()
	if v := e.pair.Subscriber.Version; v < from {
		t.Logf("the built-in subscription of PostgreSQL %d gets this scenario wrong (fixed in %d): not compared with it", v, from)
		return nil
	}
	ctx := context.Background()
	name := builtinName(scenario)
	e.exec(e.sub, "CREATE DATABASE "+name)
	c, err := pgx.Connect(ctx, e.pair.Subscriber.DSN(name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := c.Exec(context.Background(), "DROP SUBSCRIPTION IF EXISTS "+name); err != nil {
			t.Logf("dropping the built-in subscription %s: %v", name, err)
		}
		c.Close(context.Background())
	})
	e.exec(c, schema)
	// PostgreSQL 15's launcher starts apply workers at most once every
	// wal_retrieve_retry_interval (5 s) across all subscriptions, 16 on
	// per subscription: without this each scenario on 15 waits 5 s.
	e.exec(e.sub, `ALTER SYSTEM SET wal_retrieve_retry_interval = '100ms'`)
	e.exec(e.sub, `SELECT pg_reload_conf()`)
	e.exec(c, fmt.Sprintf("CREATE SUBSCRIPTION %s CONNECTION '%s' PUBLICATION %s", name, e.pair.Publisher.DSN("postgres"), strings.Join(pubs, ", ")))
	// Its copy takes a snapshot of its own when it gets to it: wait for
	// every table to be copied, so that both copies see the rows written
	// before the changes that follow.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var copying int
		err := c.QueryRow(ctx, `SELECT count(*) FROM pg_subscription_rel r JOIN pg_subscription s ON s.oid = r.srsubid
			WHERE s.subname = $1 AND r.srsubstate NOT IN ('r', 's')`, name).Scan(&copying)
		if err != nil {
			t.Fatal(err)
		}
		if copying == 0 {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("the built-in subscription %s has %d tables still to copy after two minutes; subscriber sessions: %s", name, copying, e.targetSessions())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPartitionsViaRoot ports 013_partition.pl's publish_via_partition_root
// cases: partitioned tables published through their roots in one
// publication, one partition also published as itself in a second; the
// subscriber's partitions laid out differently (range instead of list, a
// default partition, another column order; one root plain, one partition
// missing); inserts, updates that move rows between partitions on both
// sides, deletes, TRUNCATE of the roots, and inserts after it. The
// partition in the second publication must be neither copied nor applied
// twice, and its absence on the subscriber must not matter.
func TestPartitionsViaRoot(t *testing.T) {
	e := newEnv(t, "")
	e.runScenario(t, scenario{
		pub: `CREATE TABLE tab1 (a int PRIMARY KEY, b text) PARTITION BY LIST (a);
			CREATE TABLE tab1_1 PARTITION OF tab1 FOR VALUES IN (1, 2, 3);
			CREATE TABLE tab1_2 (b text, a int NOT NULL);
			ALTER TABLE tab1 ATTACH PARTITION tab1_2 FOR VALUES IN (4, 5, 6);
			CREATE TABLE tab1_def PARTITION OF tab1 DEFAULT;
			CREATE TABLE tab2 (a int PRIMARY KEY, b text) PARTITION BY LIST (a);
			CREATE TABLE tab2_1 PARTITION OF tab2 FOR VALUES IN (0, 1, 2, 3, 5, 6);
			CREATE TABLE tab2_2 PARTITION OF tab2 FOR VALUES IN (4, 7, 8, 9);
			CREATE PUBLICATION pub_viaroot FOR TABLE tab1, tab2 WITH (publish_via_partition_root = true);
			CREATE PUBLICATION pub_leaf FOR TABLE tab2_2, tab1_2`,
		sub: `CREATE TABLE tab1 (a int PRIMARY KEY, b text) PARTITION BY RANGE (a);
			CREATE TABLE tab1_lo PARTITION OF tab1 FOR VALUES FROM (MINVALUE) TO (4);
			CREATE TABLE tab1_hi (b text, a int NOT NULL);
			ALTER TABLE tab1 ATTACH PARTITION tab1_hi FOR VALUES FROM (4) TO (100);
			CREATE TABLE tab1_def PARTITION OF tab1 DEFAULT;
			CREATE TABLE tab2 (a int PRIMARY KEY, b text)`,
		pubs:   []string{"pub_viaroot", "pub_leaf"},
		before: []string{`INSERT INTO tab1 VALUES (1, 'one'), (4, 'four'), (7, 'seven'), (200, 'far')`, `INSERT INTO tab2 VALUES (0, 'zero'), (4, 'four'), (8, 'eight')`},
		after: []string{
			`INSERT INTO tab1 VALUES (2, 'two'), (5, 'five'), (150, 'far too')`,
			`INSERT INTO tab2 VALUES (1, 'one'), (7, 'seven'), (9, 'nine')`,
			`UPDATE tab1 SET a = 6 WHERE a = 1`,   // tab1_1 -> tab1_2 here; tab1_lo -> tab1_hi there
			`UPDATE tab1 SET a = 3 WHERE a = 150`, // default -> tab1_1 here; tab1_hi... -> tab1_lo there
			`UPDATE tab2 SET a = 2, b = 'moved' WHERE a = 4`,
			`UPDATE tab2_2 SET b = 'via the partition' WHERE a = 8`,
			`DELETE FROM tab1 WHERE a = 5`,
			`DELETE FROM tab2_2 WHERE a = 9`,
			`TRUNCATE tab1, tab2`,
			`INSERT INTO tab1 VALUES (1, 'again'), (6, 'again'), (300, 'again')`,
			`INSERT INTO tab2 VALUES (4, 'again'), (3, 'again')`,
			`TRUNCATE tab2_2`, // a partition published via root: not replicated
		},
		tables: []string{"public.tab1", "public.tab2"},
		// 15's built-in copies a partition published via root twice.
		builtinFrom: 16,
	})
	// tab1 holds what the publisher's does (tab2 does not: see below).
	e.verify("public.tab1")
	// tab2_2 was truncated on the publisher, as a partition: the target
	// keeps its row (4, 'again'), as the built-in does.
	var n int
	if err := e.sub.QueryRow(context.Background(), "SELECT count(*) FROM tab2 WHERE a = 4").Scan(&n); err != nil || n != 1 {
		t.Fatalf("tab2 holds %d rows with a = 4 (%v), want 1: TRUNCATE of a partition published via its root is not replicated", n, err)
	}
}

// TestPartitionColumnLists ports 031_column_list.pl's case of a root
// published via root with a column list in one publication and one of its
// partitions published as itself with another column list in a second:
// the subscription takes the root, with the root's list, and copies its
// rows once.
func TestPartitionColumnLists(t *testing.T) {
	e := newEnv(t, "")
	e.runScenario(t, scenario{
		pub: `CREATE TABLE test_root (a int PRIMARY KEY, b int, c int) PARTITION BY RANGE (a);
			CREATE TABLE test_root_1 PARTITION OF test_root FOR VALUES FROM (1) TO (10);
			CREATE TABLE test_root_2 PARTITION OF test_root FOR VALUES FROM (10) TO (20);
			CREATE PUBLICATION pub_root FOR TABLE test_root (a, b) WITH (publish_via_partition_root = true);
			CREATE PUBLICATION pub_part FOR TABLE test_root_1 (a, c)`,
		sub:    `CREATE TABLE test_root (a int PRIMARY KEY, b int, c int)`,
		pubs:   []string{"pub_root", "pub_part"},
		before: []string{`INSERT INTO test_root VALUES (1, 2, 3), (10, 20, 30)`},
		after: []string{
			`INSERT INTO test_root VALUES (2, 4, 6), (11, 22, 33)`,
			`UPDATE test_root SET b = b + 100, c = c + 100 WHERE a IN (1, 11)`,
			`DELETE FROM test_root WHERE a = 10`,
		},
		tables:      []string{"public.test_root"},
		builtinFrom: 16,
	})
	if e.pair.Publisher.Version < 16 {
		// A PostgreSQL 15 publisher sends a partition's changes with the
		// union of the column lists; only the copy is parapply's to get
		// right there (the root's rows, once).
		return
	}
	// The root's list (a, b): c never arrives.
	var n int
	if err := e.sub.QueryRow(context.Background(), "SELECT count(*) FROM test_root WHERE c IS NOT NULL").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows of test_root have c set (%v): the partition's column list was used", n, err)
	}
}

// TestRowFiltersCombined ports 028_row_filter.pl's case of one table in two
// publications with different row filters: a row passes if either passes
// it; updates that move a row into or out of the filters become inserts
// and deletes.
func TestRowFiltersCombined(t *testing.T) {
	e := newEnv(t, "")
	e.runScenario(t, scenario{
		pub: `CREATE TABLE tf (a int PRIMARY KEY, b text);
			CREATE PUBLICATION pub_low FOR TABLE tf WHERE (a < 10);
			CREATE PUBLICATION pub_high FOR TABLE tf WHERE (a > 20)`,
		sub:    `CREATE TABLE tf (a int PRIMARY KEY, b text)`,
		pubs:   []string{"pub_low", "pub_high"},
		before: []string{`INSERT INTO tf SELECT g, 'row ' || g FROM generate_series(1, 30) g`},
		after: []string{
			`INSERT INTO tf VALUES (0, 'low'), (35, 'middle'), (40, 'high')`,
			`UPDATE tf SET b = 'updated' WHERE a IN (5, 15, 25)`,
			`UPDATE tf SET a = 112 WHERE a = 2`, // leaves the filters: deleted
			`UPDATE tf SET a = -3 WHERE a = 14`, // enters them: inserted
			`UPDATE tf SET a = 50 WHERE a = 21`, // stays in them
			`DELETE FROM tf WHERE a IN (1, 16, 22)`,
		},
		tables: []string{"public.tf"},
	})
}

// TestTableWithoutColumns ports 001_rep_changes.pl's tab_no_col: a table
// with no columns carries only its row count, copied and replicated.
func TestTableWithoutColumns(t *testing.T) {
	e := newEnv(t, "")
	e.runScenario(t, scenario{
		pub: `CREATE TABLE tab_no_col ();
			CREATE TABLE tab_no_col_full ();
			ALTER TABLE tab_no_col_full REPLICA IDENTITY FULL;
			CREATE PUBLICATION pub_nc FOR TABLE tab_no_col, tab_no_col_full`,
		sub:    `CREATE TABLE tab_no_col (); CREATE TABLE tab_no_col_full ()`,
		pubs:   []string{"pub_nc"},
		before: []string{`INSERT INTO tab_no_col DEFAULT VALUES`, `INSERT INTO tab_no_col_full DEFAULT VALUES`, `INSERT INTO tab_no_col_full DEFAULT VALUES`},
		after: []string{
			`INSERT INTO tab_no_col DEFAULT VALUES`,
			`INSERT INTO tab_no_col SELECT FROM generate_series(1, 300)`,
			`INSERT INTO tab_no_col_full SELECT FROM generate_series(1, 5)`,
			`DELETE FROM tab_no_col_full WHERE ctid = (SELECT min(ctid) FROM tab_no_col_full)`,
			`TRUNCATE tab_no_col`,
			`INSERT INTO tab_no_col DEFAULT VALUES`,
		},
		tables:     []string{"public.tab_no_col", "public.tab_no_col_full"},
		publishers: true,
	})
}

// TestIdentityAlways: columns GENERATED ALWAYS AS IDENTITY (on both sides)
// take the publisher's values, as under the built-in apply, which bypasses
// the check an INSERT or UPDATE statement makes: copied, inserted one by
// one and in bulk (COPY), updated (the column left out of SET), deleted,
// under a primary key and under REPLICA IDENTITY FULL.
func TestIdentityAlways(t *testing.T) {
	e := newEnv(t, "")
	schema := `CREATE TABLE ga (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int);
		CREATE TABLE gaf (id bigint GENERATED ALWAYS AS IDENTITY, v int);
		ALTER TABLE gaf REPLICA IDENTITY FULL`
	e.runScenario(t, scenario{
		pub:    schema + `; CREATE PUBLICATION pub_ga FOR TABLE ga, gaf`,
		sub:    schema,
		pubs:   []string{"pub_ga"},
		before: []string{`INSERT INTO ga (v) SELECT g FROM generate_series(1, 10) g`, `INSERT INTO gaf (v) VALUES (1), (2)`},
		after: []string{
			`INSERT INTO ga (v) VALUES (100)`,
			`INSERT INTO ga (v) SELECT g FROM generate_series(1, 400) g`,
			`INSERT INTO gaf (v) SELECT g FROM generate_series(1, 300) g`,
			`UPDATE ga SET v = v + 1000 WHERE id % 3 = 0`,
			`UPDATE gaf SET v = -v WHERE id % 5 = 0`,
			`DELETE FROM ga WHERE id % 7 = 0`,
			`DELETE FROM gaf WHERE id % 11 = 0`,
		},
		tables:     []string{"public.ga", "public.gaf"},
		publishers: true,
	})
}
