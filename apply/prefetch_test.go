package apply

import "testing"

// TestShouldGrow checks when the prefetcher opens another connection: only
// while more key sets wait than there are connections, and the target's
// view of the prefetch sessions says their reads wait on a disk (never told
// counts as not waiting).
func TestShouldGrow(t *testing.T) {
	tests := []struct {
		name          string
		queued, conns int
		waits         bool
		want          bool
	}{
		{"no queue", 1, 1, true, false},
		{"queue no longer than the connections", 4, 4, true, false},
		{"queue, sessions not waiting on a disk (a busy CPU, or never told)", 50, 1, false, false},
		{"queue, sessions waiting on a disk", 50, 1, true, true},
		{"one more set than connections, waiting", 5, 4, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := shouldGrow(tc.queued, tc.conns, tc.waits); got != tc.want {
				t.Errorf("shouldGrow(%d queued, %d conns, waits %v) = %v, want %v", tc.queued, tc.conns, tc.waits, got, tc.want)
			}
		})
	}
}

func TestReadAheadRows(t *testing.T) {
	for _, tc := range []struct{ pages, want int }{
		{0, 16},         // unknown: the least
		{256, 32},       // shared_buffers 2MB
		{16384, 2048},   // 128MB
		{1 << 20, 2048}, // 8GB: capped
	} {
		if got := readAheadRows(tc.pages); got != tc.want {
			t.Errorf("readAheadRows(%d) = %d, want %d", tc.pages, got, tc.want)
		}
	}
}
