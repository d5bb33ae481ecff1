package metrics

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/parapply/parapply/conflict"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/tablesync"
)

func TestCollector(t *testing.T) {
	h := subscriber.NewHistogram([]float64{0.1, 1})
	h.Observe(0.05)
	h.Observe(0.5)
	h.Observe(3)
	st := subscriber.Status{
		State: subscriber.StateStreaming, Received: 3000, Applied: 2000, Durable: 1500, SourceWALEnd: 5000,
		Lag: 1500 * time.Millisecond, Txns: 7, Groups: 3, CommitDelay: h.Snapshot(), QueueBytes: 42,
		Tables: []subscriber.TableStatus{{Name: "public.a", Inserts: 5, Updates: 2, Deletes: 1, UpdateMissing: 1, Conflicts: map[conflict.Type]int64{conflict.UpdateMissing: 1, conflict.InsertExists: 2}}},
		Workers: []subscriber.WorkerStatus{
			{Worker: 1, Txns: 4, Busy: 2 * time.Second, CommitWait: time.Second, RetriesBy: [5]int64{1, 0, 2, 0, 0}},
			{Worker: 2, Txns: 3, DependencyWait: 500 * time.Millisecond, RetriesBy: [5]int64{0, 1, 0, 3, 1}},
		},
		Waiting: &subscriber.Wait{Reason: subscriber.WaitDiskFull, Since: time.Unix(1700000000, 0)},
		Copy:    &tablesync.Progress{Tables: 3, TablesDone: 1, Indexes: 5, IndexesBuilt: 2, PerTable: []tablesync.TableProgress{{Name: "public.a", Rows: 10, EstRows: 12, Bytes: 100}}},
	}
	c := NewCollector(func() subscriber.Status { return st }, Info{Version: "v1", Slot: "s", ApplicationName: "parapply"})
	tests := []struct {
		name, want string
	}{
		{"parapply_lsn_bytes", `
# HELP parapply_lsn_bytes Publisher WAL positions as byte offsets: received (end of the last change received), applied (committed on the target), flushed (durable on the target, reported to the publisher), source_wal_end (the publisher's WAL end as of its last message).
# TYPE parapply_lsn_bytes gauge
parapply_lsn_bytes{position="applied"} 2000
parapply_lsn_bytes{position="flushed"} 1500
parapply_lsn_bytes{position="received"} 3000
parapply_lsn_bytes{position="source_wal_end"} 5000
`},
		{"parapply_lag_bytes", `
# HELP parapply_lag_bytes Publisher WAL not yet applied on the target: source_wal_end minus applied; during the initial copy (and before anything is applied), the WAL the slot retains on the publisher.
# TYPE parapply_lag_bytes gauge
parapply_lag_bytes 3000
`},
		{"parapply_lag_seconds", `
# HELP parapply_lag_seconds Age of the source commit of the last transaction applied, while more is waiting; 0 when caught up.
# TYPE parapply_lag_seconds gauge
parapply_lag_seconds 1.5
`},
		{"parapply_rows_total", `
# HELP parapply_rows_total Row changes committed on the target, by published table and kind (insert, update, delete).
# TYPE parapply_rows_total counter
parapply_rows_total{kind="delete",table="public.a"} 1
parapply_rows_total{kind="insert",table="public.a"} 5
parapply_rows_total{kind="update",table="public.a"} 2
`},
		{"parapply_retries_total", `
# HELP parapply_retries_total Transactions tried again, by cause: deadlock, serialization_failure, lock_timeout, unique_violation, conflict (met while earlier transactions were in flight).
# TYPE parapply_retries_total counter
parapply_retries_total{cause="conflict"} 1
parapply_retries_total{cause="deadlock"} 1
parapply_retries_total{cause="lock_timeout"} 2
parapply_retries_total{cause="serialization_failure"} 1
parapply_retries_total{cause="unique_violation"} 3
`},
		{"parapply_commit_delay_seconds", `
# HELP parapply_commit_delay_seconds Time from a source commit to the target commit that applied it (last transaction of each target transaction), on parapply's clock.
# TYPE parapply_commit_delay_seconds histogram
parapply_commit_delay_seconds_bucket{le="0.1"} 1
parapply_commit_delay_seconds_bucket{le="1"} 2
parapply_commit_delay_seconds_bucket{le="+Inf"} 3
parapply_commit_delay_seconds_sum 3.55
parapply_commit_delay_seconds_count 3
`},
		{"parapply_state", `
# HELP parapply_state 1 for the state parapply is in (starting, copying, streaming, reconnecting, waiting, stopped, failed), 0 for the others.
# TYPE parapply_state gauge
parapply_state{state="copying"} 0
parapply_state{state="failed"} 0
parapply_state{state="reconnecting"} 0
parapply_state{state="starting"} 0
parapply_state{state="stopped"} 0
parapply_state{state="streaming"} 1
parapply_state{state="waiting"} 0
`},
		{"parapply_target_waiting", `
# HELP parapply_target_waiting 1 for what parapply waits for on the target while it lacks a resource or takes no writes (disk_full, out_of_memory, too_many_connections, configuration_limit, insufficient_resources, read_only, recovery), 0 for the other reasons; all 0 while it waits for nothing.
# TYPE parapply_target_waiting gauge
parapply_target_waiting{reason="configuration_limit"} 0
parapply_target_waiting{reason="disk_full"} 1
parapply_target_waiting{reason="insufficient_resources"} 0
parapply_target_waiting{reason="out_of_memory"} 0
parapply_target_waiting{reason="read_only"} 0
parapply_target_waiting{reason="recovery"} 0
parapply_target_waiting{reason="too_many_connections"} 0
`},
		{"parapply_target_wait_start_time_seconds", `
# HELP parapply_target_wait_start_time_seconds When the current wait for the target began, in seconds since the Unix epoch; 0 while parapply waits for nothing.
# TYPE parapply_target_wait_start_time_seconds gauge
parapply_target_wait_start_time_seconds 1.7e+09
`},
		{"parapply_worker_commit_order_wait_seconds_total", `
# HELP parapply_worker_commit_order_wait_seconds_total Time each worker waited for earlier transactions to commit first.
# TYPE parapply_worker_commit_order_wait_seconds_total counter
parapply_worker_commit_order_wait_seconds_total{worker="1"} 1
parapply_worker_commit_order_wait_seconds_total{worker="2"} 0
`},
		{"parapply_copy_tables", `
# HELP parapply_copy_tables Tables of the initial copy, by state (done, pending).
# TYPE parapply_copy_tables gauge
parapply_copy_tables{state="done"} 1
parapply_copy_tables{state="pending"} 2
`},
		{"parapply_copy_indexes", `
# HELP parapply_copy_indexes Indexes and constraints the initial copy builds after the rows (copy_defer_indexes), by state (built, pending).
# TYPE parapply_copy_indexes gauge
parapply_copy_indexes{state="built"} 2
parapply_copy_indexes{state="pending"} 3
`},
		{"parapply_conflicts_total", `
# HELP parapply_conflicts_total Conflicts found on the target and resolved, by table and type (update_missing and delete_missing always; the other types of docs/conflicts.md once met).
# TYPE parapply_conflicts_total counter
parapply_conflicts_total{table="public.a",type="delete_missing"} 0
parapply_conflicts_total{table="public.a",type="insert_exists"} 2
parapply_conflicts_total{table="public.a",type="update_missing"} 1
`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := testutil.CollectAndCompare(c, strings.NewReader(tc.want), tc.name); err != nil {
				t.Error(err)
			}
		})
	}
	// Every described family is collected, and the whole set passes the
	// Prometheus linter (names, units, help texts).
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

func TestHistogramSnapshotIsCumulative(t *testing.T) {
	h := subscriber.NewHistogram([]float64{1, 2, 3})
	for _, v := range []float64{0.5, 1, 1.5, 2.5, 2.5, 10} {
		h.Observe(v)
	}
	s := h.Snapshot()
	want := []uint64{2, 3, 5}
	for i := range want {
		if s.Counts[i] != want[i] {
			t.Fatalf("counts %v, want %v", s.Counts, want)
		}
	}
	if s.Count != 6 || s.Sum != 18 {
		t.Fatalf("count %d sum %v, want 6 and 18", s.Count, s.Sum)
	}
}

// TestDashboardUsesExistingMetrics keeps the Grafana dashboard in step with
// the collector: every parapply_ series an expression names must be one the
// collector describes.
func TestDashboardUsesExistingMetrics(t *testing.T) {
	raw, err := os.ReadFile("../dashboards/parapply.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	known := map[string]bool{}
	ch := make(chan *prometheus.Desc, 100)
	NewCollector(nil, Info{}).Describe(ch)
	close(ch)
	for d := range ch {
		m := regexp.MustCompile(`fqName: "([a-z_]+)"`).FindStringSubmatch(d.String())
		known[m[1]] = true
	}
	name := regexp.MustCompile(`parapply_[a-z_]+`)
	exprs := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs++
			for _, n := range name.FindAllString(tg.Expr, -1) {
				base := n
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if !known[base] && strings.HasSuffix(base, suffix) {
						base = strings.TrimSuffix(base, suffix)
					}
				}
				if !known[base] {
					t.Errorf("panel %q uses %s, which parapply does not export", p.Title, n)
				}
			}
		}
	}
	if exprs < 10 {
		t.Errorf("dashboard has %d queries; expected the full set", exprs)
	}
}

// TestFailoverSeries: the failover series come from WithFailover's
// function, at each scrape, and are absent while it has nothing to say.
func TestFailoverSeries(t *testing.T) {
	var f *Failover
	c := NewCollector(func() subscriber.Status { return subscriber.Status{} }, Info{}).WithFailover(func() *Failover { return f })
	names := []string{"parapply_slot_failover", "parapply_synchronized_standby_slots_set", "parapply_slot_synchronized"}
	if n := testutil.CollectAndCount(c, names...); n != 0 {
		t.Errorf("%d failover series before anything is known, want none", n)
	}
	f = &Failover{Slot: true, SyncStandbySlots: false, Synced: map[string]bool{"10.0.0.2:5432": true, "10.0.0.3:5432": false}}
	want := `
# HELP parapply_slot_synchronized 1 when the standby (a host the source names besides the primary) keeps a synchronized copy of the slot, 0 when it does not.
# TYPE parapply_slot_synchronized gauge
parapply_slot_synchronized{standby="10.0.0.2:5432"} 1
parapply_slot_synchronized{standby="10.0.0.3:5432"} 0
# HELP parapply_synchronized_standby_slots_set 1 when the publisher sets synchronized_standby_slots (no change reaches parapply before the standbys it names have it).
# TYPE parapply_synchronized_standby_slots_set gauge
parapply_synchronized_standby_slots_set 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "parapply_slot_synchronized", "parapply_synchronized_standby_slots_set"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c, "parapply_slot_failover"); n != 1 {
		t.Errorf("parapply_slot_failover: %d series, want 1", n)
	}
}
