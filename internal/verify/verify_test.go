package verify

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/internal/pgtest"
)

// TestCompare checks both comparisons on equal tables, then after a changed
// value, a missing row and an extra row on the target.
func TestCompare(t *testing.T) {
	ctx := context.Background()
	p, err := pgtest.StartPair(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	var conns []*pgx.Conn
	for _, s := range []*pgtest.Server{p.Publisher, p.Subscriber} {
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		// Same rows, different column order and physical order.
		if s == p.Publisher {
			_, err = c.Exec(ctx, `CREATE TABLE t (id int, v text, n numeric); INSERT INTO t SELECT g, 'v' || g, g / 3.0 FROM generate_series(1, 100) g`)
		} else {
			_, err = c.Exec(ctx, `CREATE TABLE t (n numeric, id int, v text); INSERT INTO t SELECT g / 3.0, g, 'v' || g FROM generate_series(100, 1, -1) g`)
		}
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	src, dst := conns[0], conns[1]
	if _, err := Tables(ctx, src, dst, "public.t"); err != nil {
		t.Fatalf("equal tables reported different: %v", err)
	}
	if err := Checksums(ctx, src, dst, "public.t"); err != nil {
		t.Fatalf("equal tables have different checksums: %v", err)
	}
	for _, c := range []struct{ name, corrupt, undo, want string }{
		{"changed value", `UPDATE t SET v = 'x' WHERE id = 5`, `UPDATE t SET v = 'v5' WHERE id = 5`, "not on the target"},
		{"missing row", `DELETE FROM t WHERE id = 100`, `INSERT INTO t VALUES (100 / 3.0, 100, 'v100')`, "not on the target"},
		{"extra row", `INSERT INTO t VALUES (1, 1000, 'extra')`, `DELETE FROM t WHERE id = 1000`, "not on the source"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := dst.Exec(ctx, c.corrupt); err != nil {
				t.Fatal(err)
			}
			defer func() { _, _ = dst.Exec(ctx, c.undo) }()
			_, err := Tables(ctx, src, dst, "public.t")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("row comparison: got %v, want an error saying %q", err, c.want)
			}
			if err := Checksums(ctx, src, dst, "public.t"); err == nil || !strings.Contains(err.Error(), "public.t differs") {
				t.Fatalf("checksum comparison: got %v", err)
			}
		})
	}
}
