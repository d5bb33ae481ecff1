package subscriber

import "testing"

// TestTunerJudge feeds the tuner windows of samples (active, reads) and
// checks where it stands after each: it moves to the pool after
// tuneToPoolWindows read-bound windows in a row, back after
// tuneBackWindows quiet ones in a row, and ignores windows with too little
// activity to tell.
func TestTunerJudge(t *testing.T) {
	type window struct{ active, reads int }
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
	reading, cpu, idle, between := window{100, 80}, window{100, 2}, window{5, 5}, window{100, 20}
	tests := []struct {
		name    string
		windows []window
		want    []bool // pooled after each window
	}{
		{"cpu-bound stays", rep(cpu, 20), make([]bool, 20)},
		{"idle windows never decide", rep(idle, 20), make([]bool, 20)},
		{"one read-bound window is not enough", cat([]window{reading}, rep(cpu, 3)), []bool{false, false, false, false}},
		{"two in a row move to the pool", rep(reading, 3), []bool{false, true, true}},
		{"an idle window between two read-bound ones is skipped", []window{reading, idle, reading}, []bool{false, false, true}},
		{"shares between the thresholds hold either way", cat(rep(reading, 2), rep(between, 20)), append([]bool{false}, rep2(true, 21)...)},
		{"back after tuneBackWindows quiet windows", cat(rep(reading, 2), rep(cpu, tuneBackWindows)),
			append(append([]bool{false}, rep2(true, tuneBackWindows)...), false)},
		{"a read-bound window restarts the count", cat(rep(reading, 2), rep(cpu, tuneBackWindows-1), []window{reading}, rep(cpu, tuneBackWindows-1)),
			append([]bool{false}, rep2(true, 2*tuneBackWindows)...)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.want) != len(tc.windows) {
				t.Fatalf("test has %d windows and %d wants", len(tc.windows), len(tc.want))
			}
			var tu tuner
			was := false
			for i, w := range tc.windows {
				// Spread the window's counts over several samples.
				for j := range 4 {
					a, r := w.active/4, w.reads/4
					if j == 3 {
						a, r = w.active-3*(w.active/4), w.reads-3*(w.reads/4)
					}
					tu.add(a, r)
				}
				pooled, changed := tu.judge()
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
