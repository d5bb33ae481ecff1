package apply

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"
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

// TestMayOpen checks how the prefetcher grows: up to prefetchOpening
// connections opening at once, never past max counting those opening.
func TestMayOpen(t *testing.T) {
	tests := []struct {
		name                string
		conns, opening, max int
		want                bool
	}{
		{"one open, none opening", 1, 0, 16, true},
		{"several opening at once", 1, prefetchOpening - 1, 16, true},
		{"prefetchOpening opening", 1, prefetchOpening, 16, false},
		{"at max", 16, 0, 16, false},
		{"opening would reach max", 14, 2, 16, false},
		{"one below max counting those opening", 13, 2, 16, true},
		{"max one", 1, 0, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := mayOpen(tc.conns, tc.opening, tc.max); got != tc.want {
				t.Errorf("mayOpen(%d open, %d opening, max %d) = %v, want %v", tc.conns, tc.opening, tc.max, got, tc.want)
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
// workers), and, while statements wait for their rows, two sets per
// prefetch connection and round trip (never fewer than minPrefetchPiece
// keys), so that every connection reads some of a statement's rows and the
// queue can outgrow the connections.
func TestReadAheadPieces(t *testing.T) {
	tests := []struct {
		name      string
		rows      int
		pieces    bool // workers (Config.PrefetchPieces)
		slow      bool // statements wait for their rows
		roundRows int
		conns     int // prefetch_connections
		want      []int
	}{
		{"cached reads: one chunk", 100, false, false, 32, 16, []int{100}},
		{"cached reads: chunks", 300, false, false, 32, 16, []int{128, 128, 44}},
		{"cached reads, round trips of 2048: chunks", 300, false, false, 2048, 16, []int{128, 128, 44}},
		{"slow reads, round trips of 2048, 16 connections", 300, false, true, 2048, 16, []int{64, 64, 64, 64, 44}},
		{"slow reads, round trips of 2048, 32 connections", 100, false, true, 2048, 32, []int{32, 32, 32, 4}},
		{"slow reads, round trips of 2048, 4 connections: chunks", 300, false, true, 2048, 4, []int{128, 128, 44}},
		{"slow reads, round trips of 32 (shared_buffers 2MB)", 32, false, true, 32, 16, []int{8, 8, 8, 8}},
		{"slow reads, round trips of 256, 2 connections", 256, false, true, 256, 2, []int{64, 64, 64, 64}},
		{"slow reads, round trips of 16: the floor", 16, false, true, 16, 16, []int{8, 8}},
		{"workers, cached reads", 70, true, false, 32, 16, []int{32, 32, 6}},
		{"workers, slow reads, round trips of 2048", 70, true, true, 2048, 16, []int{32, 32, 6}},
		{"workers, slow reads, round trips of 32", 32, true, true, 32, 16, []int{8, 8, 8, 8}},
		{"slow reads, no large table seen yet", 300, false, true, 0, 16, []int{128, 128, 44}},
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
			ra := readAhead{on: true, pieces: tc.pieces, shared: &sharedPrefetcher{tried: true, pf: pf, conns: tc.conns}, roundRows: tc.roundRows}
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
			if n := r.reading.count(); n != int32(len(tc.want)) {
				t.Errorf("the run counts %d key sets being read, want %d", n, len(tc.want))
			}
		})
	}
}

// TestAwait checks the wait of a statement for its rows to be read ahead:
// none while reads do not wait on a disk or nothing is pending; else until
// the last key set of its runs is read, the context ends, or
// readAheadWaitMax passes, the time waited counted in each case.
func TestAwait(t *testing.T) {
	const release = 30 * time.Millisecond
	tests := []struct {
		name    string
		slow    bool
		pending []int32 // key sets not read yet, per run
		finish  bool    // the key sets are read after release
		cancel  bool    // the context ends after release
		atLeast time.Duration
		atMost  time.Duration // 0: no wait at all
	}{
		{"cached reads do not wait", false, []int32{2}, false, false, 0, 0},
		{"nothing pending", true, []int32{0, 0}, false, false, 0, 0},
		{"until the last key set is read", true, []int32{1, 0, 2}, true, false, release, readAheadWaitMax / 2},
		{"until the context ends", true, []int32{1}, false, true, release, readAheadWaitMax / 2},
		{"at most readAheadWaitMax", true, []int32{1}, false, false, readAheadWaitMax, 3 * readAheadWaitMax},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ra := readAhead{on: true, shared: &sharedPrefetcher{}}
			ra.shared.slow.Store(tc.slow)
			ops := []op{{sql: "BEGIN"}}
			var runs []*run
			for _, n := range tc.pending {
				r := &run{}
				r.reading.add(n)
				runs = append(runs, r)
				ops = append(ops, op{run: r})
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.finish || tc.cancel {
				go func() {
					time.Sleep(release)
					if tc.cancel {
						cancel()
						return
					}
					for i, r := range runs {
						for range tc.pending[i] {
							j := prefetchJob{pending: &r.reading}
							j.finished()
						}
					}
				}()
			}
			var waited atomic.Int64
			began := time.Now()
			ra.await(ctx, ops, &waited)
			took, w := time.Since(began), time.Duration(waited.Load())
			if tc.atMost == 0 {
				if w != 0 {
					t.Errorf("waited %v, want no wait", w)
				}
				return
			}
			if took < tc.atLeast || took > tc.atMost {
				t.Errorf("await took %v, want between %v and %v", took, tc.atLeast, tc.atMost)
			}
			if w < tc.atLeast || w > took {
				t.Errorf("waited %v counted, want between %v and %v", w, tc.atLeast, took)
			}
		})
	}
}

// TestPendingReads checks that a waiter is woken when the count falls to
// zero, and that a count rising again gives a new wait.
func TestPendingReads(t *testing.T) {
	var p pendingReads
	if p.done() != nil {
		t.Fatal("done() with nothing pending is not nil")
	}
	p.add(2)
	first := p.done()
	p.add(-1)
	select {
	case <-first:
		t.Fatal("woken with a key set still pending")
	default:
	}
	p.add(-1)
	select {
	case <-first:
	default:
		t.Fatal("not woken once no key set is pending")
	}
	p.add(1)
	second := p.done()
	select {
	case <-second:
		t.Fatal("a count risen again gives a closed channel")
	default:
	}
	if n := p.count(); n != 1 {
		t.Errorf("count() = %d, want 1", n)
	}
}

// TestAheadJudge checks the verdict on sample key sets, each read twice:
// none before a window of aheadWindow samples; then, of the window's
// shortest first and second reads per row, reading ahead while the first
// is aheadPays times the second or more (pages from a slow disk), resting
// below (pages already in memory, however much a busy CPU stretches single
// reads); each window judged on its own.
func TestAheadJudge(t *testing.T) {
	type sample struct {
		first, again time.Duration
		rows         int
	}
	rep := func(n int, s sample) []sample { return slices.Repeat([]sample{s}, n) }
	us := time.Microsecond
	slow, cached := sample{14000 * us, 600 * us, 128}, sample{800 * us, 320 * us, 128}
	tests := []struct {
		name    string
		samples []sample
		want    []string // the verdicts, in order: "ahead" or "rest"
	}{
		{"no verdict before a full window", rep(aheadWindow-1, slow), nil},
		{"slow disk: read ahead", rep(aheadWindow, slow), []string{"ahead"}},
		{"operating system's cache: rest", rep(aheadWindow, cached), []string{"rest"}},
		{"exactly aheadPays times: read ahead", rep(aheadWindow, sample{aheadPays * 400 * us, 400 * us, 128}), []string{"ahead"}},
		// Point-update on two overloaded cores (first, again), 128 rows
		// a set: summed, the first reads would pass for a slow disk.
		{"a busy CPU stretches single reads: rest", []sample{
			{21900 * us, 4700 * us, 128}, {22300 * us, 1190 * us, 128}, {96000 * us, 7400 * us, 128}, {4100 * us, 7900 * us, 128},
			{7500 * us, 8400 * us, 128}, {10000 * us, 1960 * us, 128}, {2000 * us, 8700 * us, 128}, {15000 * us, 560 * us, 128},
		}, []string{"rest"}},
		{"slow disk, one second read stretched", append(rep(aheadWindow-1, slow), sample{14000 * us, 9000 * us, 128}), []string{"ahead"}},
		{"per row: a short set is not a fast one", append(rep(aheadWindow-1, slow), sample{1800 * us, 80 * us, 16}), []string{"ahead"}},
		{"each window on its own", append(rep(aheadWindow, cached), rep(aheadWindow, slow)...), []string{"rest", "ahead"}},
		{"no row (a set cannot be empty; no division by zero)", rep(aheadWindow, sample{800 * us, 320 * us, 0}), []string{"rest"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var j aheadJudge
			var got []string
			for _, s := range tc.samples {
				resting, judged := j.add(s.first, s.again, s.rows)
				switch {
				case !judged:
				case resting:
					got = append(got, "rest")
				default:
					got = append(got, "ahead")
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("verdicts %v, want %v", got, tc.want)
			}
		})
	}
}

// TestReadAheadRests checks which key sets are offered: every one, each a
// sample, before the first verdict; every one while the prefetcher reads
// ahead, one in aheadSampleEvery flagged as a sample; only the samples, one
// in aheadSampleResting, while it rests.
func TestReadAheadRests(t *testing.T) {
	const sets = 2*aheadSampleResting + 3
	every := func(n int) []bool {
		w := make([]bool, sets)
		for i := n - 1; i < sets; i += n {
			w[i] = true
		}
		return w
	}
	tests := []struct {
		name            string
		judged, resting bool
		want            []bool // offered key sets: whether each is a sample
	}{
		{"not judged yet: every set a sample", false, false, every(1)},
		{"reading ahead", true, false, every(aheadSampleEvery)},
		{"resting: the samples alone", true, true, []bool{true, true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := wideTable()
			tb.Large = true
			r := &run{cols: []int{0, 1}, split: 1, table: tb, kind: 'U', params: [][][]byte{nil, nil}}
			for i := range sets * prefetchChunk {
				r.params[0] = append(r.params[0], fmt.Appendf(nil, "%d", i))
				r.params[1] = append(r.params[1], []byte("v"))
				r.rows++
			}
			pf := &prefetcher{jobs: make(chan prefetchJob, prefetchQueue), max: 1}
			pf.judged.Store(tc.judged)
			pf.resting.Store(tc.resting)
			ra := readAhead{on: true, shared: &sharedPrefetcher{tried: true, pf: pf}}
			ra.offer(r, true)
			close(pf.jobs)
			var got []bool
			for j := range pf.jobs {
				got = append(got, j.sample)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("offered key sets (sample or not) %v, want %v", got, tc.want)
			}
			if r.ahead != r.rows {
				t.Errorf("%d of %d rows marked offered: sets left out while resting must not be offered again", r.ahead, r.rows)
			}
		})
	}
}

// TestRoundFull checks when a round trip on a large table is cut at
// readAheadRows: only while the tuner says reads wait on a disk; not
// before its first verdict (cutting then was tried: slow-read-cold at
// scale 1 took 8.96 s with it against 8.77 without, medians of 3 in one
// invocation), once told they do not wait, while nothing is read ahead, or
// without read-ahead.
func TestRoundFull(t *testing.T) {
	const round = 2048
	for _, tc := range []struct {
		name     string
		on, idle bool
		verdicts []DiskWaits // given in order to the applier (see Tune)
		full     bool        // a round trip of round rows is full
	}{
		{"no verdict yet", true, false, nil, false},
		{"reads wait", true, false, []DiskWaits{DiskWaiting}, true},
		{"unjudged keeps waiting", true, false, []DiskWaits{DiskWaiting, DiskUnjudged}, true},
		{"reads do not wait", true, false, []DiskWaits{DiskWaiting, DiskFast}, false},
		{"nothing to read ahead", true, true, []DiskWaits{DiskWaiting}, false},
		{"read-ahead off", false, false, []DiskWaits{DiskWaiting}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newApplier(Config{Prefetch: tc.on}, nil)
			if tc.on {
				a.readAhead.open(nil, 4, func(string) {})
			}
			a.readAhead.roundRows = round
			a.ReadAheadWanted(!tc.idle)
			for _, v := range tc.verdicts {
				a.Tune(v, nil)
			}
			if got := a.readAhead.roundFull(round); got != tc.full {
				t.Errorf("roundFull(%d) = %v, want %v", round, got, tc.full)
			}
			if a.readAhead.roundFull(round - 1) {
				t.Errorf("roundFull(%d) = true below the round's rows", round-1)
			}
		})
	}
}
