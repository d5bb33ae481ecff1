package targetdb

import (
	"reflect"
	"strings"
	"testing"
)

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

// TestPlanOrigins: a run's sessions fit in the origin states other
// origins leave free; this slot's origins the run will not use are
// retired, the copy workers' always, and its kept workers' too when they
// leave no room for one copy worker.
func TestPlanOrigins(t *testing.T) {
	tests := []struct {
		name                      string
		limit                     int
		held, siblings            []string
		workers, streams, copiers int
		want                      OriginPlan
		err                       string
	}{
		{name: "empty target", limit: 10, workers: 4, streams: 2, copiers: 4,
			want: OriginPlan{Free: 10, Workers: 4, Streams: 2, Copiers: 4}},
		{name: "copy origins left by an earlier run are retired", limit: 10, workers: 4, streams: 2, copiers: 4,
			held: []string{"parapply_s", "parapply_s_c1", "parapply_s_c2", "parapply_s_w1"},
			want: OriginPlan{Free: 10, Workers: 4, Streams: 2, Copiers: 4, Retire: []string{"parapply_s_c1", "parapply_s_c2"}}},
		{name: "workers above the count are retired", limit: 10, workers: 2, streams: 1, copiers: 2,
			held: []string{"parapply_s", "parapply_s_w1", "parapply_s_w2", "parapply_s_w3", "parapply_s_s1", "parapply_s_s2", "parapply_s_s8"},
			want: OriginPlan{Free: 10, Workers: 2, Streams: 1, Copiers: 2, Retire: []string{"parapply_s_w3", "parapply_s_s2", "parapply_s_s8"}}},
		{name: "others' origins count against the limit", limit: 10, workers: 8, streams: 2, copiers: 4,
			held: []string{"pg_16384", "parapply_other", "parapply_other_w1", "parapply_s_w1"},
			want: OriginPlan{Free: 7, Workers: 4, Streams: 2, Copiers: 4, Others: []string{"pg_16384", "parapply_other", "parapply_other_w1"}}},
		{name: "a slot whose name extends ours is another's", limit: 10, workers: 1, streams: 0, copiers: 1,
			held: []string{"parapply_s_x", "parapply_s_w1x", "parapply_s_w01"},
			want: OriginPlan{Free: 7, Workers: 1, Streams: 0, Copiers: 1, Others: []string{"parapply_s_x", "parapply_s_w1x", "parapply_s_w01"}}},
		{name: "kept workers leave no room for the copy: retired too", limit: 4, workers: 2, streams: 1, copiers: 2,
			held: []string{"parapply_s", "parapply_s_w1", "parapply_s_w2", "parapply_s_s1", "x"},
			want: OriginPlan{Free: 3, Workers: 1, Streams: 1, Copiers: 2, Retire: []string{"parapply_s_w2", "parapply_s_w1", "parapply_s_s1"}, Others: []string{"x"}}},
		{name: "only the reader fits", limit: 3, workers: 4, streams: 2, copiers: 2,
			held: []string{"a", "b"},
			want: OriginPlan{Free: 1, Workers: 0, Streams: 0, Copiers: 0, Others: []string{"a", "b"}}},
		{name: "a longer slot's reader is not our worker", limit: 10, workers: 0, streams: 0, copiers: 1,
			held: []string{"parapply_s", "parapply_s_w1", "parapply_s_w2"}, siblings: []string{"s_w1", "t"},
			want: OriginPlan{Free: 9, Workers: 0, Streams: 0, Copiers: 1, Retire: []string{"parapply_s_w2"}, Others: []string{"parapply_s_w1"}}},
		{name: "nothing free", limit: 2, workers: 4, streams: 2, copiers: 2,
			held: []string{"a", "b", "parapply_s"}, err: "all 2 are held by other origins (a, b)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PlanOrigins(tc.limit, tc.held, "s", tc.siblings, tc.workers, tc.streams, tc.copiers)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
			if n := 1 + got.Workers + got.Streams; n > got.Free {
				t.Errorf("%d sessions streaming for %d free origin states", n, got.Free)
			}
		})
	}
}
