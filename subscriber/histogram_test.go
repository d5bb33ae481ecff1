package subscriber

import (
	"sync"
	"sync/atomic"
	"testing"
)

// TestHistogramSnapshotIsConsistent reads the commit delay histogram while
// workers observe into it, as Status does while commits are recorded: every
// snapshot's count, sum and buckets must describe the same observations.
// Each value observed is 1, so the sum is the count, buckets below 1 are
// empty and the others hold every observation.
func TestHistogramSnapshotIsConsistent(t *testing.T) {
	h := NewHistogram(DelayBuckets)
	var stop atomic.Bool
	var observed atomic.Uint64
	var wg sync.WaitGroup
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				h.Observe(1)
				observed.Add(1)
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	const snapshots = 20000
	for n := 0; n < snapshots; n++ {
		s := h.Snapshot()
		if s.Sum != float64(s.Count) {
			t.Fatalf("snapshot %d: count %d but sum %v (each observation is 1)", n, s.Count, s.Sum)
		}
		for i, b := range s.Bounds {
			want := s.Count
			if b < 1 {
				want = 0
			}
			if s.Counts[i] != want {
				t.Fatalf("snapshot %d: bucket le=%v holds %d, want %d of %d observations of 1", n, b, s.Counts[i], want, s.Count)
			}
		}
	}
	stop.Store(true)
	wg.Wait()
	if s := h.Snapshot(); s.Count != observed.Load() || s.Sum != float64(s.Count) {
		t.Fatalf("after %d observations: count %d, sum %v", observed.Load(), s.Count, s.Sum)
	}
}
