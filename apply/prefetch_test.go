package apply

import (
	"testing"
	"time"
)

// TestShouldGrow checks when the prefetcher opens another connection: only
// while more key sets wait than there are connections, and then as the
// target's view of the prefetch sessions says (waiting on a disk or not),
// or, until anyone has looked, by the wall time of the last read.
func TestShouldGrow(t *testing.T) {
	slow, fast := 2*prefetchSlowRow, prefetchSlowRow/2
	tests := []struct {
		name          string
		queued, conns int
		perRow        time.Duration
		disk          int32
		want          bool
	}{
		{"no queue", 1, 1, slow, diskWaits, false},
		{"queue no longer than the connections", 4, 4, slow, diskWaits, false},
		{"queue and slow reads, nobody looked", 5, 4, slow, diskUnknown, true},
		{"queue and fast reads, nobody looked", 5, 4, fast, diskUnknown, false},
		{"slow reads on a busy CPU, sessions not waiting on a disk", 50, 1, slow, diskFast, false},
		{"sessions waiting on a disk", 50, 1, fast, diskWaits, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := shouldGrow(tc.queued, tc.conns, tc.perRow, tc.disk); got != tc.want {
				t.Errorf("shouldGrow(%d queued, %d conns, %v per row, disk %d) = %v, want %v", tc.queued, tc.conns, tc.perRow, tc.disk, got, tc.want)
			}
		})
	}
}
