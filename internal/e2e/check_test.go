package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
)

// checkReport is parapply check --json's report, as far as the tests read
// it.
type checkReport struct {
	Results []struct {
		Side     string `json:"side"`
		Check    string `json:"check"`
		Detail   string `json:"detail"`
		Status   string `json:"status"`
		Problems []struct {
			Object string `json:"object"`
			What   string `json:"what"`
			Fix    string `json:"fix"`
			Fails  bool   `json:"fails"`
		} `json:"problems"`
	} `json:"results"`
}

// runCheck runs parapply check --json and returns its report, exit status
// and output.
func runCheck(t *testing.T, args ...string) (checkReport, int, string) {
	t.Helper()
	out, err := runOnce(t, append([]string{"check", "--json"}, args...)...)
	code := 0
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("parapply check: %v\n%s", err, out)
	}
	var rep checkReport
	// The report is the JSON object on standard output; the error line
	// follows it.
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&rep); err != nil {
		t.Fatalf("parapply check --json printed no report (%v):\n%s", err, out)
	}
	return rep, code, out
}

// TestCheck: parapply check, against roles that lack what a run needs and
// a target whose columns cannot hold the publisher's values, names every
// missing privilege and setting with its fix; the fixes it prints, run as
// they are, make every check pass; and parapply run refuses the same
// setup before it creates anything.
func TestCheck(t *testing.T) {
	e := newEnv(t, "")
	ctx := context.Background()
	e.both(`CREATE TYPE mood AS ENUM ('sad', 'ok')`)
	e.exec(e.pub, `ALTER TYPE mood ADD VALUE 'happy'`)
	e.exec(e.pub, `CREATE TABLE items (id int PRIMARY KEY, name varchar(50), m mood, price numeric(10,2));
		CREATE TABLE audit_log (id bigserial PRIMARY KEY, note text);
		CREATE TABLE nokey (v text);
		CREATE TABLE keyless (a int NOT NULL, b int, v text); CREATE UNIQUE INDEX keyless_b ON keyless (b); CREATE UNIQUE INDEX keyless_a ON keyless (a);
		CREATE PUBLICATION pub_check FOR TABLE items, audit_log, nokey, keyless`)
	e.exec(e.sub, `CREATE TABLE items (id int PRIMARY KEY, name varchar(3), m mood, price numeric(12,2), added int NOT NULL);
		CREATE TABLE audit_log (id bigserial PRIMARY KEY, note text);
		CREATE TABLE nokey (v text);
		CREATE TABLE keyless (a int NOT NULL, b int, v text)`)
	// Roles as a DBA would first make them: replication on the
	// publisher, table writes on the target.
	e.exec(e.pub, `CREATE ROLE repl LOGIN REPLICATION; GRANT SELECT ON items, nokey, keyless TO repl`)
	e.exec(e.sub, `CREATE ROLE applier LOGIN; GRANT INSERT, UPDATE, DELETE, TRUNCATE ON items, audit_log, nokey, keyless TO applier`)
	src := strings.Replace(e.pair.Publisher.DSN("postgres"), "user=postgres", "user=repl", 1)
	dst := strings.Replace(e.pair.Subscriber.DSN("postgres"), "user=postgres", "user=applier", 1)
	args := []string{"--source", src, "--target", dst, "--publication", "pub_check", "--slot", "checked"}

	rep, code, out := runCheck(t, args...)
	if code != 3 {
		t.Fatalf("parapply check: exit status %d, want 3 (checks failed):\n%s", code, out)
	}
	type want struct{ side, check, status, fragment string }
	for _, w := range []want{
		{"publisher", "published tables readable by the role", "failed", "public.audit_log"},
		// The exact statements, names filled in: for the tables and
		// sequences created later too.
		{"publisher", "published tables readable by the role", "failed", "GRANT SELECT ON public.audit_log TO repl; ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT SELECT ON TABLES TO repl;"},
		{"publisher", "sequences", "warning", `GRANT SELECT ON SEQUENCE "public"."audit_log_id_seq" TO repl; ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT SELECT ON SEQUENCES TO repl;`},
		{"publisher", "replica identity of published tables", "warning", "public.keyless: no replica identity: the publisher refuses UPDATE and DELETE of its rows (fix: ALTER TABLE public.keyless REPLICA IDENTITY USING INDEX keyless_a;"},
		{"publisher", "replica identity of published tables", "warning", "public.nokey: no replica identity: the publisher refuses UPDATE and DELETE of its rows (fix: add a primary key (ALTER TABLE public.nokey ADD PRIMARY KEY (...);), or ALTER TABLE public.nokey REPLICA IDENTITY FULL; on the publisher)"},
		{"target", "published columns and types", "failed", "(fix: ALTER TYPE mood ADD VALUE 'happy';)"},
		{"target", "sequences", "warning", `GRANT SELECT, UPDATE ON SEQUENCE "public"."audit_log_id_seq" TO applier; ALTER DEFAULT PRIVILEGES FOR ROLE postgres IN SCHEMA public GRANT SELECT, UPDATE ON SEQUENCES TO applier;`},
		{"publisher", "pg_read_all_stats (optional)", "warning", "GRANT pg_read_all_stats TO repl"},
		{"publisher", "replica identity of published tables", "warning", "public.nokey"},
		{"publisher", "sequences", "warning", "audit_log_id_seq"},
		{"target", "session_replication_role", "failed", "GRANT SET ON PARAMETER session_replication_role TO applier"},
		{"target", "replication origin functions", "failed", "pg_replication_origin_session_setup"},
		{"target", "schema parapply", "failed", "GRANT CREATE ON DATABASE"},
		{"target", "published tables", "failed", "GRANT SELECT ON"},
		{"target", "published columns and types", "failed", `the target's character varying(3) is shorter than the publisher's character varying(50)`},
		{"target", "published columns and types", "failed", `lacks the publisher's labels 'happy'`},
		{"target", "published columns and types", "failed", "column added is NOT NULL without a default"},
		{"target", "sequences", "warning", "GRANT SELECT, UPDATE ON SEQUENCE"},
	} {
		found := false
		for _, r := range rep.Results {
			if r.Side != w.side || r.Check != w.check {
				continue
			}
			found = true
			if r.Status != w.status {
				t.Errorf("%s %s: status %s, want %s", w.side, w.check, r.Status, w.status)
			}
			var text strings.Builder
			for _, p := range r.Problems {
				text.WriteString(p.Object + ": " + p.What + " (fix: " + p.Fix + ")\n")
			}
			if !strings.Contains(text.String(), w.fragment) {
				t.Errorf("%s %s: problems\n%s lack %q", w.side, w.check, text.String(), w.fragment)
			}
		}
		if !found {
			t.Errorf("no check %s %s in the report:\n%s", w.side, w.check, out)
		}
	}
	for _, r := range rep.Results {
		if r.Side == "target" && r.Check == "published columns and types" {
			if r.Detail != "can every publisher value be stored: no" {
				t.Errorf("the column check failed with the detail %q", r.Detail)
			}
			for _, p := range r.Problems {
				if strings.Contains(p.What, `column "price"`) {
					t.Errorf("numeric(10,2) into numeric(12,2) reported: %s", p.What)
				}
			}
		}
	}

	// parapply run refuses the same setup before creating anything, and
	// its last line names each problem.
	runOut, err := runOnce(t, append([]string{"run"}, args...)...)
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 3 {
		t.Fatalf("parapply run: %v, want exit status 3:\n%s", err, runOut)
	}
	lines := strings.Split(strings.TrimSpace(runOut), "\n")
	last := lines[len(lines)-1]
	for _, w := range []string{"pre-flight checks found", "nothing was created", "GRANT SELECT ON", "character varying(3)", "parapply check"} {
		if !strings.Contains(last, w) {
			t.Errorf("run's error %q lacks %q", last, w)
		}
	}
	var slots int
	if err := e.pub.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots`).Scan(&slots); err != nil || slots != 0 {
		t.Errorf("slots after the refused start: %d (%v), want none", slots, err)
	}

	// Every fix that is SQL, run where it belongs, as the superuser; then
	// every check passes.
	for _, r := range rep.Results {
		conn := map[string]*pgx.Conn{"publisher": e.pub, "target": e.sub}[r.Side]
		for _, p := range r.Problems {
			if !p.Fails && !strings.Contains(p.Fix, "SEQUENCE") {
				continue
			}
			for _, stmt := range strings.SplitAfter(p.Fix, ";") {
				stmt = strings.TrimSpace(stmt)
				if !strings.Contains(stmt, "...") && (strings.HasPrefix(stmt, "GRANT") || strings.HasPrefix(stmt, "ALTER TABLE") || strings.HasPrefix(stmt, "ALTER TYPE") || strings.HasPrefix(stmt, "ALTER DEFAULT PRIVILEGES")) {
					e.exec(conn, stmt)
				}
			}
		}
	}
	// What is not SQL to run as it stands: the NOT NULL column's default.
	e.exec(e.sub, `ALTER TABLE items ALTER COLUMN added SET DEFAULT 0`)
	rep, code, out = runCheck(t, args...)
	if code != 0 {
		t.Fatalf("after the fixes: exit status %d, want 0:\n%s", code, out)
	}
	for _, r := range rep.Results {
		if r.Status == "failed" || r.Status == "skipped" {
			t.Errorf("after the fixes: %s %s is %s: %+v", r.Side, r.Check, r.Status, r.Problems)
		}
		if r.Side == "target" && r.Check == "published columns and types" && r.Detail != "can every publisher value be stored: yes" {
			t.Errorf("the column check passed with the detail %q", r.Detail)
		}
	}
	// The default privileges granted reach a table created later.
	e.exec(e.pub, `CREATE TABLE later (id int PRIMARY KEY)`)
	if later, err := pgx.Connect(ctx, src); err != nil {
		t.Error(err)
	} else {
		if _, err := later.Exec(ctx, `SELECT * FROM later`); err != nil {
			t.Errorf("the source role reading a table created after ALTER DEFAULT PRIVILEGES: %v", err)
		}
		later.Close(ctx)
	}
	// And parapply runs with these roles: the copy, then the stream.
	e.exec(e.pub, `INSERT INTO items VALUES (1, 'a', 'happy', 1.50), (2, 'b', 'sad', 2); INSERT INTO audit_log (note) VALUES ('one'), ('two'); INSERT INTO nokey VALUES ('x')`)
	p := e.runProcess(t, append(args[:len(args):len(args)], "--workers", "0")...)
	e.waitSlotExists(t, "checked", p)
	e.exec(e.pub, `INSERT INTO items VALUES (3, 'c', 'ok', 3); UPDATE items SET name = 'a2' WHERE id = 1; DELETE FROM items WHERE id = 2; INSERT INTO audit_log (note) VALUES ('three')`)
	e.waitSlotConfirmed("checked", waitCaughtUpFor, p.alive)
	p.signal(syscall.SIGTERM)
	e.exec(e.sub, `ALTER TABLE items DROP COLUMN added`) // the target's own column, which the publisher lacks
	e.verify("items", "audit_log", "nokey")

	// A misspelt publication and slot name the ones that exist.
	rep, _, out = runCheck(t, "--source", src, "--target", dst, "--publication", "pub_chek", "--slot", "checkd")
	for _, w := range []struct{ check, text string }{
		{"publications", "publication pub_chek does not exist; did you mean pub_check? (fix: set publication = pub_check (or, if pub_chek is meant: CREATE PUBLICATION pub_chek"},
		{"slot checkd", "slot checkd does not exist, but slot checked does: did you mean it?"},
	} {
		found := false
		for _, r := range rep.Results {
			for _, p := range r.Problems {
				found = found || r.Check == w.check && strings.Contains(p.What+" (fix: "+p.Fix+")", w.text)
			}
		}
		if !found {
			t.Errorf("check with a misspelt publication and slot: no %q under %q:\n%s", w.text, w.check, out)
		}
	}

	// The human report: a line per check, the sum at the end.
	human, err := exec.Command(parapplyBinary(t), append([]string{"check"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("parapply check: %v\n%s", err, human)
	}
	for _, w := range []string{"Checking the publisher\n", "Checking the target\n", "  wal_level ", " ok (logical)\n", "every check passed"} {
		if !strings.Contains(string(human), w) {
			t.Errorf("report lacks %q:\n%s", w, human)
		}
	}
}

// TestCheckSettings: parapply check names the server settings a run with
// these settings lacks, with the ALTER SYSTEM that fixes each.
func TestCheckSettings(t *testing.T) {
	e := newEnvSettings(t, `CREATE TABLE items (id int PRIMARY KEY, v text)`,
		map[string]string{"max_replication_slots": "1", "fsync": "off"}, map[string]string{"max_prepared_transactions": "0", "fsync": "off"})
	e.exec(e.pub, `SELECT pg_create_logical_replication_slot('other', 'pgoutput')`)
	rep, code, out := runCheck(t, "--source", e.sourceDSN(), "--target", e.targetDSN(), "--publication", "pub",
		"--slot", "new", "--two-phase", "on", "--conflict-resolution", "update_origin_differs=last_update_wins")
	if code != 3 {
		t.Fatalf("exit status %d, want 3:\n%s", code, out)
	}
	for _, w := range []struct{ side, check, fix string }{
		{"publisher", "slot new", "ALTER SYSTEM SET max_replication_slots = 2"},
		{"target", "max_prepared_transactions", "ALTER SYSTEM SET max_prepared_transactions"},
		{"target", "track_commit_timestamp", "ALTER SYSTEM SET track_commit_timestamp = on"},
	} {
		found := false
		for _, r := range rep.Results {
			if r.Side == w.side && r.Check == w.check {
				for _, p := range r.Problems {
					found = found || (p.Fails && strings.Contains(p.Fix, w.fix))
				}
			}
		}
		if !found {
			t.Errorf("no failed %s check %q with the fix %q:\n%s", w.side, w.check, w.fix, out)
		}
	}
}

// TestCheckWALLevelReplica: a publisher left at wal_level = replica. From
// PostgreSQL 19 on, logical decoding turns on by itself with the first
// logical slot (effective_wal_level): check passes, saying so, and a run
// copies and streams; before 19, check fails on wal_level with its fix.
func TestCheckWALLevelReplica(t *testing.T) {
	e := newEnvSettings(t, `CREATE TABLE items (id int PRIMARY KEY, v text)`, map[string]string{"wal_level": "replica"}, nil)
	e.exec(e.pub, `INSERT INTO items VALUES (1, 'copied')`)
	args := []string{"--source", e.sourceDSN(), "--target", e.targetDSN(), "--publication", "pub", "--slot", "replica_level"}
	walLevel := func() (status, detail, problems string) {
		rep, _, out := runCheck(t, args...)
		for _, r := range rep.Results {
			if r.Side == "publisher" && r.Check == "wal_level" {
				for _, p := range r.Problems {
					problems += p.What + " (fix: " + p.Fix + ")"
				}
				return r.Status, r.Detail, problems
			}
		}
		t.Fatalf("check reports no wal_level:\n%s", out)
		return "", "", ""
	}
	status, detail, problems := walLevel()
	if e.pair.Publisher.Version < 19 {
		if status != "failed" || !strings.Contains(problems, "wal_level is replica") || !strings.Contains(problems, "ALTER SYSTEM SET wal_level = logical") {
			t.Fatalf("PostgreSQL %d at wal_level = replica: wal_level %s (%s), want failed with the fix", e.pair.Publisher.Version, status, problems)
		}
		return
	}
	if status != "ok" || !strings.Contains(detail, "effective_wal_level replica: logical decoding turns on when parapply creates its slot") {
		t.Fatalf("wal_level %s %q (%s), want ok, naming effective_wal_level", status, detail, problems)
	}
	p := e.runProcess(t, "--publication", "pub", "--slot", "replica_level")
	e.waitSlotExists(t, "replica_level", p)
	e.exec(e.pub, `INSERT INTO items VALUES (2, 'streamed'); UPDATE items SET v = 'changed' WHERE id = 1`)
	e.waitSlotConfirmed("replica_level", waitCaughtUpFor, p.alive)
	e.verify("items")
	if status, detail, _ = walLevel(); status != "ok" || !strings.Contains(detail, "effective_wal_level logical") {
		t.Errorf("with parapply's slot: wal_level %s %q, want ok, effective_wal_level logical", status, detail)
	}
	p.signal(syscall.SIGTERM)
}
