package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const randomSchema = `
CREATE TYPE color AS ENUM ('red', 'green', 'blue');
CREATE DOMAIN posint AS int CHECK (VALUE > 0);
CREATE TYPE pair AS (a int, b text);
CREATE TABLE t_default (
	id int PRIMARY KEY, n numeric, s text, b bytea, j json, jb jsonb, arr int[], ts timestamptz,
	u uuid, c color, d posint, p pair, r int4range, f float8, big text);
CREATE TABLE t_index (a int NOT NULL, b text NOT NULL, v text, w int);
CREATE UNIQUE INDEX t_index_ab ON t_index (a, b);
ALTER TABLE t_index REPLICA IDENTITY USING INDEX t_index_ab;
CREATE TABLE t_full (a int, b text, j jsonb, big text);
ALTER TABLE t_full REPLICA IDENTITY FULL;
CREATE TABLE t_multi (k1 int, k2 text, v int, PRIMARY KEY (k1, k2));
CREATE TABLE t_gen (id int PRIMARY KEY, a int, g int GENERATED ALWAYS AS (a * 2) STORED);
`

var randomTables = []string{"public.t_default", "public.t_index", "public.t_full", "public.t_multi", "public.t_gen"}

// seed returns the test's random seed: PARAPPLY_TEST_SEED, or the clock.
func seed(t *testing.T) uint64 {
	s := uint64(time.Now().UnixNano())
	if v := os.Getenv("PARAPPLY_TEST_SEED"); v != "" {
		s, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (set PARAPPLY_TEST_SEED to repeat)", s)
	return s
}

// randomWorkload writes n random transactions on the publisher: inserts,
// updates (some changing keys, some leaving TOASTed columns untouched),
// deletes and the occasional truncate, over every table of randomSchema.
type randomWorkload struct {
	r    *rand.Rand
	next int
}

func (w *randomWorkload) val(kind string) any {
	if w.r.IntN(6) == 0 {
		return nil
	}
	switch kind {
	case "n":
		return fmt.Sprintf("%d.%03d", w.r.IntN(100000)-50000, w.r.IntN(1000))
	case "s":
		return []string{"", "plain", "quote'd", "tab\there", "new\nline", "back\\slash", "ünïcødé", "{braces}", `"dq"`, "NULL"}[w.r.IntN(10)]
	case "b":
		b := make([]byte, w.r.IntN(40))
		for i := range b {
			b[i] = byte(w.r.IntN(256))
		}
		return b
	case "j":
		return fmt.Sprintf(`{"k": %d, "s": "v\"%d", "a": [1, null, "x"]}`, w.r.IntN(100), w.r.IntN(100))
	case "arr":
		return []any{w.r.IntN(100), nil, -w.r.IntN(100)}
	case "ts":
		return time.Date(1990+w.r.IntN(60), time.Month(1+w.r.IntN(12)), 1+w.r.IntN(28), w.r.IntN(24), w.r.IntN(60), w.r.IntN(60), w.r.IntN(1000000)*1000, time.FixedZone("x", (w.r.IntN(25)-12)*3600))
	case "u":
		return fmt.Sprintf("%08x-0000-4000-8000-%012x", w.r.Uint32(), w.r.Uint64()&0xffffffffffff)
	case "c":
		return []string{"red", "green", "blue"}[w.r.IntN(3)]
	case "d":
		return 1 + w.r.IntN(1000)
	case "p":
		return fmt.Sprintf(`(%d,"x, %d")`, w.r.IntN(100), w.r.IntN(100))
	case "r":
		lo := w.r.IntN(100)
		return fmt.Sprintf("[%d,%d)", lo, lo+1+w.r.IntN(50))
	case "f":
		return []float64{0.1, -1e-300, 3.141592653589793, 1e300, 2.5}[w.r.IntN(5)]
	case "big":
		// Random hex, about 16 KB: too big to stay inline, so TOASTed.
		b := make([]byte, 8000+w.r.IntN(8000))
		for i := range b {
			b[i] = "0123456789abcdef"[w.r.IntN(16)]
		}
		return string(b)
	}
	panic(kind)
}

var defaultCols = []string{"n", "s", "b", "j", "jb", "arr", "ts", "u", "c", "d", "p", "r", "f", "big"}

func (w *randomWorkload) colVal(c string) any {
	switch c {
	case "jb":
		return w.val("j")
	}
	return w.val(c)
}

func (w *randomWorkload) op(b *pgx.Batch) {
	r := w.r
	switch r.IntN(20) {
	case 0, 1, 2, 3: // insert t_default
		w.next++
		args := []any{w.next}
		for _, c := range defaultCols {
			args = append(args, w.colVal(c))
		}
		b.Queue(`INSERT INTO t_default (id, n, s, b, j, jb, arr, ts, u, c, d, p, r, f, big) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)`, args...)
	case 4, 5, 6: // update some columns of t_default, usually leaving big untouched
		c := defaultCols[r.IntN(len(defaultCols))]
		b.Queue(fmt.Sprintf(`UPDATE t_default SET %s = $2 WHERE id = $1`, c), 1+r.IntN(w.next+1), w.colVal(c))
	case 7: // change a primary key
		b.Queue(`UPDATE t_default SET id = id + 100000 WHERE id = $1`, 1+r.IntN(w.next+1))
	case 8:
		b.Queue(`DELETE FROM t_default WHERE id = $1`, 1+r.IntN(w.next+1))
	case 9, 10: // t_index: replica identity using index
		b.Queue(`INSERT INTO t_index VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, r.IntN(50), strconv.Itoa(r.IntN(5)), w.val("s"), r.IntN(10))
	case 11:
		b.Queue(`UPDATE t_index SET v = $3, w = w + 1 WHERE a = $1 AND b = $2`, r.IntN(50), strconv.Itoa(r.IntN(5)), w.val("s"))
	case 12:
		// Change the identity of one row, when the new key is free.
		b.Queue(`UPDATE t_index SET b = b || 'x' WHERE ctid = (SELECT ctid FROM t_index t WHERE a = $1
			AND NOT EXISTS (SELECT 1 FROM t_index t2 WHERE t2.a = t.a AND t2.b = t.b || 'x') LIMIT 1)`, r.IntN(50))
	case 13:
		b.Queue(`DELETE FROM t_index WHERE a = $1 AND b = $2`, r.IntN(50), strconv.Itoa(r.IntN(5)))
	case 14: // t_full: duplicates on purpose, NULLs, TOAST
		big := any(nil)
		if r.IntN(4) == 0 {
			big = w.val("big")
		}
		b.Queue(`INSERT INTO t_full VALUES ($1, $2, $3, $4)`, r.IntN(10), w.val("s"), w.val("j"), big)
	case 15:
		b.Queue(`UPDATE t_full SET a = a + 1 WHERE ctid = (SELECT ctid FROM t_full WHERE a = $1 LIMIT 1)`, r.IntN(10))
	case 16:
		b.Queue(`DELETE FROM t_full WHERE ctid = (SELECT ctid FROM t_full WHERE b IS NOT DISTINCT FROM $1 LIMIT 1)`, w.val("s"))
	case 17:
		b.Queue(`INSERT INTO t_multi VALUES ($1, $2, $3) ON CONFLICT (k1, k2) DO UPDATE SET v = t_multi.v + 1`, r.IntN(30), strconv.Itoa(r.IntN(3)), r.IntN(100))
		b.Queue(`DELETE FROM t_multi WHERE k1 = $1`, r.IntN(30))
	case 18:
		b.Queue(`INSERT INTO t_gen (id, a) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET a = EXCLUDED.a`, r.IntN(100), r.IntN(1000))
	case 19:
		if r.IntN(15) == 0 {
			b.Queue([]string{`TRUNCATE t_multi`, `TRUNCATE t_gen, t_index RESTART IDENTITY`, `TRUNCATE t_full`}[r.IntN(3)])
		} else {
			b.Queue(`UPDATE t_gen SET a = a + 1 WHERE id = $1`, r.IntN(100))
		}
	}
}

func (w *randomWorkload) txn(ctx context.Context, c *pgx.Conn) error {
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	for i := 0; i < 1+w.r.IntN(25); i++ {
		w.op(b)
	}
	b.Queue("COMMIT")
	return c.SendBatch(ctx, b).Close()
}

func TestRandomizedWorkload(t *testing.T) {
	e := newEnv(t, randomSchema)
	// A target-only column keeps its default.
	e.exec(e.sub, `ALTER TABLE t_default ADD COLUMN extra text DEFAULT 'target only'`)
	ctx := context.Background()
	w := &randomWorkload{r: rand.New(rand.NewPCG(seed(t), 7))}
	// Some transactions while parapply is stopped (its slot keeps them), some
	// while it runs.
	if err := e.start(e.config("random")).stop(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 150; i++ {
		if err := w.txn(ctx, e.pub); err != nil {
			t.Fatal(err)
		}
	}
	r := e.start(e.config("random"))
	for i := 0; i < 350; i++ {
		if err := w.txn(ctx, e.pub); err != nil {
			t.Fatal(err)
		}
	}
	e.waitCaughtUp(r)
	e.verify(randomTables...)
	var extra int
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM t_default WHERE extra IS DISTINCT FROM 'target only'`).Scan(&extra); err != nil {
		t.Fatal(err)
	}
	if extra != 0 {
		t.Fatalf("%d rows lost the target-only column's default", extra)
	}
	st := r.s.Status()
	t.Logf("applied %d transactions, %d rows in %d statements", st.Txns, st.Rows, st.Statements)
	if st.Missing != 0 {
		t.Fatalf("%d updates or deletes found no row on the target", st.Missing)
	}
}

// TestSetBased checks that runs of changes become few statements and that
// order within a transaction is kept when a run revisits a key.
func TestSetBased(t *testing.T) {
	e := newEnv(t, `CREATE TABLE foo (id int PRIMARY KEY, value float8)`)
	r := e.start(e.config("setbased"))
	e.exec(e.pub, `BEGIN;
		INSERT INTO foo SELECT g, g FROM generate_series(1, 5000) g;
		UPDATE foo SET value = value * 2;
		UPDATE foo SET id = id + 10000 WHERE id <= 10;
		UPDATE foo SET id = id - 10000 + 20000 WHERE id > 10000;
		UPDATE foo SET value = -1 WHERE id = 20001;
		UPDATE foo SET value = -2 WHERE id = 20001;
		DELETE FROM foo WHERE id % 3 = 0;
		INSERT INTO foo SELECT g, 0 FROM generate_series(3, 300, 3) g;
		COMMIT`)
	e.waitCaughtUp(r)
	e.verify("public.foo")
	st := r.s.Status()
	if st.Rows != 5000+5000+10+10+2+1667+100 {
		t.Fatalf("applied %d row changes, want %d", st.Rows, 5000+5000+10+10+2+1667+100)
	}
	// 5000 inserts, 5000 updates, a few key changes, 1666 deletes, 100 inserts:
	// a handful of statements, not one per row.
	if st.Statements > 12 {
		t.Fatalf("%d statements for %d row changes: changes are not batched", st.Statements, st.Rows)
	}
	t.Logf("%d row changes in %d statements", st.Rows, st.Statements)
}

// TestEscapes sends a long insert run whose text holds backslashes, tabs,
// newlines, array and JSON quoting, NULLs and empty strings.
func TestEscapes(t *testing.T) {
	e := newEnv(t, `CREATE TABLE odd (id int PRIMARY KEY, t text, b bytea, a text[], j jsonb)`)
	r := e.start(e.config("copy"))
	e.exec(e.pub, `INSERT INTO odd
		SELECT g,
			CASE g % 7 WHEN 0 THEN NULL WHEN 1 THEN '' WHEN 2 THEN E'tab\there' WHEN 3 THEN E'line\nbreak\r'
				WHEN 4 THEN E'back\\slash \\N' WHEN 5 THEN '\N' ELSE 'plain ' || g END,
			CASE WHEN g % 5 = 0 THEN NULL ELSE decode(md5(g::text), 'hex') END,
			ARRAY[E'a\tb', NULL, '{x}', E'q"\\'],
			jsonb_build_object('s', E'x\ny\\z', 'n', g)
		FROM generate_series(1, 500) g`)
	e.waitCaughtUp(r)
	e.verify("public.odd")
	if st := r.s.Status(); st.Statements != 1 {
		t.Fatalf("500 inserts took %d statements, want one", st.Statements)
	}
}

// TestUniqueShift updates a unique column in an order that only works row
// by row: each row takes the value the previous update freed. A set-based
// statement that visits rows in another order would meet a transient
// duplicate; parapply must then replay the statement row by row.
func TestUniqueShift(t *testing.T) {
	e := newEnv(t, `CREATE TABLE slots (id int PRIMARY KEY, u int NOT NULL UNIQUE, v text)`)
	e.both(`INSERT INTO slots SELECT g, g, 'v' FROM generate_series(1, 3000) g`)
	// Steer the target's planner to a merge join, which visits rows in key
	// order (ascending, against the publisher's descending order): the
	// set-based statement then meets the duplicate.
	e.exec(e.sub, `ALTER DATABASE postgres SET enable_nestloop = off`)
	e.exec(e.sub, `ALTER DATABASE postgres SET enable_hashjoin = off`)
	r := e.start(e.config("shift"))
	e.exec(e.pub, `DO $$ BEGIN FOR i IN REVERSE 3000..1 LOOP UPDATE slots SET u = u + 1 WHERE id = i; END LOOP; END $$`)
	e.waitCaughtUp(r)
	e.verify("public.slots")
	if n := r.s.Status().Replays; n == 0 {
		t.Fatal("the set-based update never met the duplicate; the test no longer exercises the row-by-row replay")
	}
}

// TestInsertRuleKeepsInsert gives the target table an INSERT rule enabled
// for replicated changes: a long insert run, which would otherwise go by
// COPY (that ignores rules), must still fire it for every row.
func TestInsertRuleKeepsInsert(t *testing.T) {
	e := newEnv(t, `CREATE TABLE ruled (id int PRIMARY KEY, v text)`)
	e.exec(e.sub, `CREATE TABLE ruled_log (id int);
		CREATE RULE log_insert AS ON INSERT TO ruled DO ALSO INSERT INTO ruled_log VALUES (NEW.id);
		ALTER TABLE ruled ENABLE ALWAYS RULE log_insert`)
	r := e.start(e.config("ruled"))
	e.exec(e.pub, `INSERT INTO ruled SELECT g, 'v' || g FROM generate_series(1, 600) g`)
	e.waitCaughtUp(r)
	e.verify("public.ruled")
	var n int
	if err := e.sub.QueryRow(context.Background(), `SELECT count(*) FROM ruled_log`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 600 {
		t.Fatalf("the rule fired for %d of 600 inserted rows", n)
	}
}

// TestBinaryTypes: columns of bool, smallint, integer, bigint, real and
// double precision, the same type on both sides, travel in binary (see
// apply/textarray.go): their extremes, infinities, NaN, negative zero and
// NULLs arrive exact through inserts (few rows, and many, which go by
// COPY), updates by key and of the key, and deletes, under a key and
// under REPLICA IDENTITY FULL; a column whose type differs on the target
// (integer published, bigint and numeric there) goes as text as before.
func TestBinaryTypes(t *testing.T) {
	const cols = `b bool, s smallint, i int, l bigint, r real, d double precision`
	e := newEnv(t, `CREATE TABLE bt (id bigint PRIMARY KEY, `+cols+`);
		CREATE TABLE bt_full (id bigint, `+cols+`); ALTER TABLE bt_full REPLICA IDENTITY FULL;
		CREATE TABLE bt_other (id int PRIMARY KEY, v int)`)
	e.exec(e.sub, `ALTER TABLE bt_other ALTER id TYPE bigint, ALTER v TYPE numeric`)
	r := e.start(e.config("binary"))
	const values = `(1, true, -32768, -2147483648, -9223372036854775808, 'Infinity', 'NaN'),
		(2, false, 32767, 2147483647, 9223372036854775807, '-Infinity', '-0'),
		(3, NULL, NULL, NULL, NULL, NULL, NULL),
		(4, true, 0, 0, 0, '-0', 1.7976931348623157e308),
		(5, false, 1, 1, 1, 3.4028235e38, 5e-324),
		(6, true, -1, -1, -1, 1e-45, 'Infinity'),
		(7, false, 2, 2, 2, 0.1, 0.1)`
	for _, tab := range []string{"bt", "bt_full"} {
		e.exec(e.pub, `INSERT INTO `+tab+` VALUES `+values)
		e.exec(e.pub, `INSERT INTO `+tab+` SELECT g + 100, g % 2 = 0, g % 32767, g * 1000, g::bigint * 4000000000, g / 3.0, g / 7.0 FROM generate_series(1, 2000) g`)
		e.exec(e.pub, `BEGIN;
			UPDATE `+tab+` SET r = 'NaN', d = '-Infinity', b = NOT b WHERE id < 3;
			UPDATE `+tab+` SET s = NULL, i = -i, l = -l WHERE id BETWEEN 4 AND 6;
			UPDATE `+tab+` SET d = d * 3, r = -r WHERE id > 100;
			DELETE FROM `+tab+` WHERE id % 5 = 0;
			COMMIT`)
	}
	e.exec(e.pub, `UPDATE bt SET id = id + 10000 WHERE id BETWEEN 1 AND 3`)
	e.exec(e.pub, `INSERT INTO bt_other SELECT g, g * 3 FROM generate_series(1, 50) g; UPDATE bt_other SET v = -v WHERE id % 2 = 0; DELETE FROM bt_other WHERE id % 7 = 0`)
	e.waitCaughtUp(r)
	e.verify("public.bt", "public.bt_full", "public.bt_other")
	// The text forms compared above hold every bit of these values; a
	// few signs and non-numbers, spelled out:
	var got string
	if err := e.sub.QueryRow(context.Background(), `SELECT string_agg(concat_ws('/', id, b, r, d), ' ' ORDER BY id) FROM bt WHERE id IN (4, 10001, 10002)`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if want := "4/t/-0/1.7976931348623157e+308 10001/f/NaN/-Infinity 10002/t/NaN/-Infinity"; got != want {
		t.Errorf("target rows %q, want %q", got, want)
	}
}
