package main

import (
	"testing"
	"time"

	"github.com/parapply/parapply/status"
	"github.com/parapply/parapply/subscriber"
)

func TestNotStreaming(t *testing.T) {
	const dead = "the slot is inactive on the publisher and no target session holds its lock"
	rec := func(state string, age time.Duration, locked bool) *status.Record {
		return &status.Record{Slot: "s", State: state, PID: 42, Host: "h", Age: age, LockHeld: locked, LastError: "boom"}
	}
	for _, c := range []struct {
		name   string
		active bool
		rec    *status.Record
		want   string
	}{
		{"a walsender streams", true, nil, ""},
		{"copying, fresh row", false, rec(subscriber.StateCopying, time.Second, true), ""},
		{"reconnecting, fresh row, lock free", false, rec(subscriber.StateReconnecting, time.Second, false), ""},
		{"failed, a new start holds the lock", false, rec(subscriber.StateFailed, time.Hour, true), ""},
		{"no row", false, nil, dead + "; the target has no status row of it (no parapply ran on it here: check --slot and --target)"},
		{"failed", false, rec(subscriber.StateFailed, 90*time.Second, false), dead + "; its last run (pid 42 on h) failed 1m30s ago: boom"},
		{"stopped", false, rec(subscriber.StateStopped, 5*time.Second, false), dead + "; its last run (pid 42 on h) stopped 5s ago"},
		{"killed", false, rec(subscriber.StateStreaming, 4*time.Second, false), dead + "; its last run (pid 42 on h) was streaming when it stopped recording 4s ago, without recording its end (killed?)"},
	} {
		if got := notStreaming(c.active, c.rec); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

func TestWroteBetween(t *testing.T) {
	for _, c := range []struct {
		name          string
		before, after walMark
		want          bool
	}{
		{"nothing moved", walMark{100, "10:10:"}, walMark{100, "10:10:"}, false},
		{"server's own WAL (a running-transactions record)", walMark{100, "10:10:"}, walMark{200, "10:10:"}, false},
		{"an idle transaction holding an id", walMark{100, "9:10:9"}, walMark{200, "9:10:9"}, false},
		{"a transaction was given an id", walMark{100, "10:10:"}, walMark{200, "10:11:10"}, true},
		{"a transaction in progress ended", walMark{100, "9:10:9"}, walMark{200, "10:10:"}, true},
		{"an id given, no WAL yet", walMark{100, "10:10:"}, walMark{100, "10:11:10"}, false},
		{"a snapshot unreadable: the WAL moved", walMark{100, "?"}, walMark{200, "10:10:"}, true},
	} {
		if got := wroteBetween(c.before, c.after); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if n := writesNote(walMark{0x100, "10:10:"}, walMark{0x200, "10:12:"}); n != "the publisher wrote during the comparison (its WAL moved from 0/100 to 0/200): writes are running, so these results are not final; stop the writes, then run parapply cutover, which waits for parapply to apply everything up to the publisher's position before it compares" {
		t.Errorf("writesNote: %q", n)
	}
}
