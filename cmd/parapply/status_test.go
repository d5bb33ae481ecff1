package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/parapply/parapply/status"
	"github.com/parapply/parapply/subscriber"
)

func TestStateText(t *testing.T) {
	for _, c := range []struct {
		state  string
		age    time.Duration
		locked bool
		want   string
	}{
		{subscriber.StateStreaming, time.Second, true, "streaming"},
		{subscriber.StateStopped, time.Hour, false, "stopped"},
		{subscriber.StateStreaming, 3200 * time.Millisecond, false, "streaming (NOT RUNNING: not updated for 3.2s and no target session holds the slot's lock: parapply ended without recording it (killed?), or cannot reach or write to the target)"},
		{subscriber.StateCopying, 20 * time.Second, true, "copying (NOT UPDATED FOR 20s: the slot's target sessions are still there, but parapply does not record its status: it is stuck, or cannot write parapply.status)"},
	} {
		if got := stateText(status.Record{State: c.state, Age: c.age, LockHeld: c.locked}); got != c.want {
			t.Errorf("%s, %s old, lock held %v:\n got %q\nwant %q", c.state, c.age, c.locked, got, c.want)
		}
	}
}

// TestStatusLiveSlotNotInactive: a run that copies does not stream from
// its slot: the publisher calls it inactive, status says it is in use
// and leaves it out of the inactive slots (which invite a drop); a dead
// run's slot is listed.
func TestStatusLiveSlotNotInactive(t *testing.T) {
	recs := []status.Record{
		{Slot: "copying", State: subscriber.StateCopying, Age: time.Second, LockHeld: true},
		{Slot: "killed", State: subscriber.StateCopying, Age: 10 * time.Second},
		{Slot: "stopped", State: subscriber.StateStopped, Age: time.Hour},
	}
	inactive := []status.Slot{{Name: "copying"}, {Name: "killed"}, {Name: "stopped"}, {Name: "unrecorded"}}
	var names []string
	for _, p := range unheld(inactive, recs) {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, ","); got != "killed,stopped,unrecorded" {
		t.Errorf("inactive slots listed: %s, want killed,stopped,unrecorded", got)
	}
	now := time.Now()
	rep := statusReport{Time: now, Slots: []slotReport{
		{Record: recs[0], Publisher: &status.Slot{Name: "copying"}},
		{Record: status.Record{Slot: "between", State: subscriber.StateReconnecting, Age: time.Second}, Publisher: &status.Slot{Name: "between"}},
		{Record: recs[1], Stale: true, Publisher: &status.Slot{Name: "killed"}},
	}, InactiveSlots: unheld(inactive, recs)}
	var b bytes.Buffer
	printStatus(&b, rep)
	out := b.String()
	for _, want := range []string{
		"publisher slot  not streaming yet: parapply copies the tables and streams from the slot once the copy ends (do not drop it);",
		"publisher slot  inactive while parapply is reconnecting; it streams from the slot again by itself (do not drop it);",
		"slot killed: copying (NOT RUNNING: not updated for 10s",
		"publisher slot  inactive; confirmed flush",
		"inactive slots of parapply on the publisher, which no live parapply holds (each keeps WAL until it is used again or dropped with pg_drop_replication_slot):\n  killed ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\n  copying ") {
		t.Errorf("the copying slot is listed as inactive:\n%s", out)
	}
}

// TestCopyText: the copy's line says the indexes built after the rows
// where there are any, and leads with the index phase once only it is
// left.
func TestCopyText(t *testing.T) {
	for _, c := range []struct {
		name string
		c    status.Copy
		want string
	}{
		{"no indexes", status.Copy{Tables: 4, TablesDone: 1, Rows: 10, RowsEstimated: 40, Bytes: 2048, ElapsedSeconds: 3},
			"1 of 4 tables, 10 of about 40 rows (25%, about 9s left), 2048 bytes in 3 s"},
		{"rows and indexes", status.Copy{Tables: 4, TablesDone: 1, Rows: 10, RowsEstimated: 40, Bytes: 2048, ElapsedSeconds: 3, Indexes: 6, IndexesBuilt: 1},
			"1 of 4 tables, 10 of about 40 rows, 1 of 6 indexes built (25%, about 9s left), 2048 bytes in 3 s"},
		{"building", status.Copy{Tables: 4, TablesDone: 3, Rows: 40, RowsEstimated: 40, Bytes: 2048, ElapsedSeconds: 3, Indexes: 6, IndexesBuilt: 4, Building: true},
			"building indexes (4 of 6), 3 of 4 tables, 40 of about 40 rows (25%, about 9s left), 2048 bytes in 3 s"},
	} {
		if got := copyText(c.c, " (25%, about 9s left)"); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
}
