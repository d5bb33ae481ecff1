package progress

import (
	"testing"

	"github.com/parapply/parapply"
)

func TestTrackerReleasesOnlyFlushed(t *testing.T) {
	tr := NewTracker(100)
	tr.Committed(200, 1000, parapply.ZeroTime)
	tr.Committed(300, 1100, parapply.ZeroTime)
	tr.Reached(350) // keepalive: durable with the commit before it
	tr.Committed(150, 1200, parapply.ZeroTime)
	steps := []struct {
		flush       parapply.LSN
		wantDurable parapply.LSN
		wantPending bool
	}{
		{999, 100, true},
		{1000, 200, true},
		{1099, 200, true},
		{1100, 350, false},
		{5000, 350, false},
	}
	for _, s := range steps {
		tr.Flushed(s.flush)
		applied, durable, _ := tr.Positions()
		if applied != 350 {
			t.Fatalf("applied = %v, want 350 (an older position must not move it back)", applied)
		}
		if durable != s.wantDurable || tr.NeedsFlush() != s.wantPending {
			t.Fatalf("after flush %d: durable %d pending %v, want %d %v", s.flush, durable, tr.NeedsFlush(), s.wantDurable, s.wantPending)
		}
	}
	tr.Committed(400, 1300, parapply.ZeroTime)
	tr.AllDurable()
	if _, d, _ := tr.Positions(); d != 400 || tr.NeedsFlush() {
		t.Fatalf("AllDurable: durable %v", d)
	}
}
