package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/ddl"
)

// TestDDLRoles: ddl = apply with the least-privilege roles of
// docs/operations.md. parapply ddl install prints the replication role's
// grants; parapply check as the roles fails on the target's ownership and
// CREATE with the exact fixes, which as printed (the ALTER TABLE ... OWNER
// for one table, the GRANT of its owning role for the other) make it
// pass, and parapply run refuses them as check does; so do the
// documented ddl = apply blocks with ddl install --grant-to. Then a run as
// those roles under a write load while the publisher adds a column (to a
// plain and to a partitioned table), creates a table and an index: the
// target ends with the publisher's schema and rows, and a check after it
// still passes.
func TestDDLRoles(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	pub, sub := operationsDatabases(t, e)
	// A partitioned table too: its partition is published (not its root),
	// and an ALTER TABLE of the root needs the owner of both.
	for _, c := range []*pgx.Conn{pub, sub} {
		e.exec(c, `CREATE TABLE shop.readings (id int, at date, v int, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
			CREATE TABLE shop.readings_2026 PARTITION OF shop.readings FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')`)
	}
	e.exec(pub, `INSERT INTO shop.readings SELECT g, date '2026-01-01' + g, g FROM generate_series(1, 100) g`)
	e.exec(pub, operationsSQL(t, "publisher"))
	e.exec(sub, operationsSQL(t, "target"))
	// shop.notes belongs to a role that is not a superuser on the target:
	// its fix may be the GRANT of that role.
	e.exec(sub, `CREATE ROLE app_owner; ALTER TABLE shop.notes OWNER TO app_owner`)

	superSrc := e.pair.Publisher.DSN("app")
	src := strings.Replace(superSrc, "user=postgres", "user=repl", 1)
	dst := strings.Replace(e.pair.Subscriber.DSN("app"), "user=postgres", "user=apply", 1)
	args := []string{"--source", src, "--target", dst, "--publication", "app_pub", "--slot", "ddlroles", "--ddl", "apply"}

	// The install, without --grant-to, prints the replication role's
	// grants.
	out, err := runOnce(t, "ddl", "install", "--source", superSrc, "--publication", "app_pub")
	if err != nil {
		t.Fatalf("parapply ddl install: %v\n%s", err, out)
	}
	for _, g := range ddl.Grants("repl") {
		if !strings.Contains(out, "\n  "+g+"\n") {
			t.Errorf("parapply ddl install does not print %q:\n%s", g, out)
		}
	}
	out, err = runOnce(t, "ddl", "status", "--source", src)
	if err != nil || !strings.Contains(out, "role repl may not read which publications") || !strings.Contains(out, ddl.Grants("repl")[0]) {
		t.Errorf("parapply ddl status as repl, before the grants: %v\n%s", err, out)
	}

	// parapply check as the roles: the publisher's capture unreadable (a
	// warning), the target's ownership and CREATE failed, each with its
	// fix.
	rep, code, out := runCheck(t, args...)
	if code != 3 {
		t.Fatalf("parapply check: exit status %d, want 3 (checks failed):\n%s", code, out)
	}
	wantFixes := map[string][]string{
		"publisher DDL capture": {strings.Join(ddl.Grants("repl"), " ")},
		"target owner of published tables (ddl = apply)": {
			"shop.notes: ALTER TABLE shop.notes OWNER TO apply; (or make apply a member of its owner: GRANT app_owner TO apply;)",
			"shop.orders: ALTER TABLE shop.orders OWNER TO apply;",
			"shop.readings: ALTER TABLE shop.readings OWNER TO apply;",
			"shop.readings_2026: ALTER TABLE shop.readings_2026 OWNER TO apply;",
		},
		"target CREATE on published schemas (ddl = apply)": {"shop: GRANT CREATE ON SCHEMA shop TO apply;"},
	}
	wantStatus := map[string]string{"publisher DDL capture": "warning", "target owner of published tables (ddl = apply)": "failed", "target CREATE on published schemas (ddl = apply)": "failed"}
	for _, r := range rep.Results {
		key := r.Side + " " + r.Check
		want, ok := wantFixes[key]
		if !ok {
			continue
		}
		delete(wantFixes, key)
		if r.Status != wantStatus[key] {
			t.Errorf("%s: %s, want %s: %+v", key, r.Status, wantStatus[key], r.Problems)
		}
		var got []string
		for _, p := range r.Problems {
			if r.Side == "publisher" {
				if strings.Contains(p.What, "pg_logical_emit_message") {
					continue // PUBLIC may write messages: advice, no privilege
				}
				got = append(got, p.Fix)
				continue
			}
			got = append(got, p.Object+": "+p.Fix)
		}
		slices.Sort(got)
		if r.Side == "publisher" {
			if len(got) != 1 || !strings.HasPrefix(got[0], want[0]) || !strings.Contains(got[0], "--grant-to repl") {
				t.Errorf("%s: fixes %q, want %q and --grant-to repl", key, got, want)
			}
			continue
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: fixes\n%q\nwant\n%q", key, got, want)
		}
	}
	for key := range wantFixes {
		t.Errorf("no check %s in the report:\n%s", key, out)
	}
	if t.Failed() {
		t.FailNow()
	}
	// parapply run refuses the same roles before it creates anything,
	// naming the fixes.
	runOut, err := runOnce(t, append([]string{"run"}, args...)...)
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 3 ||
		!strings.Contains(runOut, "ALTER TABLE shop.orders OWNER TO apply;") || !strings.Contains(runOut, "GRANT CREATE ON SCHEMA shop TO apply;") {
		t.Fatalf("parapply run as the roles without the ddl = apply fixes: %v, want exit status 3 naming the fixes:\n%s", err, runOut)
	}

	// The fixes as printed, as the superuser: for shop.notes the GRANT of
	// its owning role, for the rest the change of owner.
	grantOwner := regexp.MustCompile(`GRANT \S+ TO \S+;`)
	for _, r := range rep.Results {
		conn := map[string]*pgx.Conn{"publisher": pub, "target": sub}[r.Side]
		for _, p := range r.Problems {
			if strings.Contains(p.What, "pg_logical_emit_message") || p.Fix == "" {
				continue
			}
			if g := grantOwner.FindString(p.Fix); g != "" && p.Object == "shop.notes" {
				e.exec(conn, g)
				continue
			}
			for _, stmt := range strings.SplitAfter(p.Fix, ";") {
				if stmt = strings.TrimSpace(stmt); strings.HasPrefix(stmt, "GRANT") || strings.HasPrefix(stmt, "ALTER TABLE") {
					e.exec(conn, stmt)
				}
			}
		}
	}
	ddlRolesCheckPasses(t, "after the printed fixes", args)

	// Undone, then the documented blocks with ddl install --grant-to.
	e.exec(pub, `REVOKE USAGE ON SCHEMA parapply FROM repl; REVOKE EXECUTE ON FUNCTION parapply.ddl_followed() FROM repl`)
	e.exec(sub, `REVOKE app_owner FROM apply; REVOKE CREATE ON SCHEMA shop FROM apply; ALTER TABLE shop.orders OWNER TO postgres;
		ALTER TABLE shop.readings OWNER TO postgres; ALTER TABLE shop.readings_2026 OWNER TO postgres`)
	e.exec(sub, `GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA shop TO apply; GRANT SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA shop TO apply`)
	if _, code, out := runCheck(t, args...); code != 3 || !strings.Contains(out, "ALTER TABLE shop.orders OWNER TO apply;") {
		t.Fatalf("parapply check after the fixes were undone: exit status %d, want 3 and the fix again:\n%s", code, out)
	}
	out, err = runOnce(t, "ddl", "install", "--source", superSrc, "--publication", "app_pub", "--grant-to", "repl")
	if err != nil || !strings.Contains(out, "role repl may read the capture") {
		t.Fatalf("parapply ddl install --grant-to repl: %v\n%s", err, out)
	}
	pubBlock := operationsSQL(t, "publisher, ddl = apply")
	for _, g := range ddl.Grants("repl") {
		if !strings.Contains(pubBlock, "\n"+g+" ") {
			t.Errorf("docs/operations.md's publisher block for ddl = apply lacks %q, which --grant-to repl runs:\n%s", g, pubBlock)
		}
	}
	e.exec(pub, pubBlock)
	e.exec(sub, operationsSQL(t, "target, ddl = apply"))
	ddlRolesCheckPasses(t, "with the documented blocks", args)

	// The run, as the roles, under a write load while the publisher's
	// schema changes.
	p := startProcess(t, append([]string{"run", "--workers", strconv.Itoa(testWorkers())}, args...)...)
	waitSlotActive(t, e.pub, "ddlroles", p)
	stop := clientLoad(t, superSrc, 2, seed(t), ddlRolesLoad)
	defer stop()
	for i, step := range []string{
		`ALTER TABLE shop.orders ADD COLUMN status text DEFAULT 'new'`,
		`BEGIN; CREATE TABLE shop.refunds (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, order_id bigint NOT NULL, amount numeric(12,2));
		 INSERT INTO shop.refunds (order_id, amount) SELECT id, total / 2 FROM shop.orders WHERE id <= 20; COMMIT`,
		`CREATE INDEX orders_customer_idx ON shop.orders (customer)`,
		`UPDATE shop.orders SET status = 'paid' WHERE id % 3 = 0`,
		`INSERT INTO shop.refunds (order_id, amount) VALUES (21, 1.5), (22, 2.5)`,
		`ALTER TABLE shop.readings ADD COLUMN note text`,
		`INSERT INTO shop.readings SELECT g, date '2026-01-01' + g, -g, 'n' || g FROM generate_series(101, 120) g`,
	} {
		if _, err := pub.Exec(ctx, step); err != nil {
			stop()
			t.Fatalf("schema change %d: %v", i+1, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	stop()
	e.waitSlotConfirmed("ddlroles", waitCaughtUpFor, p.alive)
	p.signal(syscall.SIGTERM)

	if a, b := ddlSchemaIn(t, pub, "shop"), ddlSchemaIn(t, sub, "shop"); a != b {
		t.Fatalf("the target's schema differs from the publisher's:\npublisher:\n%s\ntarget:\n%s", a, b)
	}
	ev := &env{t: t, pub: pub, sub: sub}
	ev.verify("shop.orders", "shop.notes", "shop.refunds", "shop.readings_2026")
	// The table the run created is the apply role's and readable by the
	// replication role: a check (as before a restart) still passes.
	ddlRolesCheckPasses(t, "after the run", args)
}

// ddlRolesCheckPasses runs parapply check with args and fails the test
// unless every check passes, but for the warnings no role grant removes
// (a standby's, a server setting's, and PUBLIC's pg_logical_emit_message).
func ddlRolesCheckPasses(t *testing.T, when string, args []string) {
	t.Helper()
	rep, code, out := runCheck(t, args...)
	if code != 0 {
		t.Fatalf("parapply check %s: exit status %d:\n%s", when, code, out)
	}
	for _, r := range rep.Results {
		if r.Status == "ok" || r.Check == "track_commit_timestamp" || r.Check == "failover slot" {
			continue
		}
		for _, p := range r.Problems {
			if !(r.Check == "DDL capture" && strings.Contains(p.What, "pg_logical_emit_message")) {
				t.Errorf("parapply check %s: %s %s: %s: %s (fix: %s)", when, r.Side, r.Check, r.Status, p.What, p.Fix)
			}
		}
	}
}

// ddlRolesLoad is one step of a client of TestDDLRoles' load: an insert
// or an update of orders, of the columns no schema change touches.
func ddlRolesLoad(ctx context.Context, c *pgx.Conn, rng *rand.Rand) error {
	var err error
	if rng.IntN(2) == 0 {
		_, err = c.Exec(ctx, `INSERT INTO shop.orders (customer, total) VALUES ($1, $2)`, rng.IntN(50), fmt.Sprintf("%d.%02d", rng.IntN(1000), rng.IntN(100)))
	} else {
		_, err = c.Exec(ctx, `UPDATE shop.orders SET total = total + 1 WHERE id = $1`, rng.Int64N(500)+1)
	}
	return err
}
