package status

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/subscriber"
)

func TestSample(t *testing.T) {
	prev := subscriber.Status{Txns: 100, Rows: 1000}
	st := subscriber.Status{State: subscriber.StateStreaming, Txns: 300, Rows: 5000, Applied: 0x1000, SourceWALEnd: 0x1800,
		QueueBytes: 10, StreamBytes: 5, Lag: 2 * time.Second,
		Workers: []subscriber.WorkerStatus{{Worker: 1, Txns: 300, Busy: 1500 * time.Millisecond}}}
	st.DDL = 3
	r := Sample(st, prev, 2*time.Second)
	if r.DDL != 3 {
		t.Errorf("DDL statements %d, want 3", r.DDL)
	}
	if r.TxnsPerSecond != 100 || r.RowsPerSecond != 2000 {
		t.Errorf("rates %v txn/s %v rows/s, want 100 and 2000", r.TxnsPerSecond, r.RowsPerSecond)
	}
	if r.LagBytes != 0x800 || r.LagSeconds != 2 || r.QueueBytes != 15 {
		t.Errorf("lag %d bytes %v s, queue %d; want 2048, 2, 15", r.LagBytes, r.LagSeconds, r.QueueBytes)
	}
	if len(r.Workers) != 1 || r.Workers[0].BusySeconds != 1.5 {
		t.Errorf("workers %+v", r.Workers)
	}
	if r.Waiting != nil {
		t.Errorf("waiting %+v while the subscriber waits for nothing", r.Waiting)
	}
	since := time.Now().Add(-time.Minute)
	st.Waiting = &subscriber.Wait{Reason: subscriber.WaitDiskFull, Since: since, Error: "could not extend file (SQLSTATE 53100)", What: "the target's disk is full", Fix: "free space"}
	if w := Sample(st, prev, 0).Waiting; w == nil || w.Reason != subscriber.WaitDiskFull || !w.Since.Equal(since) || w.Error != st.Waiting.Error ||
		w.What != st.Waiting.What || w.Fix != st.Waiting.Fix {
		t.Errorf("waiting %+v, want disk_full since %s with its error, what and fix", w, since)
	}
	// Applied past the last WAL end heard of: no negative lag.
	st.Applied = 0x2000
	if r := Sample(st, prev, 0); r.LagBytes != 0 || r.TxnsPerSecond != 0 {
		t.Errorf("lag %d, rate %v; want 0 and 0 (no interval)", r.LagBytes, r.TxnsPerSecond)
	}
}

func TestLiveness(t *testing.T) {
	for _, c := range []struct {
		state  string
		age    time.Duration
		locked bool
		want   string
		stale  bool
		live   bool
	}{
		{subscriber.StateStreaming, time.Second, true, RunLive, false, true},
		// Killed: the lock went with its sessions; three missed updates.
		{subscriber.StateStreaming, NotRunningAfter - 100*time.Millisecond, false, RunLive, false, true},
		{subscriber.StateStreaming, NotRunningAfter + 100*time.Millisecond, false, RunNotRunning, true, false},
		{subscriber.StateCopying, NotRunningAfter + 100*time.Millisecond, false, RunNotRunning, true, false},
		{subscriber.StateReconnecting, time.Minute, false, RunNotRunning, true, false},
		// The lock held: a process whose recorder cannot write.
		{subscriber.StateCopying, NotRunningAfter + time.Second, true, RunLive, false, true},
		{subscriber.StateStreaming, StaleAfter + time.Second, true, RunNotUpdated, true, true},
		{subscriber.StateStopped, time.Hour, false, RunEnded, false, false},
		{subscriber.StateFailed, time.Hour, false, RunEnded, false, false},
		// Ended, and a new process has claimed the slot before it recorded itself.
		{subscriber.StateFailed, time.Hour, true, RunEnded, false, true},
	} {
		r := Record{State: c.state, Age: c.age, LockHeld: c.locked}
		if got, stale, live := r.Liveness(), r.Stale(), r.Live(); got != c.want || stale != c.stale || live != c.live {
			t.Errorf("%s updated %s ago, lock held %v: %s, stale %v, live %v; want %s, %v, %v", c.state, c.age, c.locked, got, stale, live, c.want, c.stale, c.live)
		}
	}
}

func TestRecordJSONWritesLSNsAsPostgreSQLDoes(t *testing.T) {
	r := Record{Slot: "s", Applied: parapply.LSN(0x1_0000_00A0)}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m["applied_lsn"] != "1/A0" {
		t.Errorf("applied_lsn = %v, want 1/A0", m["applied_lsn"])
	}
	var back Record
	if err := json.Unmarshal(b, &back); err != nil || back.Applied != r.Applied {
		t.Errorf("round trip: %v, %v", back.Applied, err)
	}
}

// TestSequenceSync: each result's outcome and values, and the detail
// bounded.
func TestSequenceSync(t *testing.T) {
	seq := func(name string, last int64, used, readable bool) sequences.Sequence {
		return sequences.Sequence{Schema: "public", Name: name, Last: last, Used: used, Readable: readable}
	}
	rs := []sequences.Result{
		{Sequence: seq("moved", 50, true, true), Before: 10, Called: true, Moved: true},
		{Sequence: seq("left", 50, true, true), Before: 70, Called: true},
		{Sequence: seq("unused", 0, false, true)},
		{Sequence: seq("missing", 5, true, true), Missing: true},
		{Sequence: seq("unreadable", 0, false, false)},
	}
	q := SequenceSync(sequences.Summarize(rs), rs, SyncedByCommand, "")
	want := map[string]string{`"moved"`: SequenceMoved, `"left"`: SequenceLeft, `"unused"`: SequenceUnused, `"missing"`: SequenceMissing, `"unreadable"`: SequenceUnreadable}
	if len(q.Detail) != len(rs) || q.Moved != 1 || q.Missing != 1 || q.Unreadable != 1 || q.By != SyncedByCommand {
		t.Fatalf("sync %+v", q)
	}
	for _, d := range q.Detail {
		if d.Outcome != want[strings.TrimPrefix(d.Sequence, `"public".`)] {
			t.Errorf("%s: outcome %s, want %s", d.Sequence, d.Outcome, want[strings.TrimPrefix(d.Sequence, `"public".`)])
		}
	}
	if d := q.Detail[0]; d.PublisherValue == nil || *d.PublisherValue != 50 || d.TargetBefore == nil || *d.TargetBefore != 10 {
		t.Errorf("moved: %+v", d)
	}
	if d := q.Detail[2]; d.PublisherValue != nil || d.TargetBefore != nil {
		t.Errorf("unused: %+v, want no values", d)
	}
	many := make([]sequences.Result, MaxSequenceDetail+7)
	if q := SequenceSync(sequences.Summarize(many), many, SyncedByRun, ""); len(q.Detail) != MaxSequenceDetail || q.DetailOmitted != 7 {
		t.Errorf("%d results: %d listed, %d omitted; want %d and 7", len(many), len(q.Detail), q.DetailOmitted, MaxSequenceDetail)
	}
}
