package main

import (
	"bufio"
	"encoding/json"
	"image/png"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestWritePlots draws the charts of results saved by --json and read back:
// per workload, time (or TPS) against worker count with the built-in and
// workers = auto as reference lines, and for live runs lag over time; a
// workload with no parapply worker count to plot, or no verified cell, gets
// no chart. Each chart is a 900x500 PNG with something drawn on it.
func TestWritePlots(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewSource(seed))
	lag := func(n int) []lagSample {
		var s []lagSample
		for i := 0; i < n; i++ {
			s = append(s, lagSample{T: float64(i) / 2, Lag: rng.Float64() * 3})
		}
		return s
	}
	tests := []struct {
		name  string
		cells []result
		want  []string
	}{
		{"catch-up", []result{
			{Workload: "update", Engine: "builtin", Verified: true, CatchupS: 9},
			{Workload: "update", Engine: "parapply", Workers: 0, Verified: true, CatchupS: 8},
			{Workload: "update", Engine: "parapply", Workers: 1, Verified: true, CatchupS: 6},
			{Workload: "update", Engine: "parapply", Workers: 4, Verified: true, CatchupS: 3 + rng.Float64()},
			{Workload: "update", Engine: "parapply", Workers: 8, Verified: false, Error: "verification: foo differs"},
			{Workload: "update", Engine: "parapply", Workers: autoWorkers, Verified: true, CatchupS: 3.5},
		}, []string{"update-workers.png"}},
		{"live", []result{
			{Workload: "tpcb", Engine: "builtin", Verified: true, SustainedTPS: 900, Lag: lag(200)},
			{Workload: "tpcb", Engine: "parapply", Workers: 2, Verified: true, SustainedTPS: 1500, Lag: lag(200)},
			{Workload: "tpcb", Engine: "parapply", Workers: 4, Verified: true, SustainedTPS: 1700, Lag: lag(10)},
		}, []string{"tpcb-lag.png", "tpcb-workers.png"}},
		{"references only", []result{
			{Workload: "point-update", Engine: "builtin", Verified: true, CatchupS: 4},
			{Workload: "point-update", Engine: "parapply", Workers: autoWorkers, Verified: true, CatchupS: 3},
		}, nil},
		{"nothing verified", []result{
			{Workload: "insert", Engine: "parapply", Workers: 2, Verified: false, Error: "timed out"},
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			saved := filepath.Join(dir, "results.jsonl")
			for _, r := range tc.cells {
				if err := appendJSON(saved, r); err != nil {
					t.Fatal(err)
				}
			}
			rs := readResults(t, saved)
			plots := filepath.Join(dir, "plots")
			if err := writePlots(plots, rs); err != nil {
				t.Fatal(err)
			}
			entries, err := os.ReadDir(plots)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range entries {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("charts %v, want %v", got, tc.want)
			}
			for _, name := range got {
				checkChart(t, filepath.Join(plots, name))
			}
		})
	}
}

// readResults reads the records --json appended to path.
func readResults(t *testing.T, path string) []result {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rs []result
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		rs = append(rs, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rs
}

// checkChart decodes the PNG at path and checks its size and that lines
// were drawn: several colours, not a blank or one-colour image.
func checkChart(t *testing.T, path string) {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() != 900 || b.Dy() != 500 {
		t.Fatalf("%s is %dx%d, want 900x500", path, b.Dx(), b.Dy())
	}
	colours := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, a := img.At(x, y).RGBA()
			colours[[4]uint32{r >> 8, g >> 8, bl >> 8, a >> 8}] = true
		}
	}
	if len(colours) < 4 {
		t.Fatalf("%s has %d colours: nothing drawn", path, len(colours))
	}
}
