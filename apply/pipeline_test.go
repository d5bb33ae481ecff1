package apply

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/internal/pgtest"
)

// TestPipeline sends round trips through the applier's pipeline on a real
// server: rawArray parameters as they are, other parameters through pgx,
// rows scanned, a failure that leaves the session usable, and prepared
// statements bounded by maxPrepared.
func TestPipeline(t *testing.T) {
	ctx, srv := pgtest.ForTest(t, "apply-pipeline", 2*time.Minute)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	a := newApplier(Config{}, conn)
	if _, err := conn.Exec(ctx, "CREATE TABLE t (k int PRIMARY KEY, v text, f float8)"); err != nil {
		t.Fatal(err)
	}
	desc := txns{last: Txn{XID: 7}, n: 1}

	ins := "INSERT INTO t SELECT u.k::int, u.v, u.f FROM unnest($1::text[], $2::text[], $3::float8[]) AS u(k, v, f)"
	ft := &Table{elem: []uint32{0, 0, 701}}
	floats, err := ft.encodeParam(nil, 2, [][]byte{[]byte("1.5"), nil, []byte("-2")})
	if err != nil {
		t.Fatal(err)
	}
	one, err := ft.encodeParam(nil, 2, [][]byte{[]byte("0")})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	var vals []*string
	ops := []op{
		{sql: ins, rows: 3, args: []any{
			encodeTextArray([][]byte{[]byte("1"), []byte("2"), []byte("3")}),
			encodeTextArray([][]byte{[]byte("a"), nil, []byte("c'\\")}),
			floats,
		}},
		{sql: "UPDATE t SET v = $1 WHERE k = $2", rows: 1, args: []any{"b", int64(2)}},
		{sql: "SELECT count(*), array_agg(v ORDER BY k) FROM t WHERE f IS NOT NULL OR k = 2", rows: -1, scan: []any{&n, &vals}},
	}
	if err := a.sender.pipeline(ctx, ops, desc); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vals {
		if v == nil {
			got = append(got, "NULL")
		} else {
			got = append(got, *v)
		}
	}
	if n != 3 || !slices.Equal(got, []string{"a", "b", "c'\\"}) {
		t.Fatalf("scanned %d, %q; want 3, [a b c'\\]", n, got)
	}
	if a.Stats.Missing.Load() != 0 {
		t.Fatalf("%d rows counted missing; the statements changed all they were expected to", a.Stats.Missing.Load())
	}

	// A failure names the transaction and keeps the server's error; the
	// statements after it in the round trip do not run, and the session
	// takes the next round trip.
	err = a.sender.pipeline(ctx, []op{
		{sql: ins, rows: 1, what: "insert of t", args: []any{encodeTextArray([][]byte{[]byte("1")}), encodeTextArray([][]byte{[]byte("dup")}), one}},
		{sql: "UPDATE t SET v = 'after' WHERE k = 3", rows: 1},
	}, desc)
	var pe *pgconn.PgError
	var te *TxnError
	if !errors.As(err, &pe) || pe.Code != "23505" || !errors.As(err, &te) || te.Txn.XID != 7 {
		t.Fatalf("duplicate key: got %v, want a TxnError of transaction 7 wrapping SQLSTATE 23505", err)
	}
	var v string
	if err := conn.QueryRow(ctx, "SELECT v FROM t WHERE k = 3").Scan(&v); err != nil || v != "c'\\" {
		t.Fatalf("after the failed round trip: %q, %v; want the row unchanged", v, err)
	}

	// Round trips of more than 1 kB are written into the applier's wire
	// buffer (see reserve), which the next reuses or grows: every value
	// arrives whole, between small round trips the frontend writes into
	// its own buffer.
	for i, size := range []int{3000, 200, 50000, 10, 700, 120000, 5000} {
		keys, texts := make([][]byte, 4), make([][]byte, 4)
		for j := range keys {
			keys[j] = fmt.Appendf(nil, "%d", 100+10*i+j)
			texts[j] = fmt.Appendf(nil, "%d:%s", j, strings.Repeat(string(rune('a'+i)), size))
		}
		fs, err := ft.encodeParam(nil, 2, [][]byte{[]byte("1"), []byte("2"), []byte("3"), []byte("4")})
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		if err := a.sender.pipeline(ctx, []op{
			{sql: ins, rows: 4, args: []any{encodeTextArray(keys), encodeTextArray(texts), fs}},
			{sql: "SELECT sum(length(v)) FROM t WHERE k BETWEEN $1 AND $1 + 3", rows: -1, args: []any{int64(100 + 10*i)}, scan: []any{&sum}},
		}, desc); err != nil {
			t.Fatalf("round trip of %d-byte values: %v", size, err)
		}
		var bad int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM t WHERE k BETWEEN $1 AND $1 + 3 AND v <> (k - $1) || ':' || repeat($2, $3)", 100+10*i, string(rune('a'+i)), size).Scan(&bad); err != nil {
			t.Fatal(err)
		}
		if want := int64(4 * (size + 2)); sum != want || bad != 0 {
			t.Fatalf("round trip of %d-byte values: %d bytes read back, %d rows differ; want %d, 0", size, sum, bad, want)
		}
	}

	// Past maxPrepared statements, the session's are deallocated and
	// prepared again as they come.
	defer func(m int) { maxPrepared = m }(maxPrepared)
	maxPrepared = 4
	for i := range 10 {
		var s string
		sql := fmt.Sprintf("SELECT array_to_string($1::text[], ',') || '%d'", i%6)
		if err := a.sender.pipeline(ctx, []op{{sql: sql, rows: -1, args: []any{encodeTextArray([][]byte{[]byte("x"), []byte("y")})}, scan: []any{&s}}}, desc); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("x,y%d", i%6); s != want {
			t.Fatalf("statement %d returned %q, want %q", i, s, want)
		}
		var prepared int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE left(name, 5) = 'stmt_'").Scan(&prepared); err != nil {
			t.Fatal(err)
		}
		if len(a.sender.stmts) > maxPrepared || prepared > maxPrepared {
			t.Fatalf("after statement %d: %d kept, %d prepared on the server; at most %d", i, len(a.sender.stmts), prepared, maxPrepared)
		}
	}
}
