package subscriber

import (
	"testing"
	"time"
)

func TestBacklogJudge(t *testing.T) {
	type sample struct {
		at, lag time.Duration // at: since the first sample
	}
	const ms = time.Millisecond
	cases := []struct {
		name    string
		samples []sample
		behind  []bool // the verdict after each sample
		changed []int  // the samples whose window changed it
	}{
		{
			name:    "a run starts behind and stays so while the lag is long",
			samples: []sample{{0, 20 * time.Second}, {100 * ms, 19 * time.Second}, {600 * ms, 10 * time.Second}, {1200 * ms, 2 * time.Second}},
			behind:  []bool{true, true, true, true},
		},
		{
			name:    "caught up at a window's end with the lag short",
			samples: []sample{{0, 5 * time.Second}, {100 * ms, 3 * time.Second}, {500 * ms, 20 * ms}},
			behind:  []bool{true, true, false},
			changed: []int{2},
		},
		{
			name:    "judged on the window's last lag, not its first",
			samples: []sample{{0, 20 * ms}, {400 * ms, 3 * time.Second}, {500 * ms, 2 * time.Second}},
			behind:  []bool{true, true, true},
		},
		{
			name: "behind again once a window ends two seconds or more behind",
			samples: []sample{{0, 10 * ms}, {500 * ms, 10 * ms},
				{600 * ms, 1800 * ms}, {1000 * ms, 1900 * ms}, {1200 * ms, 2 * time.Second}, {1500 * ms, 2200 * ms}},
			behind:  []bool{true, false, false, false, false, true},
			changed: []int{1, 5},
		},
		{
			name:    "a lag between the thresholds keeps the verdict",
			samples: []sample{{0, 1500 * ms}, {500 * ms, 1500 * ms}, {1000 * ms, 10 * ms}, {1500 * ms, 1500 * ms}, {2000 * ms, 1999 * ms}},
			behind:  []bool{true, true, false, false, false},
			changed: []int{2},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var j backlogJudge
			start := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
			for i, s := range tc.samples {
				behind, changed := j.note(s.lag, start.Add(s.at))
				wantChanged := false
				for _, c := range tc.changed {
					wantChanged = wantChanged || c == i
				}
				if behind != tc.behind[i] || changed != wantChanged {
					t.Fatalf("sample %d (at %s, lag %s): behind %v changed %v, want %v %v", i, s.at, s.lag, behind, changed, tc.behind[i], wantChanged)
				}
			}
		})
	}
}
