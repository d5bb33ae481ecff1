package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/parapply/parapply"
)

// scrape reads the metrics endpoint into families by name.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// value returns the value of the series of family name whose labels include
// every pair given (label, value, label, value...); the test fails if none.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("metric family %s missing", name)
	}
	var sum float64
	found := false
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			ok := false
			for _, lp := range m.Label {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					ok = true
				}
			}
			if !ok {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	if !found {
		t.Fatalf("no series of %s with labels %v", name, labels)
	}
	return sum
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// statusJSON runs parapply status --json. A run records its status once a
// second from its first second on: status asked for earlier finds none,
// and statusJSON asks again, for up to statusFirstRecord.
func statusJSON(t *testing.T, args ...string) (map[string]any, string) {
	t.Helper()
	deadline := time.Now().Add(statusFirstRecord)
	var out []byte
	var err error
	for {
		out, err = exec.Command(parapplyBinary(t), append([]string{"status", "--json"}, args...)...).CombinedOutput()
		first := bytes.Contains(out, []byte("no parapply status yet")) || bytes.Contains(out, []byte("has no status of slot"))
		if err == nil || !first || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("parapply status: %v: %s", err, out)
	}
	var rep struct {
		Slots []map[string]any `json:"slots"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("status --json is not JSON: %v: %s", err, out)
	}
	if len(rep.Slots) != 1 {
		t.Fatalf("status --json: want one slot, got %s", out)
	}
	return rep.Slots[0], string(out)
}

// statusFirstRecord bounds the wait for a run's first status record.
const statusFirstRecord = 10 * time.Second

// TestObservability runs parapply as a process with metrics, JSON logs and
// a password in both connection strings, applies a known workload, and
// checks the metrics, the status command (against the publisher's own slot
// view), the application names on both servers, and that the password
// appears nowhere.
func TestObservability(t *testing.T) {
	for _, workers := range []int{0, 2} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) { testObservability(t, workers) })
	}
}

func testObservability(t *testing.T, workers int) {
	e := newEnv(t, `CREATE TABLE obs_a (id int PRIMARY KEY, v text); CREATE TABLE obs_b (id bigint PRIMARY KEY, n int)`)
	ctx := context.Background()
	const password = "Obs-s3cret-7Qx"
	src := e.sourceDSN() + " password=" + password
	dst := e.targetDSN() + " password=" + password
	addr := freeAddr(t)
	p := &proc{exited: make(chan struct{})}
	p.cmd = exec.Command(parapplyBinary(t), "run", "--source", src, "--target", dst, "--publication", "pub", "--slot", "obs",
		"--workers", fmt.Sprint(workers), "--metrics-addr", addr, "--log-format", "json", "--status-interval", "1s")
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	defer func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("parapply output:\n%s", p.out.String())
		}
	}()
	e.waitSlotExists(t, "obs", p)

	// The workload: 300 transactions of 10 inserts, one of 500 updates,
	// one of 200 deletes; 1000 inserts in one transaction; then one
	// update of a row removed on the target beforehand (update_missing).
	for i := 0; i < 300; i++ {
		e.exec(e.pub, `INSERT INTO obs_a SELECT g, 'v' || g FROM generate_series($1::int * 10 + 1, $1::int * 10 + 10) g`, i)
	}
	e.exec(e.pub, `UPDATE obs_a SET v = 'updated' WHERE id <= 500`)
	e.exec(e.pub, `DELETE FROM obs_a WHERE id > 2800`)
	e.exec(e.pub, `INSERT INTO obs_b SELECT g, 0 FROM generate_series(1, 1000) g`)
	e.waitSlotConfirmed("obs", 2*time.Minute, p.alive)
	e.exec(e.sub, `DELETE FROM obs_b WHERE id = 7`)
	e.exec(e.pub, `UPDATE obs_b SET n = 1 WHERE id = 7`)
	e.waitSlotConfirmed("obs", 2*time.Minute, p.alive)
	const txns = 300 + 1 + 1 + 1 + 1

	// Metrics: committed rows by table and kind equal what was written.
	var fams map[string]*dto.MetricFamily
	for range 100 {
		fams = scrape(t, addr)
		if value(t, fams, "parapply_conflicts_total", "table", "public.obs_b", "type", "update_missing") == 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"parapply_rows_total", []string{"table", "public.obs_a", "kind", "insert"}, 3000},
		{"parapply_rows_total", []string{"table", "public.obs_a", "kind", "update"}, 500},
		{"parapply_rows_total", []string{"table", "public.obs_a", "kind", "delete"}, 200},
		{"parapply_rows_total", []string{"table", "public.obs_b", "kind", "insert"}, 1000},
		{"parapply_rows_total", []string{"table", "public.obs_b", "kind", "update"}, 1},
		{"parapply_conflicts_total", []string{"table", "public.obs_b", "type", "update_missing"}, 1},
		{"parapply_conflicts_total", []string{"type", "delete_missing"}, 0},
		{"parapply_source_transactions_total", nil, txns},
		{"parapply_state", []string{"state", "streaming"}, 1},
		{"parapply_info", []string{"slot", "obs", "application_name", "parapply"}, 1},
		{"parapply_retries_total", nil, 0},
		{"parapply_queue_bytes", nil, 0},
	} {
		if got := value(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if n := value(t, fams, "parapply_commit_delay_seconds"); n < 1 || n > txns {
		t.Errorf("commit delay histogram holds %v observations, want 1 to %d (one per target commit)", n, txns)
	}
	if workers > 0 {
		if got := value(t, fams, "parapply_worker_transactions_total"); got != txns {
			t.Errorf("parapply_worker_transactions_total = %v, want %d", got, txns)
		}
	}
	for w := 1; w <= workers; w++ {
		value(t, fams, "parapply_worker_busy_seconds_total", "worker", fmt.Sprint(w))
		value(t, fams, "parapply_worker_dependency_wait_seconds_total", "worker", fmt.Sprint(w))
		value(t, fams, "parapply_worker_commit_order_wait_seconds_total", "worker", fmt.Sprint(w))
	}
	if got := value(t, fams, "parapply_target_transactions_total"); got < 1 || got > txns {
		t.Errorf("target transactions %v, want 1 to %d", got, txns)
	}

	// Positions: parapply's flushed position is what the publisher's slot
	// confirms, and status --json reports both the same; lag drains to 0.
	var slotLSN string
	var st map[string]any
	var stOut string
	deadline := time.Now().Add(30 * time.Second)
	for {
		var confirmed string
		if err := e.pub.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'obs'`).Scan(&confirmed); err != nil {
			t.Fatal(err)
		}
		// As parapply prints LSNs: PostgreSQL 19 pads the low half to eight digits.
		l, err := parapply.ParseLSN(confirmed)
		if err != nil {
			t.Fatal(err)
		}
		slotLSN = l.String()
		fams = scrape(t, addr)
		flushed := parapply.LSN(value(t, fams, "parapply_lsn_bytes", "position", "flushed"))
		st, stOut = statusJSON(t, "--target", dst, "--source", src)
		pub, _ := st["publisher"].(map[string]any)
		if flushed.String() == slotLSN && st["flushed_lsn"] == slotLSN && pub != nil && pub["confirmed_flush_lsn"] == slotLSN &&
			value(t, fams, "parapply_lag_bytes") == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("positions do not settle: slot confirms %s, metrics flushed %s, lag %v bytes; status: %s", slotLSN, flushed,
				value(t, fams, "parapply_lag_bytes"), stOut)
		}
		time.Sleep(300 * time.Millisecond)
	}
	if st["state"] != "streaming" || st["stale"] != false || st["slot"] != "obs" {
		t.Errorf("status: want slot obs streaming and fresh, got %s", stOut)
	}
	if st["rows"] != float64(3000+500+200+1000+1) || st["source_transactions"] != float64(txns) {
		t.Errorf("status: want %d rows and %d transactions, got %s", 4701, txns, stOut)
	}
	if ws, _ := st["workers"].([]any); len(ws) != workers {
		t.Errorf("status: want %d workers, got %s", workers, stOut)
	}
	pub := st["publisher"].(map[string]any)
	if pub["active"] != true || pub["application_name"] != "parapply" {
		t.Errorf("status: the publisher should show the slot active under application_name parapply, got %s", stOut)
	}

	// Where operators look: the stream in pg_stat_replication, the workers
	// in the target's pg_stat_activity.
	var app string
	if err := e.pub.QueryRow(ctx, `SELECT application_name FROM pg_stat_replication WHERE pid = (SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'obs')`).Scan(&app); err != nil || app != "parapply" {
		t.Errorf("pg_stat_replication: application_name %q (%v), want parapply", app, err)
	}
	var names []string
	if err := e.sub.QueryRow(ctx, `SELECT array_agg(application_name ORDER BY application_name) FROM pg_stat_activity WHERE application_name LIKE 'parapply worker %'`).Scan(&names); err != nil {
		t.Fatal(err)
	}
	if len(names) != workers || workers > 0 && names[0] != "parapply worker 1" {
		t.Errorf("target pg_stat_activity shows workers %v, want %d named parapply worker K", names, workers)
	}

	// The human form names the state and the workers.
	human, err := exec.Command(parapplyBinary(t), "status", "--target", dst, "--source", src).CombinedOutput()
	if err != nil {
		t.Fatalf("parapply status: %v: %s", err, human)
	}
	wants := []string{"slot obs: streaming", "publisher slot", "confirmed flush " + slotLSN}
	if workers > 0 {
		wants = append(wants, "dependency wait")
	}
	for _, want := range wants {
		if !strings.Contains(string(human), want) {
			t.Errorf("status output lacks %q:\n%s", want, human)
		}
	}

	// --watch --json: one object per refresh until interrupted.
	wctx, wcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	watched, _ := exec.CommandContext(wctx, parapplyBinary(t), "status", "--target", dst, "--watch", "--json", "--interval", "200ms").Output()
	wcancel()
	objects := 0
	for _, line := range strings.Split(strings.TrimSpace(string(watched)), "\n") {
		var rep struct{ Slots []any }
		if json.Unmarshal([]byte(line), &rep) == nil && len(rep.Slots) == 1 {
			objects++
		}
	}
	if objects < 3 {
		t.Errorf("status --watch --json printed %d objects in 1.5 s at 200ms intervals, want at least 3:\n%s", objects, watched)
	}

	// A clean stop is recorded as such.
	p.signal(syscall.SIGTERM)
	if p.err != nil {
		t.Fatalf("parapply did not stop cleanly: %v", p.err)
	}
	st, stOut = statusJSON(t, "--target", dst, "--slot", "obs")
	if st["state"] != "stopped" || st["stale"] != false {
		t.Errorf("after SIGTERM: want state stopped, got %s", stOut)
	}

	// A start refused by its checks records its error over the row of a
	// slot that ran before, keeping the positions the target holds, and
	// leaves no row for a slot that never ran; an unreachable server's
	// error does not quote the password either.
	applied := st["applied_lsn"]
	for _, slot := range []string{"obs", "obs_fail"} {
		if _, fail := runOnce(t, "run", "--source", src, "--target", dst, "--publication", "nosuchpub", "--slot", slot); fail == nil {
			t.Fatal("run with a missing publication succeeded")
		}
	}
	st, stOut = statusJSON(t, "--target", dst, "--slot", "obs")
	if st["state"] != "failed" || !strings.Contains(fmt.Sprint(st["last_error"]), "nosuchpub") || st["applied_lsn"] != applied || st["source_transactions"] != float64(0) {
		t.Errorf("refused start: want state failed, the error recorded, applied_lsn kept at %v and no transactions, got %s", applied, stOut)
	}
	if n := e.count(`SELECT count(*) FROM parapply.status WHERE slot_name = 'obs_fail'`); n != 0 {
		t.Errorf("a refused start of a slot that never ran left %d status rows", n)
	}
	unreachable, _ := runOnce(t, "run", "--source", src, "--target", "host=127.0.0.1 port=1 user=postgres password="+password+" connect_timeout=5", "--publication", "pub", "--slot", "obs_unreach")
	badStatus, _ := runOnce(t, "status", "--target", "host=127.0.0.1 port=1 user=postgres password="+password+" connect_timeout=5")

	// JSON logs: every line parses, and progress lines were logged.
	logs := p.out.String()
	progressLines := 0
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line is not JSON: %q", line)
			continue
		}
		if rec["msg"] == "progress" {
			progressLines++
		}
	}
	if progressLines == 0 {
		t.Errorf("no progress lines logged with status_interval = 1s")
	}
	var recorded string
	if err := e.sub.QueryRow(ctx, `SELECT string_agg(t::text, ' ') FROM parapply.status t`).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	for what, text := range map[string]string{"logs": logs, "status --json": stOut, "status": string(human),
		"unreachable target error": unreachable, "status error": badStatus, "parapply.status rows": recorded} {
		if strings.Contains(text, password) {
			t.Errorf("the password appears in the %s:\n%s", what, text)
		}
	}
	if !strings.Contains(unreachable, "port 1") || !strings.Contains(badStatus, "port 1") {
		t.Errorf("unreachable target errors should name it: %q / %q", unreachable, badStatus)
	}
}
