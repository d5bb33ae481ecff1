package subscriber

import (
	"math"
	"strings"
	"testing"
)

// TestTunerJudge feeds the tuner windows of samples (active, reads) and the
// rows changed in each, and checks where it stands after each: it
// moves to the pool after tuneToPoolWindows read-bound windows in a row,
// keeps the pool only if the trial after the move (a window to settle, then
// tuneTrialWindows) applies at least tuneTrialKeep of what the reader did,
// leaves it otherwise and keeps the reader for a cooldown, goes back after
// tuneBackWindows quiet windows in a row, and ignores windows with too
// little activity to tell.
func TestTunerJudge(t *testing.T) {
	type window struct {
		active, reads int
		rows          int64
		growing       bool // or, the same to the tuner, the loop has not moved yet
		samples       int  // 0: ten
	}
	rep := func(w window, n int) []window {
		out := make([]window, n)
		for i := range out {
			out[i] = w
		}
		return out
	}
	cat := func(ws ...[]window) []window {
		var out []window
		for _, w := range ws {
			out = append(out, w...)
		}
		return out
	}
	bools := func(parts ...any) []bool {
		var out []bool
		for i := 0; i < len(parts); i += 2 {
			out = append(out, rep2(parts[i].(bool), parts[i+1].(int))...)
		}
		return out
	}
	reading, cpu, idle, between := window{100, 80, 1000, false, 0}, window{100, 2, 1000, false, 0}, window{7, 7, 0, false, 0}, window{100, 20, 1000, false, 0}
	slowPool := window{100, 80, 950, false, 0} // the pool applies less than the reader
	growing := window{100, 80, 1000, true, 0}  // read-bound while the prefetcher opens connections
	// Until the loop has moved (it commits what it holds first), windows
	// count for nothing, least of all for the trial.
	moving := window{100, 80, 0, true, 0}
	// On a busy machine samples come late: a window of six busy samples
	// is judged like one of ten, one of too few samples is not.
	late := window{active: 6, reads: 6, rows: 1000, samples: 6}
	tooFew := window{active: 4, reads: 4, rows: 1000, samples: tuneMinSamples - 1}
	// The reader's statements run thousands of rows: a window may see
	// none of them end, and the pool's trial must not be judged against
	// two such windows alone.
	lumpy, burst, pool600 := window{100, 80, 0, false, 0}, window{100, 80, 2000, false, 0}, window{100, 80, 600, false, 0}
	alternate := func(a, b window, k int) []window {
		out := make([]window, k)
		for i := range out {
			out[i] = a
			if i%2 == 1 {
				out[i] = b
			}
		}
		return out
	}
	const trial = 1 + tuneTrialWindows // windows after the move until the trial is decided
	n := tuneToPoolWindows
	tests := []struct {
		name    string
		windows []window
		want    []bool // pooled after each window
	}{
		{"cpu-bound stays", rep(cpu, 20), bools(false, 20)},
		{"idle windows never decide", rep(idle, 20), bools(false, 20)},
		{"windows while the prefetcher grows are not judged", cat(rep(growing, n+4), rep(cpu, 2)), bools(false, n+6)},
		{"a growing window does not break a read-bound streak", cat(rep(reading, n-1), []window{growing, reading}), bools(false, n, true, 1)},
		{"the trial's baseline spans the reader's recent windows", cat(rep(cpu, 3), alternate(burst, lumpy, n-2), rep(lumpy, 2), rep(pool600, trial)),
			bools(false, n+2, true, trial, false, 1)},
		{"fewer read-bound windows in a row are not enough", cat(rep(reading, n-1), rep(cpu, 3), rep(reading, n-1)), bools(false, 2*n+1)},
		{"tuneToPoolWindows in a row move to the pool", rep(reading, n+1), bools(false, n-1, true, 2)},
		{"the trial starts when the loop has moved", cat(rep(reading, n), rep(moving, 5), rep(reading, trial+2)),
			bools(false, n-1, true, 1+5+trial+2)},
		{"late samples still judge", rep(late, n+1), bools(false, n-1, true, 2)},
		{"windows of too few samples are not judged", cat(rep(tooFew, n+4), rep(reading, n-1)), bools(false, 2*n+3)},
		{"an idle window between read-bound ones is skipped", cat(rep(reading, n-1), []window{idle, reading}), bools(false, n, true, 1)},
		{"a trial the pool passes keeps it", rep(reading, n+trial+5), bools(false, n-1, true, 1+trial+5)},
		{"shares between the thresholds hold either way", cat(rep(reading, n+trial), rep(between, 20)), bools(false, n-1, true, 1+trial+20)},
		{"back after tuneBackWindows quiet windows", cat(rep(reading, n+trial), rep(cpu, tuneBackWindows)),
			bools(false, n-1, true, 1+trial+tuneBackWindows-1, false, 1)},
		{"a read-bound window restarts the count", cat(rep(reading, n+trial), rep(cpu, tuneBackWindows-1), []window{reading}, rep(cpu, tuneBackWindows-1)),
			bools(false, n-1, true, 1+trial+2*tuneBackWindows-1)},
		{"a pool slower than the reader is left", cat(rep(reading, n), rep(slowPool, trial)),
			bools(false, n-1, true, trial, false, 1)},
		{"after a failed trial the reader keeps the load for the cooldown", cat(rep(reading, n), rep(slowPool, trial), rep(reading, tuneCooldown+n)),
			bools(false, n-1, true, trial, false, 1+tuneCooldown+n-1, true, 1)},
		{"a second failed trial doubles the cooldown", cat(rep(reading, n), rep(slowPool, trial), rep(reading, tuneCooldown+n), rep(slowPool, trial), rep(reading, 2*tuneCooldown+n)),
			bools(false, n-1, true, trial, false, 1+tuneCooldown+n-1, true, trial, false, 1+2*tuneCooldown+n-1, true, 1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.want) != len(tc.windows) {
				t.Fatalf("test has %d windows and %d wants", len(tc.windows), len(tc.want))
			}
			var tu tuner
			was := false
			for i, w := range tc.windows {
				// Spread the window's counts over its samples.
				k := w.samples
				if k == 0 {
					k = 10
				}
				for j := range k {
					a, r := w.active/k, w.reads/k
					if j == k-1 {
						a, r = w.active-(k-1)*(w.active/k), w.reads-(k-1)*(w.reads/k)
					}
					tu.add(a, r)
				}
				pooled, changed := tu.judge(w.rows, !w.growing)
				if pooled != tc.want[i] {
					t.Fatalf("window %d (%+v): pooled %v, want %v", i, w, pooled, tc.want[i])
				}
				if changed != (pooled != was) {
					t.Fatalf("window %d: changed %v, but pooled went from %v to %v", i, changed, was, pooled)
				}
				was = pooled
			}
		})
	}
}

func rep2(v bool, n int) []bool {
	out := make([]bool, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// TestReadWaitsShare checks the prefetch sessions' share: the share of
// their active samples spent waiting on a read, judged only once there
// were tuneMinSamples active samples, and reset with each window.
func TestReadWaitsShare(t *testing.T) {
	var w readWaits
	w.active, w.reads = tuneMinSamples-1, tuneMinSamples-1
	if _, ok := w.share(); ok {
		t.Fatalf("judged a window of %d active samples", tuneMinSamples-1)
	}
	w.active, w.reads = 20, 5
	if share, ok := w.share(); !ok || share != 0.25 {
		t.Fatalf("share %v (judged %v), want 0.25", share, ok)
	}
	if w != (readWaits{}) {
		t.Fatalf("window not reset: %+v", w)
	}
}

// TestDiskJudge feeds the prefetch sessions' read-wait shares and checks
// the verdict after each: waiting from one window at prefetchWaitShare,
// not waiting after prefetchFastWindows in a row under prefetchFastShare,
// and shares between the two changing nothing.
func TestDiskJudge(t *testing.T) {
	const w, f, mid = prefetchWaitShare, prefetchFastShare / 2, (prefetchWaitShare + prefetchFastShare) / 2
	k := prefetchFastWindows
	fasts := func(n int) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = f
		}
		return out
	}
	tests := []struct {
		name   string
		shares []float64
		// verdict after each window: 'w' waits, 'f' fast, '-' not known
		want string
	}{
		{"one waiting window decides", []float64{w}, "w"},
		{"fast windows in a row decide", fasts(k), strings.Repeat("-", k-1) + "f"},
		{"waiting, then fast in a row", append([]float64{w}, fasts(k)...), strings.Repeat("w", k) + "f"},
		{"a share between breaks the fast streak", append(append(fasts(k-1), mid), fasts(k)...), strings.Repeat("-", 2*k-1) + "f"},
		{"a fast verdict goes back at one waiting window", append(fasts(k), w, mid), strings.Repeat("-", k-1) + "fww"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var d diskJudge
			got, prev := "", byte('-')
			for i, s := range tc.shares {
				waits, changed := d.judge(s)
				v := byte('f')
				switch {
				case !d.known:
					v = '-'
				case waits:
					v = 'w'
				}
				if changed != (v != prev) {
					t.Fatalf("window %d: changed %v, but the verdict went from %c to %c", i, changed, prev, v)
				}
				got, prev = got+string(v), v
			}
			if got != tc.want {
				t.Errorf("verdicts %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDiskJudgeEarly checks that samples within a window already decide
// "waiting" once there are twice the samples a window needs at the
// threshold, and nothing else early.
func TestDiskJudgeEarly(t *testing.T) {
	n := 2 * tuneMinSamples
	atShare := int(math.Ceil(prefetchWaitShare * float64(n)))
	tests := []struct {
		name  string
		start diskJudge
		w     readWaits
		want  bool
	}{
		{"too few samples", diskJudge{known: true}, readWaits{n - 1, n - 1}, false},
		{"enough, at the threshold", diskJudge{known: true}, readWaits{n, atShare}, true},
		{"enough, under the threshold", diskJudge{known: true}, readWaits{n, atShare - 1}, false},
		{"already waiting", diskJudge{known: true, waits: true}, readWaits{n, n}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.start
			if got := d.early(tc.w); got != tc.want {
				t.Fatalf("early(%+v) = %v, want %v", tc.w, got, tc.want)
			}
			if tc.want && !(d.known && d.waits && d.fast == 0) {
				t.Fatalf("after an early verdict: %+v", d)
			}
		})
	}
}

// idleSamples is how many of the ticks 1..n an idleSampler samples when
// every sample finds nothing active.
func idleSamples(n int) int {
	return tuneIdleAfter + n/tuneIdleEvery - tuneIdleAfter/tuneIdleEvery
}

// TestIdleSampler: every tick is sampled while the watched sessions are
// active and for tuneIdleAfter idle samples after; then one tick in
// tuneIdleEvery, until a sample finds a session active again.
func TestIdleSampler(t *testing.T) {
	cases := []struct {
		name string
		// active gives, per tick, the sessions a sample there would find
		// active.
		active func(tick int) int
		// sampled is how many of the ticks 1..ticks are sampled.
		ticks, sampled int
	}{
		{name: "always active", active: func(int) int { return 2 }, ticks: 500, sampled: 500},
		// Ticks 1 to tuneIdleAfter, then the multiples of tuneIdleEvery.
		{name: "always idle", active: func(int) int { return 0 }, ticks: 500, sampled: idleSamples(500)},
		// Idle through tick 200, active from 201: the first sample after
		// it is the next multiple of tuneIdleEvery, and every tick from
		// there.
		{name: "load starts", active: func(tick int) int {
			if tick > 200 {
				return 1
			}
			return 0
		}, ticks: 300, sampled: idleSamples(200) + 1 + 300 - (200/tuneIdleEvery+1)*tuneIdleEvery},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var s idleSampler
			n := 0
			for tick := 1; tick <= c.ticks; tick++ {
				if !s.due() {
					continue
				}
				n++
				s.saw(c.active(tick))
			}
			if n != c.sampled {
				t.Errorf("%d of %d ticks sampled, want %d", n, c.ticks, c.sampled)
			}
		})
	}
}
