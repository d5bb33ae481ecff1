package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

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
	if err, out := runOnce(t, "sync-sequences", "--source", src, "--target", dst, "--publication", "pub", "--slot", "cp"); err != nil {
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
