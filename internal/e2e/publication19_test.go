package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/internal/verify"
	"github.com/parapply/parapply/sequences"
)

// What PostgreSQL 19 adds to publications: FOR ALL TABLES EXCEPT (TABLE
// ...) and FOR ALL SEQUENCES. parapply lists a publication's tables with
// pg_publication_tables, which 19 computes with the EXCEPT list, and the
// publisher's pgoutput leaves the excepted tables out of the stream.

// TestPublicationExcept: a publication FOR ALL TABLES EXCEPT copies and
// streams every table but the excepted ones, as 19's built-in
// subscription does: a plain table, and a partitioned table whose
// partitions go with it (19 refuses a partition alone in the list), both
// when the publication sends the partitions as themselves and through
// their root.
func TestPublicationExcept(t *testing.T) {
	if major, err := pgtest.Major(); err != nil || major < 19 {
		t.Skipf("EXCEPT in a publication needs PostgreSQL 19 or later (this is %d)", major)
	}
	e := newEnv(t, "")
	schema := `CREATE TABLE %[1]s_kept (id int PRIMARY KEY, v text);
		CREATE TABLE %[1]s_skipped (id int PRIMARY KEY, v text);
		CREATE TABLE %[1]s_parted (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
		CREATE TABLE %[1]s_parted_lo PARTITION OF %[1]s_parted FOR VALUES FROM (MINVALUE) TO (100);
		CREATE TABLE %[1]s_parted_hi PARTITION OF %[1]s_parted FOR VALUES FROM (100) TO (MAXVALUE);
		CREATE TABLE %[1]s_other (id int PRIMARY KEY, v text) PARTITION BY RANGE (id);
		CREATE TABLE %[1]s_other_lo PARTITION OF %[1]s_other FOR VALUES FROM (MINVALUE) TO (100);
		CREATE TABLE %[1]s_other_hi PARTITION OF %[1]s_other FOR VALUES FROM (100) TO (MAXVALUE)`
	write := func(p string, from int) []string {
		var out []string
		for _, tbl := range []string{"kept", "skipped", "parted", "other"} {
			out = append(out, fmt.Sprintf(`INSERT INTO %s_%s SELECT g, 'v' || g FROM generate_series(%d, %d) g`, p, tbl, from, from+150))
		}
		return append(out, fmt.Sprintf(`UPDATE %[1]s_kept SET v = 'u' WHERE id %% 7 = 0; UPDATE %[1]s_skipped SET v = 'u' WHERE id %% 7 = 0;
			UPDATE %[1]s_parted SET id = id + 1000 WHERE id < 20; UPDATE %[1]s_other SET id = id + 1000 WHERE id < 20;
			DELETE FROM %[1]s_other WHERE id %% 5 = 0`, p))
	}
	var scs []scenario
	drop := "" // the publication takes all tables: the last scenario's leave the publisher
	for _, c := range []struct{ name, with string }{{"leaves", "false"}, {"viaroot", "true"}} {
		p := "ex_" + c.name
		scs = append(scs, scenario{
			name: p, from: 19,
			pub: drop + fmt.Sprintf(schema, p) + fmt.Sprintf(`; CREATE PUBLICATION %[1]s FOR ALL TABLES EXCEPT (TABLE %[1]s_skipped, %[1]s_parted)
				WITH (publish_via_partition_root = %s)`, p, c.with),
			sub: fmt.Sprintf(schema, p), pubs: []string{p},
			before: write(p, 1), after: write(p, 300), // 1 to 151 fill both partitions
			tables: []string{p + "_kept", p + "_skipped", p + "_parted", p + "_other"},
			check: func(t *testing.T, e *env) {
				e.verify(p+"_kept", p+"_other")
				for _, tbl := range []string{p + "_skipped", p + "_parted"} {
					if n := e.count("SELECT count(*) FROM " + tbl); n != 0 {
						t.Errorf("%s, excepted from the publication, has %d rows on the target; want none", tbl, n)
					}
				}
			},
		})
		drop = fmt.Sprintf("DROP TABLE %[1]s_kept, %[1]s_skipped, %[1]s_parted, %[1]s_other; ", p)
	}
	e.runScenarios(t, scs)
}

// TestPublicationExceptChangedLive: the EXCEPT list changed while parapply
// runs (ALTER PUBLICATION ... SET ALL TABLES EXCEPT): the table that leaves
// the list joins the publication and is copied online with the rows it
// had, as 19's built-in subscription copies it at REFRESH PUBLICATION; the
// table that enters the list keeps its rows on the target and gets no
// later change, as under the built-in.
func TestPublicationExceptChangedLive(t *testing.T) {
	if major, err := pgtest.Major(); err != nil || major < 19 {
		t.Skipf("EXCEPT in a publication needs PostgreSQL 19 or later (this is %d)", major)
	}
	e := newEnv(t, "")
	ctx := context.Background()
	schema := `CREATE TABLE kept (id int PRIMARY KEY, v int); CREATE TABLE joins (id int PRIMARY KEY, v int); CREATE TABLE leaves (id int PRIMARY KEY, v int)`
	e.exec(e.pub, schema)
	e.exec(e.sub, schema)
	e.exec(e.pub, `INSERT INTO kept SELECT g, g FROM generate_series(1, 50) g; INSERT INTO joins SELECT g, g FROM generate_series(1, 50) g;
		INSERT INTO leaves SELECT g, g FROM generate_series(1, 50) g`)
	e.exec(e.pub, `CREATE PUBLICATION pub FOR ALL TABLES EXCEPT (TABLE joins)`)
	builtin := e.builtinSubscription(t, "except_live", schema, []string{"pub"}, 0)
	cfg := e.config("except_live")
	cfg.PublicationRefresh, cfg.CopyData = time.Second, true
	r := e.start(cfg)
	e.exec(e.pub, `UPDATE kept SET v = -v WHERE id <= 10; UPDATE joins SET v = -v WHERE id <= 10; UPDATE leaves SET v = -v WHERE id <= 10`)
	e.waitCaughtUp(r)
	e.verify("public.kept", "public.leaves")
	if n := e.count(`SELECT count(*) FROM joins`); n != 0 {
		t.Fatalf("joins, excepted, has %d rows on the target before it joined; want none", n)
	}

	e.exec(e.pub, `ALTER PUBLICATION pub SET ALL TABLES EXCEPT (TABLE leaves)`)
	e.exec(builtin, `ALTER SUBSCRIPTION builtin_except_live REFRESH PUBLICATION`)
	e.exec(e.pub, `UPDATE kept SET v = 0 WHERE id > 40; UPDATE joins SET v = 0 WHERE id > 40; UPDATE leaves SET v = 0 WHERE id > 40;
		INSERT INTO joins VALUES (51, 51); INSERT INTO leaves VALUES (51, 51)`)
	deadline := time.Now().Add(time.Minute)
	for e.count(`SELECT count(*) FROM joins`) != 51 {
		if time.Now().After(deadline) {
			t.Fatalf("joins has %d rows on the target a minute after it joined the publication; want the publisher's 51", e.count(`SELECT count(*) FROM joins`))
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.waitCaughtUp(r)
	e.verify("public.kept", "public.joins")
	var rows, zeroed int
	if err := e.sub.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE v = 0) FROM leaves`).Scan(&rows, &zeroed); err != nil {
		t.Fatal(err)
	}
	if rows != 50 || zeroed != 0 {
		t.Errorf("leaves on the target: %d rows, %d set to 0 after it left the publication; want the 50 it had and none changed", rows, zeroed)
	}
	deadline = time.Now().Add(time.Minute)
	for {
		_, err := verify.Tables(ctx, builtin, e.sub, "public.kept", "public.joins", "public.leaves")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the built-in subscription and parapply differ after the EXCEPT list changed: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestPublicationAllSequences: with a publication FOR ALL SEQUENCES among
// parapply's, the publications decide which sequences are synced, not the
// published tables' columns: under sequences = owned the run brings a
// sequence no published table owns, and leaves out an unlogged one (19
// publishes none); sync-sequences --sequences all and cutover bring the
// same ones, not every sequence of the database. Without that publication
// owned still means the published tables' sequences.
func TestPublicationAllSequences(t *testing.T) {
	if major, err := pgtest.Major(); err != nil || major < 19 {
		t.Skipf("FOR ALL SEQUENCES needs PostgreSQL 19 or later (this is %d)", major)
	}
	e := newEnv(t, "")
	e.both(`CREATE TABLE orders (id bigserial PRIMARY KEY, v int); CREATE TABLE ident (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int);
		CREATE SEQUENCE free_seq; CREATE UNLOGGED SEQUENCE unlogged_seq`)
	e.exec(e.pub, `CREATE PUBLICATION pub FOR TABLE orders; CREATE PUBLICATION pub_seq FOR ALL SEQUENCES`)
	e.exec(e.pub, `INSERT INTO ident (v) SELECT g FROM generate_series(1, 70) g; SELECT nextval('free_seq') FROM generate_series(1, 7);
		SELECT nextval('unlogged_seq') FROM generate_series(1, 9)`)
	last := func(seq string) int64 { t.Helper(); return sequenceLast(t, e.sub, seq) }

	// The publication of tables alone: owned is the published tables'.
	out, err := runOnce(t, "sync-sequences", "--source", e.sourceDSN(), "--target", e.targetDSN(), "--publication", "pub", "--sequences", "owned")
	t.Logf("parapply sync-sequences --publication pub:\n%s", out)
	if err != nil || !strings.Contains(out, "sequences = owned: "+sequences.FromOwners.String()) || strings.Contains(out, "ident_id_seq") {
		t.Fatalf("sync-sequences of a publication of tables (%v): want the sequences orders owns, not ident_id_seq", err)
	}

	cfg := e.config("allseq")
	cfg.Source.Publications = []string{"pub", "pub_seq"}
	cfg.Sequences, cfg.SequenceSyncInterval = sequences.Owned, 200*time.Millisecond
	r := e.start(cfg)
	e.exec(e.pub, `INSERT INTO orders (v) SELECT g FROM generate_series(1, 50) g`)
	e.waitCaughtUp(r)
	deadline := time.Now().Add(20 * time.Second)
	for last("orders_id_seq") < 50 || last("free_seq") < 7 {
		if time.Now().After(deadline) {
			t.Fatalf("orders_id_seq at %d and free_seq at %d on the target 20 s after the publisher's reached 50 and 7 (status %+v)", last("orders_id_seq"), last("free_seq"), r.s.Status().Sequences)
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := map[string]int64{"orders_id_seq": 50, "ident_id_seq": 70, "free_seq": 7, "unlogged_seq": 0}
	for seq, v := range want {
		if got := last(seq); got != v {
			t.Errorf("%s on the target: %d, want %d (the publications' sequences at the publisher's values; no unlogged one)", seq, got, v)
		}
	}
	if st := r.s.Status(); st.Sequences.Sequences != 3 || st.SequenceError != "" {
		t.Errorf("status after the syncs: %+v, error %q; want the publication's 3 sequences", st.Sequences, st.SequenceError)
	}

	// Writes stop; the cut-over brings the publication's sequences, and
	// sync-sequences --sequences all the same ones.
	e.exec(e.pub, `SELECT nextval('free_seq') FROM generate_series(1, 5); SELECT nextval('unlogged_seq')`)
	out, err = runOnce(t, "cutover", "--source", e.sourceDSN(), "--target", e.targetDSN(), "--publication", "pub,pub_seq", "--slot", "allseq", "--timeout", "1m")
	t.Logf("parapply cutover:\n%s", out)
	if err != nil || !strings.Contains(out, "3 sequences, "+sequences.FromPublications.String()) {
		t.Errorf("cutover (%v): want the publications' 3 sequences", err)
	}
	if got := last("free_seq"); got != 12 {
		t.Errorf("free_seq on the target after the cut-over: %d, want 12", got)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	out, err = runOnce(t, "sync-sequences", "--source", e.sourceDSN(), "--target", e.targetDSN(), "--publication", "pub,pub_seq", "--sequences", "all")
	t.Logf("parapply sync-sequences --sequences all:\n%s", out)
	if err != nil || !strings.Contains(out, "sequences = all: "+sequences.FromPublications.String()) || !strings.Contains(out, "3 sequences: 0 moved forward, 3 already there") ||
		strings.Contains(out, "unlogged_seq") {
		t.Errorf("sync-sequences --sequences all (%v): want the publications' 3 sequences, already there, and no unlogged_seq", err)
	}
	if got := last("unlogged_seq"); got != 0 {
		t.Errorf("unlogged_seq on the target: %d, want it untouched (no publication publishes it)", got)
	}
}
