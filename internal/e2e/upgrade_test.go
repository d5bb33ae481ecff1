package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/internal/verify"
)

// walkBlock is one fenced block of docs/operations.md's upgrade section:
// its info string (sh, sql, text or none) and its lines, unindented.
type walkBlock struct {
	lang  string
	lines []string
}

// walkStep is one parapply command of the walk-through with the lines
// the doc shows it printing ("..." lines stand for what is left out).
type walkStep struct {
	args []string
	want []string
}

// walkDoc is what TestUpgradeWalkthrough reads of the section: the
// configuration file, the SQL blocks by their first line and the parapply
// commands in order.
type walkDoc struct {
	config string
	sql    map[string]string
	steps  []walkStep
}

// The walk-through's SQL blocks, by their first line, and the pg_dump its
// configuration names (replaced by the test's).
const (
	walkNewDatabase = "pg19: the database, empty"
	walkApplyRole   = "pg19: the apply role"
	walkWritesStop  = "pg15: the writes stop"
	walkAppWrites   = "pg19: the application writes"
	walkDocPGDump   = "/usr/lib/postgresql/19/bin/pg_dump"
)

// upgradeSection returns the fenced blocks of docs/operations.md's
// section on upgrading PostgreSQL, in order.
func upgradeSection(t *testing.T) []walkBlock {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "\n## Upgrading PostgreSQL")
	if !ok {
		t.Fatal("docs/operations.md has no section on upgrading PostgreSQL")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var blocks []walkBlock
	var cur *walkBlock
	indent := ""
	for _, line := range strings.Split(sec, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case strings.HasPrefix(trimmed, "```") && cur == nil:
			indent = line[:len(line)-len(trimmed)]
			cur = &walkBlock{lang: strings.TrimPrefix(trimmed, "```")}
		case strings.HasPrefix(trimmed, "```"):
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, strings.TrimPrefix(line, indent))
		}
	}
	return blocks
}

// readWalkthrough parses the section's blocks: a text block after a
// command block is what its command prints.
func readWalkthrough(t *testing.T) walkDoc {
	t.Helper()
	d := walkDoc{sql: map[string]string{}}
	for _, b := range upgradeSection(t) {
		body := strings.Join(b.lines, "\n")
		switch {
		case b.lang == "sh":
			for _, l := range b.lines {
				if strings.HasPrefix(l, "parapply ") {
					d.steps = append(d.steps, walkStep{args: strings.Fields(l)[1:]})
				}
			}
		case b.lang == "text" && len(d.steps) > 0:
			d.steps[len(d.steps)-1].want = b.lines
		case b.lang == "sql":
			first, rest, _ := strings.Cut(body, "\n")
			d.sql[strings.TrimPrefix(first, "-- ")] = rest
		case b.lang == "" && len(b.lines) > 0 && strings.HasPrefix(b.lines[0], "# /etc/parapply/"):
			d.config = body
		}
	}
	var cmds []string
	for _, s := range d.steps {
		cmds = append(cmds, s.args[0])
	}
	if got, want := strings.Join(cmds, " "), "check run status cutover verify sync-sequences drop"; got != want {
		t.Fatalf("the walk-through's parapply commands: %s, want %s", got, want)
	}
	for _, k := range []string{walkNewDatabase, walkApplyRole, walkWritesStop, walkAppWrites} {
		if d.sql[k] == "" {
			t.Fatalf("the walk-through has no sql block -- %s", k)
		}
	}
	if !regexp.MustCompile(`(?m)^schema = copy$`).MatchString(d.config) || !strings.Contains("\n"+d.config+"\n", "\npg_dump = "+walkDocPGDump+"\n") {
		t.Fatalf("the walk-through's configuration has no schema = copy with pg_dump = %s:\n%s", walkDocPGDump, d.config)
	}
	return d
}

// walkOutput fails the test unless out has every line want shows, in
// order: a line of "..." stands for lines left out, "..." within a line
// for any text, and numbers, positions and durations may differ.
func walkOutput(t *testing.T, cmd string, want []string, out string) {
	t.Helper()
	pos := 0
	for _, w := range want {
		if strings.TrimSpace(w) == "..." || strings.TrimSpace(w) == "" {
			continue
		}
		pat := regexp.QuoteMeta(strings.TrimSpace(w))
		pat = strings.ReplaceAll(pat, `\.\.\.`, `.*`)
		pat = walkVarying.ReplaceAllStringFunc(pat, func(v string) string {
			if strings.Contains(v, "/") {
				return `[0-9A-F]+/[0-9A-F]+`
			}
			return `[0-9.hmsµ]+`
		})
		loc := regexp.MustCompile(`(?m)` + pat).FindStringIndex(out[pos:])
		if loc == nil {
			t.Errorf("parapply %s printed no line like %q after what the doc shows before it:\n%s", cmd, w, out)
			return
		}
		pos += loc[1]
	}
}

// walkVarying matches, in a quoted line, what differs from run to run: a
// WAL position, a number, a duration.
var walkVarying = regexp.MustCompile(`\b[0-9A-F]+/[0-9A-F]+\b|[0-9]+(\\\.[0-9]+)?(ms|µs|s|m|h)?`)

// walkServers holds the pair as the walk-through names it.
type walkServers struct {
	e            *env
	oldDB, newDB *pgx.Conn // superuser sessions on database app, the old server's and the new's
	conf         string    // the configuration file
	pgDump       string    // the pg_dump of the new version
}

// expand puts the test's servers, files and pg_dump in place of the
// doc's (the configuration's value quoted as the file needs it).
func (w *walkServers) expand(s string) string {
	super := func(port int) string {
		return fmt.Sprintf("host=127.0.0.1 port=%d sslmode=disable user=postgres", port)
	}
	return strings.NewReplacer("host=pg15", super(w.e.pair.Publisher.Port), "host=pg19", super(w.e.pair.Subscriber.Port),
		"/etc/parapply/app.conf", w.conf,
		"pg_dump = "+walkDocPGDump, "pg_dump = '"+strings.ReplaceAll(w.pgDump, "'", "''")+"'", walkDocPGDump, w.pgDump).Replace(s)
}

// walkPGDump is the new version's pg_dump, where the walk-through's
// configuration names /usr/lib/postgresql/19/bin/pg_dump:
// PARAPPLY_PG_DUMP, else the target's installation's. CI must have one
// (.ci/run fetches it); elsewhere the test is skipped without.
func walkPGDump(t *testing.T, e *env) string {
	t.Helper()
	if bin := os.Getenv("PARAPPLY_PG_DUMP"); bin != "" {
		return bin
	}
	major := max(e.pair.Publisher.Version, e.pair.Subscriber.Version)
	for _, b := range []string{filepath.Join(e.pair.Subscriber.BinDir, "pg_dump"), filepath.Join("/usr/lib/postgresql", fmt.Sprint(major), "bin", "pg_dump")} {
		if _, err := os.Stat(b); err == nil {
			return b
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("no pg_dump for PostgreSQL %d (set PARAPPLY_PG_DUMP): CI runs the walk-through's schema = copy with the pg_dump .ci/run fetches", major)
	}
	t.Skipf("no pg_dump for PostgreSQL %d here: set PARAPPLY_PG_DUMP to run the walk-through's schema = copy", major)
	return ""
}

// walkFrom is the publisher's version where the harness names none.
const walkFrom = "15.13.0"

// walkSchema is the application's schema on the old server.
const walkSchema = `CREATE SCHEMA shop;
	CREATE TABLE shop.orders (id bigserial PRIMARY KEY, customer int NOT NULL, total numeric(12,2), placed timestamptz NOT NULL DEFAULT now());
	CREATE INDEX orders_customer ON shop.orders (customer);
	CREATE TABLE shop.notes (id int PRIMARY KEY, body text)`

// TestUpgradeWalkthrough runs docs/operations.md's upgrade from
// PostgreSQL 15 to 19 as written, on the harness's pair (15 to 18 by
// default; PARAPPLY_PG_PUBLISHER_VERSION or _BIN and PARAPPLY_PG_BIN pick
// others): the new server's empty database, the roles, check, the schema
// copy (schema = copy: the tables made and owned by the apply role, their
// indexes built after the rows) and the copy under a write load, status,
// the writes stopped, cutover, verify, sync-sequences, the application's
// first write on the new server and drop; the new server
// equal to the old row for row.
func TestUpgradeWalkthrough(t *testing.T) {
	d := readWalkthrough(t)
	if os.Getenv(pgtest.EnvPublisherBin) == "" && os.Getenv(pgtest.EnvPublisherVersion) == "" {
		t.Setenv(pgtest.EnvPublisherVersion, walkFrom) // the oldest publisher, to whatever target the harness runs
	}
	e := newEnv(t, "")
	t.Logf("PostgreSQL %d to %d", e.pair.Publisher.Version, e.pair.Subscriber.Version)
	w := &walkServers{e: e, conf: filepath.Join(t.TempDir(), "app.conf"), pgDump: walkPGDump(t, e)}
	w.oldDB, w.newDB = walkDatabases(t, w, d)
	if err := os.WriteFile(w.conf, []byte(w.expand(d.config)), 0o600); err != nil {
		t.Fatal(err)
	}
	w.command(t, d.steps[0]) // check

	stopLoad := clientLoad(t, e.pair.Publisher.DSN("app"), 4, seed(t), walkLoad)
	defer stopLoad()
	p := startProcess(t, w.expandAll(d.steps[1].args)...)
	defer func() {
		if p.alive() == nil {
			p.signal(syscall.SIGTERM)
		}
	}()
	w.waitStreaming(t, p)
	time.Sleep(2 * time.Second) // writes after the copy, streamed
	stopLoad()
	w.command(t, d.steps[2]) // status

	w.oldDB.Close(context.Background()) // the writes stop: the block ends every session of app
	e.exec(e.pub, d.sql[walkWritesStop])
	for _, s := range d.steps[3:6] { // cutover, verify, sync-sequences
		w.command(t, s)
	}
	old := mustConnect(t, e.pair.Publisher.DSN("app"))
	res, err := verify.Tables(context.Background(), old, w.newDB, "shop.orders", "shop.notes")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		t.Logf("%s: %d rows identical", r.Table, r.Rows)
	}
	p.signal(syscall.SIGTERM)
	walkSchemaMade(t, w, old)
	walkNewWrites(t, w, old, d.sql[walkAppWrites])
	w.command(t, d.steps[6]) // drop
	w.runOutput(t, d.steps[1], p.out.String())
	var slots int
	if err := e.pub.QueryRow(context.Background(), "SELECT count(*) FROM pg_replication_slots").Scan(&slots); err != nil || slots != 0 {
		t.Errorf("%d slots on the old server after parapply drop (%v)", slots, err)
	}
}

// runOutput checks what parapply run printed.
func (w *walkServers) runOutput(t *testing.T, s walkStep, out string) {
	t.Helper()
	walkOutput(t, "run", w.expandAll(s.want), out)
	if t.Failed() {
		t.Logf("parapply run printed:\n%s", out)
	}
}

func (w *walkServers) expandAll(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = w.expand(a)
	}
	return out
}

// command runs one of the walk-through's parapply commands and checks
// its exit status and output.
func (w *walkServers) command(t *testing.T, s walkStep) {
	t.Helper()
	out, err := runOnce(t, w.expandAll(s.args)...)
	t.Logf("parapply %s:\n%s", strings.Join(s.args, " "), out)
	if err != nil {
		t.Fatalf("parapply %s: %v\n%s", s.args[0], err, out)
	}
	walkOutput(t, s.args[0], w.expandAll(s.want), out)
}

// walkDatabases makes database app on both servers: the schema and rows
// on the old, the new one empty by the doc's block, and the roles by the
// doc's blocks: the publisher's of docs/operations.md's least-privilege
// roles, and the walk-through's apply role, whose every statement is one
// of that section's target block.
func walkDatabases(t *testing.T, w *walkServers, d walkDoc) (older, newer *pgx.Conn) {
	t.Helper()
	w.e.exec(w.e.pub, "CREATE DATABASE app")
	w.e.exec(w.e.sub, d.sql[walkNewDatabase])
	older = mustConnect(t, w.e.pair.Publisher.DSN("app"))
	w.e.exec(older, walkSchema)
	w.e.exec(older, `INSERT INTO shop.orders (customer, total) SELECT g % 97, g * 0.25 FROM generate_series(1, 100000) g;
		INSERT INTO shop.notes SELECT g, 'note ' || g FROM generate_series(1, 1000) g`)
	newer = mustConnect(t, w.e.pair.Subscriber.DSN("app"))
	w.e.exec(older, operationsSQL(t, "publisher"))
	target := walkStatements(operationsSQL(t, "target"))
	for _, st := range walkStatements(d.sql[walkApplyRole]) {
		if !slices.Contains(target, st) {
			t.Fatalf("the walk-through's apply role has a statement the target's block of least-privilege roles lacks: %s", st)
		}
	}
	w.e.exec(newer, d.sql[walkApplyRole])
	return older, newer
}

// walkStatements are the statements of an SQL block, without comments and
// with their white space made single spaces, to compare.
func walkStatements(sql string) []string {
	sql = regexp.MustCompile(`--[^\n]*`).ReplaceAllString(sql, "")
	var out []string
	for _, st := range strings.Split(sql, ";") {
		if st = strings.Join(strings.Fields(st), " "); st != "" {
			out = append(out, st)
		}
	}
	return out
}

// walkSchemaMade: schema = copy made schema shop and its tables on the new
// server as the apply role (so that it owns them), with the old server's
// indexes and constraints (NOT NULL, a constraint of its own from
// PostgreSQL 18 on, is left to the row comparison's columns).
func walkSchemaMade(t *testing.T, w *walkServers, old *pgx.Conn) {
	t.Helper()
	const shape = `SELECT string_agg(x, E'\n' ORDER BY x) FROM (
		SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'shop'
		UNION ALL SELECT 'constraint ' || conrelid::regclass::text || ' ' || pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = 'shop'::regnamespace AND contype <> 'n') s(x)`
	var was, is, owners string
	if err := old.QueryRow(context.Background(), shape).Scan(&was); err != nil {
		t.Fatal(err)
	}
	if err := w.newDB.QueryRow(context.Background(), shape).Scan(&is); err != nil {
		t.Fatal(err)
	}
	if was != is {
		t.Errorf("the new server's indexes and constraints differ from the old's:\nold:\n%s\nnew:\n%s", was, is)
	}
	err := w.newDB.QueryRow(context.Background(), `SELECT string_agg(DISTINCT pg_get_userbyid(o), ', ') FROM (
		SELECT relowner FROM pg_class WHERE relnamespace = 'shop'::regnamespace AND relkind IN ('r', 'S')
		UNION ALL SELECT nspowner FROM pg_namespace WHERE nspname = 'shop') s(o)`).Scan(&owners)
	if err != nil || owners != "apply" {
		t.Errorf("schema shop, its tables and sequences on the new server belong to %q (%v), not to apply, which made them", owners, err)
	}
}

// walkLoad is one client's transaction on the old server: an order
// placed, one changed, one cancelled, a note written.
func walkLoad(ctx context.Context, c *pgx.Conn, rng *rand.Rand) error {
	id := 1 + rng.IntN(100000)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue("INSERT INTO shop.orders (customer, total) VALUES ($1, $2)", rng.IntN(97), rng.IntN(10000))
	b.Queue("UPDATE shop.orders SET total = total + 1 WHERE id = $1", id)
	b.Queue("DELETE FROM shop.orders WHERE id = $1", id+7)
	b.Queue("INSERT INTO shop.notes VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET body = excluded.body", rng.IntN(2000), fmt.Sprint("note ", rng.Uint32()))
	b.Queue("COMMIT")
	return c.SendBatch(ctx, b).Close()
}

// waitStreaming waits until parapply's run has copied the tables and
// applies the stream.
func (w *walkServers) waitStreaming(t *testing.T, p *proc) {
	t.Helper()
	for deadline := time.Now().Add(waitCaughtUpFor); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err := p.alive(); err != nil {
			t.Fatal(err)
		}
		var state string
		err := w.newDB.QueryRow(context.Background(), "SELECT state FROM parapply.status WHERE slot_name = 'parapply_app'").Scan(&state)
		if err == nil && state == "streaming" {
			return
		}
	}
	t.Fatalf("parapply did not reach streaming:\n%s", p.out.String())
}

// walkNewWrites runs the application's first write on the new server:
// the order's id is past every id the old server gave out.
func walkNewWrites(t *testing.T, w *walkServers, old *pgx.Conn, sql string) {
	t.Helper()
	ctx := context.Background()
	var last, id int64
	if err := old.QueryRow(ctx, "SELECT last_value FROM shop.orders_id_seq").Scan(&last); err != nil {
		t.Fatal(err)
	}
	if err := w.newDB.QueryRow(ctx, strings.TrimSuffix(strings.TrimSpace(sql), ";")).Scan(&id); err != nil {
		t.Fatalf("the application's first write on the new server: %v", err)
	}
	if id <= last {
		t.Errorf("the new server gave out order %d; the old had given out up to %d", id, last)
	}
}
