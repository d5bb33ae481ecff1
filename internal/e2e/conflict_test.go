package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/conflict"
	"github.com/parapply/parapply/subscriber"
)

// conflictCase is one table of TestConflicts: rows written on both sides
// before the slot exists (before), on the target only (local, before the
// publisher's changes; late, after them), the publisher's changes, the
// table's policies, and what the target and parapply.conflicts must hold.
type conflictCase struct {
	name, schema        string
	before, local, late []string // SQL on: both sides, the target, the target
	pub                 []string
	rules               string // conflict_resolution entries, for this table
	want                string // the target's rows: "id:v,id:v"
	log                 string // parapply.conflicts: "type/resolution/applied/key/local v/remote v;..."
	// origin: the publisher makes pub's changes under this replication
	// origin (as if it had them from elsewhere): the log names it.
	origin string
}

// TestConflicts: every conflict type parapply detects, under every policy
// that applies to it, the local rows made by ordinary sessions on the
// target (track_commit_timestamp on): the target ends as the policy says,
// and parapply.conflicts holds one row per conflict with its type, the
// key, both rows and the resolution; at workers 0 and 4.
func TestConflicts(t *testing.T) {
	cases := []conflictCase{
		{name: "ie_apply", local: []string{`INSERT INTO ie_apply VALUES (1, 'local')`}, pub: []string{`INSERT INTO ie_apply VALUES (1, 'remote'), (2, 'r2')`},
			rules: "insert_exists=apply_remote", want: "1:remote,2:r2", log: `insert_exists/apply_remote/true/{"id": "1"}/local/remote`},
		{name: "ie_upstream", local: []string{`INSERT INTO ie_upstream VALUES (1, 'local')`}, pub: []string{`INSERT INTO ie_upstream VALUES (1, 'remote')`},
			origin: "upstream", rules: "insert_exists=apply_remote", want: "1:remote", log: `insert_exists/apply_remote/true/{"id": "1"}/local/remote`},
		{name: "ie_keep", local: []string{`INSERT INTO ie_keep VALUES (1, 'local')`}, pub: []string{`INSERT INTO ie_keep VALUES (1, 'remote'), (2, 'r2')`},
			rules: "insert_exists=keep_local", want: "1:local,2:r2", log: `insert_exists/keep_local/false/{"id": "1"}/local/remote`},
		{name: "ie_lww", local: []string{`INSERT INTO ie_lww VALUES (1, 'older')`}, pub: []string{`INSERT INTO ie_lww VALUES (1, 'remote1'), (2, 'remote2')`},
			late: []string{`INSERT INTO ie_lww VALUES (2, 'newer')`}, rules: "insert_exists=last_update_wins", want: "1:remote1,2:newer",
			log: `insert_exists/last_update_wins/true/{"id": "1"}/older/remote1;insert_exists/last_update_wins/false/{"id": "2"}/newer/remote2`},
		{name: "ie_fww", local: []string{`INSERT INTO ie_fww VALUES (1, 'older')`}, pub: []string{`INSERT INTO ie_fww VALUES (1, 'remote1'), (2, 'remote2')`},
			late: []string{`INSERT INTO ie_fww VALUES (2, 'newer')`}, rules: "insert_exists=first_update_wins", want: "1:older,2:remote2",
			log: `insert_exists/first_update_wins/false/{"id": "1"}/older/remote1;insert_exists/first_update_wins/true/{"id": "2"}/newer/remote2`},
		{name: "um_skip", before: []string{`INSERT INTO um_skip VALUES (1, 'a'), (2, 'b')`}, local: []string{`DELETE FROM um_skip WHERE id = 1`},
			pub: []string{`UPDATE um_skip SET v = v || '!'`}, want: "2:b!", log: `update_missing/skip/false/{"id": "1"}//a!`},
		{name: "um_apply", before: []string{`INSERT INTO um_apply VALUES (1, 'a'), (2, 'b')`}, local: []string{`DELETE FROM um_apply WHERE id = 1`},
			pub: []string{`UPDATE um_apply SET v = v || '!'`}, rules: "update_missing=apply_remote", want: "1:a!,2:b!", log: `update_missing/apply_remote/true/{"id": "1"}//a!`},
		{name: "dm_skip", before: []string{`INSERT INTO dm_skip VALUES (1, 'a'), (2, 'b')`}, local: []string{`DELETE FROM dm_skip WHERE id = 1`},
			pub: []string{`DELETE FROM dm_skip`}, want: "", log: `delete_missing/skip/false/{"id": "1"}//1`},
		{name: "dm_one", before: []string{`INSERT INTO dm_one VALUES (1, 'a')`}, local: []string{`DELETE FROM dm_one WHERE id = 1`},
			pub: []string{`DELETE FROM dm_one`}, want: "", log: `delete_missing/skip/false/{"id": "1"}//1`}, // no row found at all
		{name: "uo_apply", before: []string{`INSERT INTO uo_apply VALUES (1, 'a'), (2, 'b')`}, local: []string{`UPDATE uo_apply SET v = 'local' WHERE id = 1`},
			pub: []string{`UPDATE uo_apply SET v = v || '!'`}, want: "1:a!,2:b!", log: `update_origin_differs/apply_remote/true/{"id": "1"}/local/a!`},
		{name: "uo_keep", before: []string{`INSERT INTO uo_keep VALUES (1, 'a'), (2, 'b')`}, local: []string{`UPDATE uo_keep SET v = 'local' WHERE id = 1`},
			pub: []string{`UPDATE uo_keep SET v = v || '!'`}, rules: "update_origin_differs=keep_local", want: "1:local,2:b!", log: `update_origin_differs/keep_local/false/{"id": "1"}/local/a!`},
		{name: "uo_lww", before: []string{`INSERT INTO uo_lww VALUES (1, 'a'), (2, 'b')`}, local: []string{`UPDATE uo_lww SET v = 'older' WHERE id = 1`},
			pub: []string{`UPDATE uo_lww SET v = v || '!'`}, late: []string{`UPDATE uo_lww SET v = 'newer' WHERE id = 2`}, rules: "update_origin_differs=last_update_wins",
			want: "1:a!,2:newer", log: `update_origin_differs/last_update_wins/true/{"id": "1"}/older/a!;update_origin_differs/last_update_wins/false/{"id": "2"}/newer/b!`},
		{name: "uo_skip", before: []string{`INSERT INTO uo_skip VALUES (1, 'a')`}, local: []string{`UPDATE uo_skip SET v = 'local' WHERE id = 1`},
			pub: []string{`UPDATE uo_skip SET v = v || '!'`}, rules: "update_origin_differs=skip", want: "1:local", log: `update_origin_differs/skip/false/{"id": "1"}/local/a!`},
		{name: "do_apply", before: []string{`INSERT INTO do_apply VALUES (1, 'a'), (2, 'b')`}, local: []string{`UPDATE do_apply SET v = 'local' WHERE id = 1`},
			pub: []string{`DELETE FROM do_apply`}, want: "", log: `delete_origin_differs/apply_remote/true/{"id": "1"}/local/1`},
		{name: "do_keep", before: []string{`INSERT INTO do_keep VALUES (1, 'a'), (2, 'b')`}, local: []string{`UPDATE do_keep SET v = 'local' WHERE id = 1`},
			pub: []string{`DELETE FROM do_keep`}, rules: "delete_origin_differs=keep_local", want: "1:local", log: `delete_origin_differs/keep_local/false/{"id": "1"}/local/1`},
		{name: "do_fww", before: []string{`INSERT INTO do_fww VALUES (1, 'a'), (2, 'b')`}, local: []string{`UPDATE do_fww SET v = 'older' WHERE id = 1`},
			pub: []string{`DELETE FROM do_fww`}, late: []string{`UPDATE do_fww SET v = 'newer' WHERE id = 2`}, rules: "delete_origin_differs=first_update_wins",
			want: "1:older", log: `delete_origin_differs/first_update_wins/false/{"id": "1"}/older/1;delete_origin_differs/first_update_wins/true/{"id": "2"}/newer/2`},
		{name: "ue_skip", schema: `CREATE TABLE ue_skip (id int PRIMARY KEY, v text UNIQUE)`,
			before: []string{`INSERT INTO ue_skip VALUES (1, 'a'), (2, 'b')`}, local: []string{`INSERT INTO ue_skip VALUES (3, 'taken')`},
			pub: []string{`UPDATE ue_skip SET v = 'taken' WHERE id = 2`, `UPDATE ue_skip SET v = 'a!' WHERE id = 1`}, rules: "update_exists=skip",
			want: "1:a!,2:b,3:taken", log: `update_exists/skip/false/{"id": "2"}/taken/taken`},
		{name: "nk_dup", schema: `CREATE TABLE nk_dup (id int, v text); ALTER TABLE nk_dup REPLICA IDENTITY FULL`,
			local: []string{`INSERT INTO nk_dup VALUES (1, 'x')`}, pub: []string{`INSERT INTO nk_dup VALUES (1, 'x')`}, want: "1:x,1:x", log: ""}, // no unique index: no conflict
		{name: "mu_keep", schema: `CREATE TABLE mu_keep (id int PRIMARY KEY, v text UNIQUE)`,
			local: []string{`INSERT INTO mu_keep VALUES (1, 'x'), (2, 'y')`}, pub: []string{`INSERT INTO mu_keep VALUES (1, 'y'), (3, 'z')`},
			rules: "multiple_unique_conflicts=keep_local", want: "1:x,2:y,3:z", log: `multiple_unique_conflicts/keep_local/false/{"id": "1"}/[x y]/y`},
	}
	for _, workers := range []int{0, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) { testConflicts(t, workers, cases) })
	}
	// In one stream, every conflict after the first is met by statements
	// that examine every row (for a while after a conflict, see
	// apply/resolve.go): the first of a run is met by the ordinary
	// statement, which must tell a conflict by itself, for each type an
	// update or delete can meet (and with workers, where a worker's
	// conflict goes back to the pool, for one).
	for _, run := range []struct {
		name    string
		workers int
	}{{"uo_keep", 0}, {"do_keep", 0}, {"um_skip", 0}, {"dm_one", 0}, {"uo_keep", 4}} {
		i := slices.IndexFunc(cases, func(c conflictCase) bool { return c.name == run.name })
		t.Run(fmt.Sprintf("%s/workers=%d", run.name, run.workers), func(t *testing.T) { testConflicts(t, run.workers, cases[i:i+1]) })
	}
}

// TestConflictOrigins: the log names the remote origin of a transaction the
// publisher streams (its Origin message comes inside the first stream
// block), of one it prepares (after BEGIN PREPARE), and of one both.
func TestConflictOrigins(t *testing.T) {
	pad := func(name string) string {
		return fmt.Sprintf("INSERT INTO %s_pad SELECT g, repeat('s', 100) FROM generate_series(1, 3000) g", name)
	}
	schema := func(name string) string {
		return fmt.Sprintf("CREATE TABLE %[1]s (id int PRIMARY KEY, v text); CREATE TABLE %[1]s_pad (id int PRIMARY KEY, v text)", name)
	}
	cases := []conflictCase{
		{name: "ie_streamed", schema: schema("ie_streamed"), local: []string{`INSERT INTO ie_streamed VALUES (1, 'local')`},
			pub: []string{`BEGIN; ` + pad("ie_streamed") + `; INSERT INTO ie_streamed VALUES (1, 'remote'); COMMIT`}},
		{name: "ie_prepared", local: []string{`INSERT INTO ie_prepared VALUES (1, 'local')`},
			pub: []string{`BEGIN; INSERT INTO ie_prepared VALUES (1, 'remote'); PREPARE TRANSACTION 'ie_prepared'`, `COMMIT PREPARED 'ie_prepared'`}},
		{name: "ie_both", schema: schema("ie_both"), local: []string{`INSERT INTO ie_both VALUES (1, 'local')`},
			pub: []string{`BEGIN; ` + pad("ie_both") + `; INSERT INTO ie_both VALUES (1, 'remote'); PREPARE TRANSACTION 'ie_both'`, `COMMIT PREPARED 'ie_both'`}},
	}
	for i := range cases {
		cases[i].origin, cases[i].rules, cases[i].want = "upstream", "insert_exists=apply_remote", "1:remote"
		cases[i].log = `insert_exists/apply_remote/true/{"id": "1"}/local/remote`
	}
	testConflicts(t, 4, cases, func(c *subscriber.Config) {
		c.Source.Streaming, c.Source.TwoPhase, c.Source.DecodingWorkMem = true, true, "64kB"
	})
}

func testConflicts(t *testing.T, workers int, cases []conflictCase, tune ...func(*subscriber.Config)) {
	var schema []string
	var rules []string
	for _, c := range cases {
		s := c.schema
		if s == "" {
			s = fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, v text)", c.name)
		}
		schema = append(schema, s)
		for _, r := range strings.Split(c.rules, ",") {
			if r != "" {
				rules = append(rules, "public."+c.name+":"+r)
			}
		}
	}
	pub := maps.Clone(fast)
	pub["max_prepared_transactions"] = "4"
	sub := maps.Clone(pub)
	sub["track_commit_timestamp"] = "on"
	e := newEnvSettings(t, strings.Join(schema, "; "), pub, sub)
	ctx := context.Background()
	// The rows both sides hold come from the initial copy, as in a real
	// setup (rows a local session wrote are in conflict when replicated
	// changes reach them).
	for _, c := range cases {
		for _, q := range c.before {
			e.exec(e.pub, q)
		}
	}
	cfg := e.config("conflicts")
	cfg.CopyData, cfg.Workers, cfg.AutoWorkers = true, workers, false
	for _, f := range tune {
		f(&cfg)
	}
	var err error
	if cfg.Conflicts, err = conflict.Parse(strings.Join(rules, ", ")); err != nil {
		t.Fatal(err)
	}
	t.Logf("conflict_resolution = %s", cfg.Conflicts)
	if cfg.DetectUpdateDeleted {
		e.applyOwnsTables() // detect_update_deleted installs a trigger: the apply role owns the tables (docs/operations.md)
	}
	r := e.start(cfg)
	e.waitCaughtUp(r)
	_ = r.stop()
	for _, c := range cases {
		for _, q := range c.local {
			e.exec(e.sub, q)
		}
	}
	for _, c := range cases {
		if c.origin != "" {
			e.exec(e.pub, `SELECT pg_replication_origin_create($1) WHERE pg_replication_origin_oid($1) IS NULL`, c.origin)
			e.exec(e.pub, `SELECT pg_replication_origin_session_setup($1)`, c.origin)
		}
		for _, q := range c.pub {
			e.exec(e.pub, q)
		}
		if c.origin != "" {
			e.exec(e.pub, `SELECT pg_replication_origin_session_reset()`)
		}
	}
	for _, c := range cases {
		for _, q := range c.late {
			e.exec(e.sub, q)
		}
	}
	r = e.start(cfg)
	e.waitCaughtUp(r)
	_ = r.stop()
	for _, c := range cases {
		rows, err := e.sub.Query(ctx, fmt.Sprintf(`SELECT coalesce(string_agg(id || ':' || v, ',' ORDER BY id), '') FROM %s`, c.name))
		if err != nil {
			t.Fatal(err)
		}
		var got string
		for rows.Next() {
			if err := rows.Scan(&got); err != nil {
				t.Fatal(err)
			}
		}
		if got != c.want {
			t.Errorf("%s: the target holds %q, want %q", c.name, got, c.want)
		}
		var log string
		err = e.sub.QueryRow(ctx, `SELECT coalesce(string_agg(concat_ws('/', conflict_type, resolution, CASE WHEN remote_applied THEN 'true' ELSE 'false' END, key::text,
				CASE WHEN jsonb_typeof(local_row) = 'array' THEN (SELECT '[' || string_agg(x->>'v', ' ' ORDER BY x->>'v') || ']' FROM jsonb_array_elements(local_row) x) ELSE coalesce(local_row->>'v', '') END,
				coalesce(remote_row->>'v', remote_row->>'id', '')), ';' ORDER BY key::text, id), '')
			FROM parapply.conflicts WHERE table_name = $1 AND slot_name = 'conflicts'`, "public."+c.name).Scan(&log)
		if err != nil {
			t.Fatal(err)
		}
		if log != c.log {
			t.Errorf("%s: parapply.conflicts holds\n\t%s\nwant\n\t%s", c.name, log, c.log)
		}
		var wrongOrigin int
		if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM parapply.conflicts WHERE table_name = $1 AND slot_name = 'conflicts' AND remote_origin IS DISTINCT FROM nullif($2, '')`,
			"public."+c.name, c.origin).Scan(&wrongOrigin); err != nil || wrongOrigin != 0 {
			t.Errorf("%s: %d log rows with a remote_origin other than %q (%v)", c.name, wrongOrigin, c.origin, err)
		}
	}
	var bad int
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM parapply.conflicts WHERE source_xid IS NULL OR commit_lsn IS NULL OR remote_commit_time IS NULL
		OR (conflict_type NOT LIKE '%missing' AND local_row IS NOT NULL AND local_commit_time IS NULL)
		OR (conflict_type = 'update_deleted' AND local_commit_time IS NULL)`).Scan(&bad); err != nil || bad != 0 {
		t.Errorf("%d rows of parapply.conflicts lack the source transaction or a commit time (%v)", bad, err)
		rows, err := e.sub.Query(ctx, `SELECT to_jsonb(c)::text FROM parapply.conflicts c ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var r string
			if err := rows.Scan(&r); err != nil {
				t.Fatal(err)
			}
			t.Log(r)
		}
	}
}

// TestConflictsKilled: the publisher inserts keys the target already holds
// (one in five) while parapply, resolving insert_exists by apply_remote, is
// killed with SIGKILL several times: at the end every such key is logged in
// parapply.conflicts exactly once, resolved as without the kills (the
// publisher's row), and the target equals the publisher.
func TestConflictsKilled(t *testing.T) {
	e := newEnv(t, `CREATE TABLE cx (id bigint PRIMARY KEY, v text)`)
	ctx := context.Background()
	e.exec(e.sub, `INSERT INTO cx SELECT g * 5, 'local' FROM generate_series(1, 200000) g`)
	txns := e.killWhileWriting(t, "cx", []string{"--conflict-resolution", "insert_exists=apply_remote"}, 5, 200*time.Millisecond, func(n int64) (*pgx.Batch, int) {
		b := &pgx.Batch{}
		b.Queue("INSERT INTO cx VALUES ($1, $2)", n, fmt.Sprintf("pub %d", n))
		return b, 1
	})
	// The writer may not have heard of its last commit: count on the
	// publisher.
	if err := e.pub.QueryRow(ctx, `SELECT count(*) FROM cx`).Scan(&txns); err != nil {
		t.Fatal(err)
	}
	t.Logf("publisher wrote %d transactions", txns)
	var logged, keys, wrong, left int
	if err := e.sub.QueryRow(ctx, `SELECT count(*), count(DISTINCT key), count(*) FILTER (WHERE conflict_type <> 'insert_exists' OR resolution <> 'apply_remote'
			OR NOT remote_applied OR local_row->>'v' <> 'local' OR (key->>'id')::bigint % 5 <> 0 OR (key->>'id')::bigint > $1)
		FROM parapply.conflicts WHERE table_name = 'public.cx'`, txns).Scan(&logged, &keys, &wrong); err != nil {
		t.Fatal(err)
	}
	if logged != min(txns, 1000000)/5 || keys != logged || wrong != 0 {
		t.Errorf("parapply.conflicts holds %d rows for %d keys (%d wrong); want one per key the target held among the %d inserted: %d", logged, keys, wrong, txns, txns/5)
	}
	// The target's own rows beyond what the publisher wrote stay; no
	// row it shares with the publisher is left as it was.
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM cx WHERE v = 'local' AND id <= $1`, txns).Scan(&left); err != nil || left != 0 {
		t.Errorf("%d rows the publisher inserted are still the target's own (%v)", left, err)
	}
	e.exec(e.sub, `DELETE FROM cx WHERE v = 'local'`)
	e.verify("public.cx")
}

// TestOnErrorSkip: with on_error = skip_transaction, source transactions
// that cannot be applied (a value the target's column refuses) are rolled
// back and skipped, each of their changes written to parapply.conflicts
// with the error, while the others are applied; a later start neither
// applies nor logs them again; at workers 0 and 4.
func TestOnErrorSkip(t *testing.T) {
	for _, workers := range []int{0, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			e := newEnv(t, "")
			ctx := context.Background()
			e.exec(e.pub, `CREATE TABLE typed (id int PRIMARY KEY, v text); CREATE PUBLICATION pub FOR TABLE typed`)
			e.exec(e.sub, `CREATE TABLE typed (id int PRIMARY KEY, v int)`)
			cfg := e.config("onerr")
			cfg.Workers, cfg.AutoWorkers, cfg.OnError = workers, false, subscriber.OnErrorSkip
			r := e.start(cfg)
			e.exec(e.pub, `INSERT INTO typed VALUES (1, '1')`)
			e.exec(e.pub, `BEGIN; INSERT INTO typed VALUES (2, '2'); INSERT INTO typed VALUES (3, 'three'); UPDATE typed SET v = '11' WHERE id = 1; COMMIT`)
			e.exec(e.pub, `INSERT INTO typed VALUES (4, '4')`)
			e.exec(e.pub, `BEGIN; DELETE FROM typed WHERE id = 4; INSERT INTO typed VALUES (5, 'five'); COMMIT`)
			e.exec(e.pub, `INSERT INTO typed VALUES (6, '6')`)
			e.waitCaughtUp(r)
			check := func(when string) {
				t.Helper()
				var rows, log string
				if err := e.sub.QueryRow(ctx, `SELECT string_agg(id || ':' || v, ',' ORDER BY id) FROM typed`).Scan(&rows); err != nil {
					t.Fatal(err)
				}
				if rows != "1:1,4:4,6:6" {
					t.Errorf("%s: the target holds %s, want 1:1,4:4,6:6", when, rows)
				}
				err := e.sub.QueryRow(ctx, `SELECT string_agg(concat_ws('/', conflict_type, resolution, split_part(detail, ':', 1), key->>'id', remote_row->>'v'), ';' ORDER BY id)
					FROM parapply.conflicts WHERE slot_name = 'onerr' AND detail LIKE '%invalid input syntax for type integer%'`).Scan(&log)
				if err != nil {
					t.Fatal(err)
				}
				want := "apply_error/skip_transaction/insert/2/2;apply_error/skip_transaction/insert/3/three;apply_error/skip_transaction/update/1/11;" +
					"apply_error/skip_transaction/delete/4;apply_error/skip_transaction/insert/5/five"
				if log != want {
					t.Errorf("%s: parapply.conflicts holds\n\t%s\nwant\n\t%s", when, log, want)
				}
			}
			check("after the skips")
			if got := r.s.Status().Skipped; got != 2 {
				t.Errorf("status counts %d skipped transactions, want 2", got)
			}
			_ = r.stop()
			e.exec(e.pub, `INSERT INTO typed VALUES (7, '7')`)
			r = e.start(cfg)
			e.waitCaughtUp(r)
			_ = r.stop()
			e.exec(e.sub, `DELETE FROM typed WHERE id = 7`)
			check("after another start")
			var left int
			if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM parapply.skip`).Scan(&left); err != nil || left != 0 {
				t.Errorf("parapply.skip holds %d rows after the target passed them (%v)", left, err)
			}
		})
	}
}
