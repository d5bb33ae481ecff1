package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/ddl"
	"github.com/parapply/parapply/subscriber"
)

const liveSchema = `
CREATE TYPE order_status AS ENUM ('new', 'paid');
CREATE TABLE orders (id bigint PRIMARY KEY, status order_status NOT NULL DEFAULT 'new', amount int NOT NULL);
CREATE TABLE extra (id int PRIMARY KEY, v text);
CREATE TABLE fresh (id int PRIMARY KEY, v text);`

// TestLiveChanges changes what is published while parapply runs under a
// 4-client load, as a DBA does, with ddl = off and ddl = apply, at workers
// 0 and 4, values in binary (unless PARAPPLY_TEST_BINARY=off) and in text:
// a table with rows added to a FOR TABLE publication, a table created in a
// FOR TABLES IN SCHEMA schema (on the target too, or by ddl = apply), one
// the target lacks at first (skipped with a warning, copied once the target
// has it), CREATE TABLE AS and SELECT INTO (ddl = apply: the target never
// runs the query), and an enum's new label used at once. parapply never
// stops, and every table ends equal to the publisher's.
func TestLiveChanges(t *testing.T) {
	for _, c := range []struct {
		ddl     bool
		workers int
		binary  string // "" as the suite runs (PARAPPLY_TEST_BINARY)
	}{{true, 0, ""}, {true, 4, ""}, {false, 0, "off"}, {false, 4, "on"}} {
		t.Run(fmt.Sprintf("ddl=%v/workers=%d/binary=%s", c.ddl, c.workers, c.binary), func(t *testing.T) {
			e := newEnv(t, "")
			ctx := context.Background()
			e.exec(e.pub, "CREATE SCHEMA shop")
			e.exec(e.sub, "CREATE SCHEMA shop")
			e.both(liveSchema)
			e.exec(e.pub, `INSERT INTO orders SELECT g, 'new', g FROM generate_series(1, 500) g;
				INSERT INTO extra SELECT g, 'x' || g FROM generate_series(1, 300) g;
				CREATE PUBLICATION pub FOR TABLE orders, fresh, TABLES IN SCHEMA shop`)
			if c.ddl {
				// As docs/operations.md has it for ddl = apply: the
				// apply role owns the published tables and their
				// types, and may create in their schemas.
				e.applyOwnsTables()
				e.exec(e.sub, `GRANT CREATE ON SCHEMA shop TO `+applyRole+`; ALTER TYPE order_status OWNER TO `+applyRole)
				if err := ddl.Install(ctx, e.pub, []string{"pub"}, true); err != nil {
					t.Fatal(err)
				}
			}
			cfg := e.config(fmt.Sprintf("live%d", c.workers))
			cfg.Workers, cfg.AutoWorkers, cfg.CopyData = c.workers, false, true
			cfg.PublicationRefresh = 500 * time.Millisecond
			if c.ddl {
				cfg.DDL = subscriber.DDLApply
			}
			if c.binary != "" {
				cfg.Binary = c.binary == "on"
			}
			r := e.start(cfg)

			stop := clientLoad(t, e.pair.Publisher.DSN("postgres"), 4, seed(t), liveLoad)
			defer stop()
			step := func(sql string) {
				t.Helper()
				if _, err := e.pub.Exec(ctx, sql); err != nil {
					stop()
					t.Fatalf("%s: %v", sql, err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			// A table with rows joins a FOR TABLE publication: copied
			// online, then its changes applied.
			step(`ALTER PUBLICATION pub ADD TABLE extra`)
			step(`UPDATE extra SET v = 'changed' WHERE id % 10 = 0; INSERT INTO extra VALUES (1000, 'new')`)
			// A table created in the published schema.
			if !c.ddl {
				e.exec(e.sub, `CREATE TABLE shop.made (id int PRIMARY KEY, v text)`)
			}
			step(`CREATE TABLE shop.made (id int PRIMARY KEY, v text)`)
			step(`INSERT INTO shop.made SELECT g, 'm' || g FROM generate_series(1, 100) g`)
			step(`UPDATE shop.made SET v = 'again' WHERE id <= 10`)
			// With ddl = off, one the target lacks at first: skipped,
			// then copied once the target has it.
			if !c.ddl {
				step(`CREATE TABLE shop.lacking (id int PRIMARY KEY, v text); INSERT INTO shop.lacking SELECT g, 'l' || g FROM generate_series(1, 50) g`)
				time.Sleep(300 * time.Millisecond)
				e.exec(e.sub, `CREATE TABLE shop.lacking (id int PRIMARY KEY, v text)`)
				step(`UPDATE shop.lacking SET v = 'seen' WHERE id <= 5`)
			}
			// An enum's new label, used at once (ddl = off: the DBA adds
			// it on the target first).
			if !c.ddl {
				e.exec(e.sub, `ALTER TYPE order_status ADD VALUE 'refunded'`)
			}
			step(`ALTER TYPE order_status ADD VALUE 'refunded'`)
			step(`UPDATE orders SET status = 'refunded' WHERE id % 5 = 0`)
			if c.ddl {
				step(`CREATE TABLE shop.snap AS SELECT id, amount, status FROM orders WHERE id % 3 = 0`)
				step(`SELECT id, amount * 2 AS doubled INTO shop.snap2 FROM orders WHERE id % 7 = 0`)
				step(`INSERT INTO shop.snap SELECT id, amount, status FROM orders WHERE id BETWEEN 2000 AND 3000`)
				step(`BEGIN; CREATE TABLE shop.snap3 (LIKE orders); INSERT INTO shop.snap3 SELECT * FROM orders WHERE id <= 20; COMMIT`)
			}
			time.Sleep(300 * time.Millisecond)
			stop()
			e.waitCaughtUp(r)
			tables := []string{"public.orders", "public.extra", "shop.made"}
			if c.ddl {
				tables = append(tables, "shop.snap", "shop.snap2", "shop.snap3")
			} else {
				tables = append(tables, "shop.lacking")
			}
			e.verify(tables...)
			if c.ddl {
				pubSchema, subSchema := ddlSchemaOf(t, e.pub), ddlSchemaOf(t, e.sub)
				if pubSchema != subSchema {
					t.Fatalf("the target's schema differs from the publisher's:\npublisher:\n%s\ntarget:\n%s", pubSchema, subSchema)
				}
			}
			var refunded int
			if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM orders WHERE status = 'refunded'`).Scan(&refunded); err != nil || refunded == 0 {
				t.Fatalf("no order refunded on the target (%v)", err)
			}
		})
	}
}

// liveLoad is one step of a client of TestLiveChanges' load: a new order,
// or an update of an existing one.
func liveLoad(ctx context.Context, c *pgx.Conn, rng *rand.Rand) error {
	var err error
	if rng.IntN(3) == 0 {
		_, err = c.Exec(ctx, `INSERT INTO orders (id, amount) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET amount = orders.amount + 1`, 2000+rng.Int64N(100000), rng.IntN(1000))
	} else {
		_, err = c.Exec(ctx, `UPDATE orders SET amount = amount + $1, status = CASE WHEN status = 'new' THEN 'paid'::order_status ELSE status END WHERE id = $2`, rng.IntN(10), rng.Int64N(500)+1)
	}
	return err
}
