package subscriber

import "testing"

// TestFitOrigins: a run's workers and stream sessions fit in the target's
// limit on active origins beside the reader's; workers give way first,
// down to one, then stream sessions.
func TestFitOrigins(t *testing.T) {
	tests := []struct {
		limit, workers, streams int
		w, st                   int
	}{
		{10, 0, 2, 0, 2},
		{10, 7, 2, 7, 2},
		{10, 8, 2, 7, 2},  // the defaults on a default target: one worker fewer
		{10, 16, 2, 7, 2}, // workers give way
		{4, 8, 2, 1, 2},
		{3, 8, 2, 1, 1}, // down to one worker, then streams
		{2, 8, 2, 1, 0},
		{1, 8, 2, 0, 0}, // the reader alone (its own origin fails if not even that)
		{0, 8, 2, 0, 0},
		{64, 64, 2, 61, 2},
		{3, 0, 5, 0, 2},
	}
	for _, tc := range tests {
		w, st := fitOrigins(tc.limit, tc.workers, tc.streams)
		if w != tc.w || st != tc.st {
			t.Errorf("fitOrigins(limit %d, workers %d, streams %d) = %d workers, %d streams; want %d, %d", tc.limit, tc.workers, tc.streams, w, st, tc.w, tc.st)
		}
		if w+st+1 > max(tc.limit, 1) {
			t.Errorf("fitOrigins(limit %d, ...) needs %d origins", tc.limit, w+st+1)
		}
	}
}
