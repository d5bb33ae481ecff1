package subscriber

import (
	"testing"
	"time"

	"github.com/parapply/parapply/tablesync"
)

// TestLagBytes: during the copy, and while nothing is applied, the lag is
// the WAL the slot retains, never the publisher's whole WAL position.
func TestLagBytes(t *testing.T) {
	for _, c := range []struct {
		name string
		st   Status
		want int64
	}{
		{"streaming", Status{State: StateStreaming, Applied: 0x1000, SourceWALEnd: 0x1800, Retained: 5}, 0x800},
		{"applied past the WAL end heard of", Status{State: StateStreaming, Applied: 0x2000, SourceWALEnd: 0x1800}, 0},
		{"copying", Status{State: StateCopying, Applied: 0x1000, SourceWALEnd: 0x9000, Retained: 0x300}, 0x300},
		{"nothing applied yet", Status{State: StateFailed, SourceWALEnd: 0x9000_0000, Retained: 0x300}, 0x300},
		{"stopped", Status{State: StateStopped, Applied: 0x1000, SourceWALEnd: 0x1010, Retained: 0x300}, 0x10},
	} {
		if got := c.st.LagBytes(); got != c.want {
			t.Errorf("%s: LagBytes() = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestCopyEstimate(t *testing.T) {
	for _, c := range []struct {
		name string
		p    tablesync.Progress
		pct  float64
		left time.Duration
		ok   bool
	}{
		{"nothing copied", tablesync.Progress{Tables: 2, EstRows: 100, Elapsed: time.Second}, 0, 0, false},
		{"no statistics", tablesync.Progress{Tables: 2, Rows: 10, Elapsed: time.Second}, 0, 0, false},
		{"a quarter", tablesync.Progress{Tables: 2, Rows: 25, EstRows: 100, Elapsed: 10 * time.Second}, 25, 30 * time.Second, true},
		{"estimates passed, tables left", tablesync.Progress{Tables: 2, TablesDone: 1, Rows: 200, EstRows: 200, Elapsed: 99 * time.Second}, 99, time.Second, true},
		{"done", tablesync.Progress{Tables: 2, TablesDone: 2, Rows: 200, EstRows: 200, Elapsed: time.Minute}, 100, 0, true},
		// The index phase's time is added to the rows', and makes the
		// percentage the time's.
		{"a quarter, indexes to build", tablesync.Progress{Tables: 2, Rows: 25, EstRows: 100, Elapsed: 10 * time.Second, Indexes: 4, IndexLeft: 60 * time.Second}, 10, 90 * time.Second, true},
		{"rows in, building", tablesync.Progress{Tables: 2, Rows: 100, EstRows: 100, Elapsed: 30 * time.Second, Indexes: 4, IndexesBuilt: 2, Building: true, IndexLeft: 10 * time.Second}, 75, 10 * time.Second, true},
		{"rows in, building, overdue", tablesync.Progress{Tables: 2, Rows: 100, EstRows: 100, Elapsed: 30 * time.Second, Indexes: 4, IndexesBuilt: 3, Building: true}, 99, 0, true},
	} {
		pct, left, ok := CopyEstimate(c.p)
		if pct != c.pct || left.Round(time.Millisecond) != c.left || ok != c.ok {
			t.Errorf("%s: CopyEstimate = %v%%, %s, %v; want %v%%, %s, %v", c.name, pct, left, ok, c.pct, c.left, c.ok)
		}
	}
}

// TestKeptPositions: positions noted never move back nor to zero.
func TestKeptPositions(t *testing.T) {
	var k kept
	t0 := time.Unix(1000, 0)
	k.note(0x500, 0x400, t0)
	k.note(0x450, 0x450, time.Time{}) // a new run from the durable position
	p := k.pos.Load()
	if p.applied != 0x500 || p.durable != 0x450 || !p.lastCommit.Equal(t0) {
		t.Errorf("kept %+v, want applied 0/500, durable 0/450, last commit %s", *p, t0)
	}
}
