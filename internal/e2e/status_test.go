package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
)

// lsnOf parses an LSN field of a status --json slot.
func lsnOf(t *testing.T, st map[string]any, field string) parapply.LSN {
	t.Helper()
	s, _ := st[field].(string)
	l, err := parapply.ParseLSN(s)
	if err != nil {
		t.Fatalf("status field %s = %v: %v", field, st[field], err)
	}
	return l
}

// statusText runs parapply status (the human form).
func statusText(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(parapplyBinary(t), append([]string{"status"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("parapply status: %v: %s", err, out)
	}
	return string(out)
}

// slotLSNs reads the slot's confirmed flush position on the publisher and
// the end of the last transaction the target recorded as applied.
func (e *env) slotLSNs(t *testing.T, slot string) (confirmed, progressEnd parapply.LSN) {
	t.Helper()
	ctx := context.Background()
	var c, p string
	if err := e.pub.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&c); err != nil {
		t.Fatal(err)
	}
	if err := e.sub.QueryRow(ctx, `SELECT end_lsn::text FROM parapply.progress WHERE slot_name = $1`, slot).Scan(&p); err != nil {
		t.Fatal(err)
	}
	confirmed, _ = parapply.ParseLSN(c)
	progressEnd, _ = parapply.ParseLSN(p)
	return confirmed, progressEnd
}

// TestStatusKeptAfterExit checks that parapply.status keeps the positions,
// the last applied commit and a small lag after parapply ends, by a clean
// stop (SIGTERM) and by an error, and that a new run shows the positions
// the target recorded before it applies anything; and that status lists
// the slot, inactive once parapply stopped, with the WAL it retains.
func TestStatusKeptAfterExit(t *testing.T) {
	e := newEnv(t, `CREATE TABLE kept (id int PRIMARY KEY, v int)`)
	src, dst := e.sourceDSN(), e.targetDSN()
	args := []string{"--publication", "pub", "--slot", "kept", "--status-interval", "1s"}
	p := e.runProcess(t, args...)
	e.waitSlotExists(t, "kept", p)
	const txns = 200
	for i := range txns {
		e.exec(e.pub, `INSERT INTO kept VALUES ($1, $1)`, i)
	}
	e.waitSlotConfirmed("kept", 2*time.Minute, p.alive)

	// checkKept checks the record of an ended run: its state, positions
	// not behind what the target and the publisher hold, and a lag of at
	// most a transaction or two.
	var lastApplied parapply.LSN
	checkKept := func(when, state string) map[string]any {
		t.Helper()
		st, out := statusJSON(t, "--target", dst, "--source", src, "--slot", "kept")
		confirmed, progressEnd := e.slotLSNs(t, "kept")
		applied, flushed := lsnOf(t, st, "applied_lsn"), lsnOf(t, st, "flushed_lsn")
		if st["state"] != state {
			t.Errorf("%s: state %v, want %s: %s", when, st["state"], state, out)
		}
		if applied < progressEnd || progressEnd == 0 || flushed < confirmed || flushed > applied || applied < lastApplied {
			t.Errorf("%s: applied %s, flushed %s; want applied at or past the progress row's %s (and the last run's %s), flushed between the slot's confirmed %s and applied: %s",
				when, applied, flushed, progressEnd, lastApplied, confirmed, out)
		}
		if lag, _ := st["lag_bytes"].(float64); lag < 0 || lag > 64<<10 {
			t.Errorf("%s: lag_bytes %v, want the lag at the end (below 64 kB): %s", when, st["lag_bytes"], out)
		}
		if st["last_commit_time"] == nil {
			t.Errorf("%s: no last_commit_time: %s", when, out)
		}
		lastApplied = applied
		return st
	}

	p.signal(syscall.SIGTERM)
	if p.err != nil {
		t.Fatalf("parapply did not stop cleanly: %v", p.err)
	}
	st := checkKept("after SIGTERM", "stopped")
	if st["source_transactions"] != float64(txns) {
		t.Errorf("after SIGTERM: source_transactions %v, want %d", st["source_transactions"], txns)
	}
	// The slot, inactive now, is listed with the WAL it keeps.
	_, out := statusJSON(t, "--target", dst, "--source", src, "--slot", "kept")
	var rep struct {
		InactiveSlots []map[string]any `json:"inactive_slots"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	var inactive map[string]any
	for _, s := range rep.InactiveSlots {
		if s["slot_name"] == "kept" {
			inactive = s
		}
	}
	if retained, _ := inactive["retained_bytes"].(float64); inactive == nil || inactive["active"] != false || retained <= 0 || inactive["wal_status"] == "" {
		t.Errorf("after SIGTERM: want slot kept listed as inactive, retaining WAL: %s", out)
	}
	text := statusText(t, "--target", dst, "--source", src, "--slot", "kept")
	for _, bad := range []string{"applied 0/0", "none yet"} {
		if strings.Contains(text, bad) {
			t.Errorf("after SIGTERM: status says %q:\n%s", bad, text)
		}
	}
	if !strings.Contains(text, "inactive slots of parapply on the publisher") || !strings.Contains(text, "  kept  retains ") {
		t.Errorf("after SIGTERM: status does not list the inactive slot:\n%s", text)
	}

	// A new run, before it applies anything: the target's positions and
	// last commit, not zero.
	p = e.runProcess(t, args...)
	e.waitSlotExists(t, "kept", p)
	deadline := time.Now().Add(time.Minute)
	for {
		st, out = statusJSON(t, "--target", dst, "--slot", "kept")
		if st["state"] == "streaming" && st["pid"] == float64(p.cmd.Process.Pid) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new run is not recorded as streaming: %s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if _, progressEnd := e.slotLSNs(t, "kept"); lsnOf(t, st, "applied_lsn") < progressEnd || st["last_commit_time"] == nil {
		t.Errorf("new run before any apply: want applied at the progress row's %s and the last commit time recorded: %s", progressEnd, out)
	}

	// An error ends the run: a row the target refuses.
	e.exec(e.sub, `ALTER TABLE kept ADD CONSTRAINT kept_small CHECK (v < 1000)`)
	for i := range 50 {
		e.exec(e.pub, `INSERT INTO kept VALUES ($1, $1)`, txns+i)
	}
	e.exec(e.pub, `INSERT INTO kept VALUES (100000, 100000)`)
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		t.Fatal("parapply did not stop at a row the target refuses")
	}
	st = checkKept("after an error", "failed")
	if !strings.Contains(fmt.Sprint(st["last_error"]), "kept_small") {
		t.Errorf("after an error: last_error %v, want it to name kept_small", st["last_error"])
	}
	var n int
	if err := e.sub.QueryRow(context.Background(), `SELECT count(*) FROM kept`).Scan(&n); err != nil || n != txns+50 {
		t.Fatalf("target holds %d rows (%v), want %d", n, err, txns+50)
	}
}

// TestStatusDuringCopy slows the initial copy of a table of some 70 MB
// down (a target trigger that sleeps on every row) and checks that, while it runs, parapply.status,
// status --json, the human form and the metrics say copying, with a lag
// above zero (the WAL the slot retains) and a percentage that moves; then
// that a parapply sync-sequences run shows in status, sequence by sequence.
func TestStatusDuringCopy(t *testing.T) {
	// The copy counts rows as each of its page ranges commits: one
	// worker cuts a table of 4 x 2048 pages or more into 4 ranges.
	const rows = 36000
	e := newEnv(t, `CREATE TABLE big (id int PRIMARY KEY, v text); CREATE TABLE counters (id serial PRIMARY KEY, n int)`)
	ctx := context.Background()
	e.exec(e.pub, fmt.Sprintf(`INSERT INTO big SELECT g, pg_catalog.repeat('x', 1800) FROM generate_series(1, %d) g; ANALYZE big`, rows))
	e.exec(e.sub, `CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_catalog.pg_sleep(0.0004); RETURN NEW; END $$;
		CREATE TRIGGER slow BEFORE INSERT ON big FOR EACH ROW EXECUTE FUNCTION slow();
		ALTER TABLE big ENABLE ALWAYS TRIGGER slow`)
	src, dst := e.sourceDSN(), e.targetDSN()
	addr := freeAddr(t)
	p := e.runProcess(t, "--publication", "pub", "--slot", "cp", "--copy-workers", "1", "--metrics-addr", addr, "--sequence-sync-interval", "0")

	// Sample the record while the copy runs (at 0.4 ms a row, 15 s or
	// more).
	var percents []float64
	checkedForms := false
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if err := p.alive(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the copy did not end within 3 minutes; percentages seen %v", percents)
		}
		var state string
		var lag int64
		var pct *float64
		err := e.sub.QueryRow(ctx, `SELECT state, lag_bytes, (copy->>'percent')::float8 FROM parapply.status WHERE slot_name = 'cp'`).Scan(&state, &lag, &pct)
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue // not recorded yet
		}
		if state == "streaming" {
			break
		}
		if state != "copying" {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if lag <= 0 {
			t.Errorf("copying: lag_bytes %d, want the WAL the slot retains (above 0)", lag)
		}
		if pct != nil && (len(percents) == 0 || *pct != percents[len(percents)-1]) {
			percents = append(percents, *pct)
		}
		if pct != nil && *pct < 100 && !checkedForms {
			checkedForms = true
			st, out := statusJSON(t, "--target", dst, "--slot", "cp")
			cp, _ := st["copy"].(map[string]any)
			if st["state"] == "copying" && (cp["percent"] == nil || cp["eta_seconds"] == nil || st["lag_bytes"].(float64) <= 0) {
				t.Errorf("copying: status --json lacks the percentage, the ETA or the lag: %s", out)
			}
			text := statusText(t, "--target", dst, "--slot", "cp")
			if strings.Contains(text, "slot cp: copying") && (!strings.Contains(text, "%, about ") || !strings.Contains(text, " left)") || !strings.Contains(text, "retained by the slot while the copy runs")) {
				t.Errorf("copying: status lacks the percentage and ETA or the retained WAL:\n%s", text)
			}
			fams := scrape(t, addr)
			if value(t, fams, "parapply_state", "state", "copying") == 1 && (value(t, fams, "parapply_lag_bytes") <= 0 || value(t, fams, "parapply_copy_percent") <= 0) {
				t.Errorf("copying: metrics show lag %v bytes, %v%% copied; want both above 0", value(t, fams, "parapply_lag_bytes"), value(t, fams, "parapply_copy_percent"))
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("percentages seen while copying: %v", percents)
	if len(percents) < 2 || percents[len(percents)-1] <= percents[0] {
		t.Errorf("the copy's percentage did not move while it ran: %v", percents)
	}
	if !checkedForms {
		t.Error("never saw the copy below 100% in parapply.status")
	}

	// parapply sync-sequences: its run is what status shows.
	e.exec(e.pub, `INSERT INTO counters (n) SELECT g FROM generate_series(1, 5) g`)
	e.waitSlotConfirmed("cp", 2*time.Minute, p.alive)
	if out, err := runOnce(t, "sync-sequences", "--source", src, "--target", dst, "--publication", "pub", "--slot", "cp"); err != nil {
		t.Fatalf("sync-sequences: %v: %s", err, out)
	}
	st, out := statusJSON(t, "--target", dst, "--slot", "cp")
	q, _ := st["sequences"].(map[string]any)
	found := false
	if q != nil && q["by"] == "sync-sequences" && q["moved"] == float64(1) {
		detail, _ := q["detail"].([]any)
		for _, d := range detail {
			m, _ := d.(map[string]any)
			if m["sequence"] == `"public"."counters_id_seq"` && m["outcome"] == "moved" && m["publisher_last_value"] == float64(5) {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("after sync-sequences: want its sync (counters_id_seq moved to 5) in status: %s", out)
	}
	if text := statusText(t, "--target", dst, "--slot", "cp"); !strings.Contains(text, "by parapply sync-sequences (1 moved forward") {
		t.Errorf("after sync-sequences: the sequences line does not show it:\n%s", text)
	}
	p.signal(syscall.SIGTERM)
}

// TestStatusLiveness: a run that copies does not stream from its slot,
// which the publisher calls inactive: status says it is in use and does
// not list it among the inactive slots. Killed (SIGKILL) while streaming,
// the run is called not running within three status intervals; cutover
// then stops within seconds, naming why, instead of waiting its timeout;
// verify, while the publisher writes, says its results are not final. A
// start refused by its checks leaves no status row (nor, on a fresh
// target, the parapply schema); drop removes, with the slot it retires,
// what slots that never applied anything left.
func TestStatusLiveness(t *testing.T) {
	e := newEnv(t, `CREATE TABLE slow (id int PRIMARY KEY); CREATE TABLE w (id serial PRIMARY KEY, v int)`)
	ctx := context.Background()
	src, dst := e.pair.Publisher.DSN("postgres"), e.pair.Subscriber.DSN("postgres")
	// About 3 s of copy: a target trigger sleeps on each of 12 rows.
	e.exec(e.pub, `INSERT INTO slow SELECT g FROM generate_series(1, 12) g`)
	e.exec(e.sub, `CREATE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_catalog.pg_sleep(0.25); RETURN NEW; END $$;
		CREATE TRIGGER slow BEFORE INSERT ON slow FOR EACH ROW EXECUTE FUNCTION slow();
		ALTER TABLE slow ENABLE ALWAYS TRIGGER slow`)
	p := e.runProcess(t, "--publication", "pub", "--slot", "live", "--copy-workers", "1", "--sequence-sync-interval", "0")

	// While it copies.
	checked := false
	for deadline := time.Now().Add(time.Minute); !checked; time.Sleep(100 * time.Millisecond) {
		if err := p.alive(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("never saw the run copying")
		}
		var state string
		var active bool
		if err := e.sub.QueryRow(ctx, `SELECT state FROM parapply.status WHERE slot_name = 'live'`).Scan(&state); err != nil || state != "copying" {
			continue
		}
		if err := e.pub.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = 'live'`).Scan(&active); err != nil {
			continue
		}
		text := statusText(t, "--target", dst, "--source", src, "--slot", "live")
		if !strings.Contains(text, "slot live: copying\n") {
			continue // the copy ended meanwhile
		}
		checked = true
		if strings.Contains(text, "inactive slots of parapply") {
			t.Errorf("copying: status lists the run's slot among the inactive ones:\n%s", text)
		}
		if !active && !strings.Contains(text, "publisher slot  not streaming yet: parapply copies the tables and streams from the slot once the copy ends (do not drop it)") {
			t.Errorf("copying, the slot inactive on the publisher: status does not say it is in use:\n%s", text)
		}
		t.Logf("copying, slot active on the publisher: %v", active)
	}
	e.waitSlotExists(t, "live", p)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		st, out := statusJSON(t, "--target", dst, "--slot", "live")
		if st["state"] == "streaming" && st["liveness"] == "live" && st["lock_held"] == true {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run is not recorded as streaming and live: %s", out)
		}
	}

	// Killed: not running within three status intervals (3 s).
	killed := time.Now()
	p.signal(syscall.SIGKILL)
	var took time.Duration
	for {
		st, out := statusJSON(t, "--target", dst, "--slot", "live")
		if st["liveness"] == "not running" && st["stale"] == true {
			took = time.Since(killed)
			break
		}
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("10 s after SIGKILL, status does not say not running: %s", out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("status said not running %s after SIGKILL", took.Round(time.Millisecond))
	if took > 4*time.Second { // three intervals, and the status commands' own time (polled every 0.1 s)
		t.Errorf("status said not running %s after SIGKILL, want within three status intervals (3 s)", took)
	}
	if text := statusText(t, "--target", dst, "--slot", "live"); !strings.Contains(text, "slot live: streaming (NOT RUNNING: not updated for ") ||
		!strings.Contains(text, "no target session holds the slot's lock: parapply ended without recording it (killed?), or cannot reach or write to the target)") {
		t.Errorf("after SIGKILL, status says:\n%s", text)
	}

	// cutover: stops within seconds, naming why.
	e.exec(e.pub, `INSERT INTO w (v) VALUES (1)`)
	began := time.Now()
	out, err := runOnce(t, "cutover", "--source", src, "--target", dst, "--publication", "pub", "--slot", "live", "--timeout", "2m")
	if err == nil || !strings.Contains(out, "and no parapply streams from it: the slot is inactive on the publisher and no target session holds its lock; its last run (pid ") ||
		!strings.Contains(out, "was streaming when it stopped recording") || !strings.Contains(out, "start parapply on the slot (parapply run ... --slot live), then run parapply cutover again") {
		t.Errorf("cutover with parapply killed: %v, want it to say no parapply streams from the slot and why:\n%s", err, out)
	}
	if d := time.Since(began); d > 20*time.Second {
		t.Errorf("cutover with parapply killed took %s, want seconds", d)
	}

	// verify while the publisher writes.
	wctx, stop := context.WithCancel(ctx)
	wrote := make(chan int)
	go func() {
		c, err := pgx.Connect(wctx, src)
		n := 0
		for err == nil && wctx.Err() == nil {
			if _, err = c.Exec(wctx, `INSERT INTO w (v) VALUES (2)`); err == nil {
				n++
			}
		}
		if c != nil {
			c.Close(context.Background())
		}
		wrote <- n
	}()
	time.Sleep(200 * time.Millisecond)
	out, err = runOnce(t, "verify", "--source", src, "--target", dst, "--publication", "pub", "--slot", "live")
	stop()
	t.Logf("the writer inserted %d rows", <-wrote)
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 1 {
		t.Errorf("verify while the publisher writes, parapply killed: %v, want exit status 1\n%s", err, out)
	}
	for _, w := range []string{"note: the publisher wrote during the comparison (its WAL moved from ", "writes are running, so these results are not final; stop the writes, then run parapply cutover",
		"note: no parapply streams from slot live: the slot is inactive on the publisher"} {
		if !strings.Contains(out, w) {
			t.Errorf("verify output lacks %q:\n%s", w, out)
		}
	}

	// Refused starts leave no row; on a fresh target, no schema.
	e.exec(e.sub, `CREATE DATABASE fresh`)
	for _, target := range []string{dst, e.pair.Subscriber.DSN("fresh")} {
		if out, err := runOnce(t, "run", "--source", src, "--target", target, "--publication", "nosuchpub", "--slot", "typo_slot"); err == nil {
			t.Fatalf("a run with a missing publication succeeded:\n%s", out)
		}
	}
	var rows int
	if err := e.sub.QueryRow(ctx, `SELECT count(*) FROM parapply.status WHERE slot_name = 'typo_slot'`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("a refused start left %d status rows (%v)", rows, err)
	}
	fresh, err := pgx.Connect(ctx, e.pair.Subscriber.DSN("fresh"))
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close(ctx)
	if err := fresh.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'parapply'`).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("a refused start on a fresh target created the parapply schema (%v)", err)
	}

	// Rows an earlier release left for refused starts: drop removes them
	// with the slot it retires, and the schema goes.
	e.exec(e.sub, `INSERT INTO parapply.status (slot_name, state, updated_at, last_error) VALUES ('old_typo', 'failed', now(), 'x'), ('old_pub', 'failed', now(), 'y')`)
	out, err = runOnce(t, "drop", "--target", dst, "--slot", "live", "--dry-run")
	if err != nil || !strings.Contains(out, "target: kept the rows of slots old_pub, old_typo, which have no progress row (no run resumes from them): with --source, drop removes them too") {
		t.Errorf("drop --dry-run without --source: %v\n%s", err, out)
	}
	out, err = runOnce(t, "drop", "--source", src, "--target", dst, "--slot", "live")
	for _, w := range []string{"target: deleted what slot old_pub left (1 from parapply.status): no run resumes from it (no progress row on the target, no slot on the publisher)",
		"target: deleted what slot old_typo left (1 from parapply.status)", "target: dropped schema parapply: no slot uses it any more", "publisher: dropped slot live"} {
		if err != nil || !strings.Contains(out, w) {
			t.Errorf("drop: %v; output lacks %q:\n%s", err, w, out)
		}
	}
}
