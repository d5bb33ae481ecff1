package apply

import (
	"fmt"
	"slices"
	"testing"
)

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

// TestReadAheadPieces checks how a run's keys are split into key sets for
// the prefetch connections: chunks of prefetchChunk (or prefetchPiece for
// workers), and, while statements wait for their rows under small round
// trips, at least four sets per round trip (never fewer than
// minPrefetchPiece keys), so that several connections read a statement's
// rows and the queue can outgrow the connections.
func TestReadAheadPieces(t *testing.T) {
	tests := []struct {
		name      string
		rows      int
		pieces    bool // workers (Config.PrefetchPieces)
		slow      bool // statements wait for their rows
		roundRows int
		want      []int
	}{
		{"cached reads: one chunk", 100, false, false, 32, []int{100}},
		{"cached reads: chunks", 300, false, false, 32, []int{128, 128, 44}},
		{"slow reads, round trips of 2048: chunks", 300, false, true, 2048, []int{128, 128, 44}},
		{"slow reads, round trips of 32 (shared_buffers 2MB)", 32, false, true, 32, []int{8, 8, 8, 8}},
		{"slow reads, round trips of 256", 256, false, true, 256, []int{64, 64, 64, 64}},
		{"slow reads, round trips of 16: the floor", 16, false, true, 16, []int{8, 8}},
		{"workers, cached reads", 70, true, false, 32, []int{32, 32, 6}},
		{"workers, slow reads, round trips of 32", 32, true, true, 32, []int{8, 8, 8, 8}},
		{"slow reads, no large table seen yet", 300, false, true, 0, []int{128, 128, 44}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := wideTable()
			tb.Large = true
			r := &run{cols: []int{0, 1}, split: 1, table: tb, kind: 'U', params: [][][]byte{nil, nil}}
			for i := range tc.rows {
				r.params[0] = append(r.params[0], fmt.Appendf(nil, "%d", i))
				r.params[1] = append(r.params[1], []byte("v"))
				r.rows++
			}
			pf := &prefetcher{jobs: make(chan prefetchJob, prefetchQueue), max: 1}
			ra := readAhead{on: true, pieces: tc.pieces, shared: &sharedPrefetcher{tried: true, pf: pf}, roundRows: tc.roundRows}
			ra.shared.slow.Store(tc.slow)
			ra.offer(r, true)
			close(pf.jobs)
			var got []int
			for j := range pf.jobs {
				got = append(got, j.rows)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("key sets of %v rows, want %v", got, tc.want)
			}
			if n := r.reading.Load(); n != int32(len(tc.want)) {
				t.Errorf("the run counts %d key sets being read, want %d", n, len(tc.want))
			}
		})
	}
}
