package chart

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// workerChart is a catch-up-time chart like the benchmark produces.
func workerChart() Chart {
	return Chart{
		Title:  "Catch-up time vs workers",
		XLabel: "workers",
		YLabel: "catch-up time (s)",
		Series: []Series{
			{Name: "parapply", X: []float64{1, 2, 4, 8, 16}, Y: []float64{120, 64, 35, 21, 18}},
			{Name: "engine-b", X: []float64{1, 2, 4, 8, 16}, Y: []float64{118, 80, 60, 55, 54}},
			{Name: "engine-c", X: []float64{1, 2, 4, 8, 16}, Y: []float64{130, 70, 45, 40, 41}},
		},
		RefLines: []RefLine{{Name: "built-in subscription", Y: 110}},
	}
}

// lagChart is a replication-lag-over-time chart like the benchmark produces.
func lagChart() Chart {
	var x, y1, y2 []float64
	for i := 0; i <= 300; i++ {
		t := float64(i)
		x = append(x, t)
		y1 = append(y1, 0.5+0.4*math.Sin(t/15)+t/200)
		y2 = append(y2, 1.5+t/60+0.3*math.Sin(t/7))
	}
	return Chart{
		Title:  "Replication lag (live run)",
		XLabel: "time (s)",
		YLabel: "lag (s)",
		Series: []Series{
			{Name: "parapply", X: x, Y: y1},
			{Name: "built-in subscription", X: x, Y: y2},
		},
	}
}

func TestRender(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name  string
		chart Chart
		// wantW, wantH are the expected image size.
		wantW, wantH int
	}{
		{"workers with ref line", workerChart(), 900, 500},
		{"lag over time", lagChart(), 900, 500},
		{"custom size", func() Chart { c := workerChart(); c.Width, c.Height = 640, 360; return c }(), 640, 360},
		{"only width set", func() Chart { c := workerChart(); c.Width = 700; return c }(), 700, 500},
		{"smallest size", func() Chart { c := workerChart(); c.Width, c.Height = minWidth, minHeight; return c }(), minWidth, minHeight},
		{"single point", Chart{Series: []Series{{Name: "one", X: []float64{4}, Y: []float64{2.5}}}}, 900, 500},
		{"single point at origin", Chart{Series: []Series{{Name: "zero", X: []float64{0}, Y: []float64{0}}}}, 900, 500},
		{"one X value", Chart{Series: []Series{{Name: "same x", X: []float64{8, 8, 8}, Y: []float64{1, 2, 3}}}}, 900, 500},
		{"all zero Y", Chart{Series: []Series{{Name: "flat", X: []float64{1, 2, 3}, Y: []float64{0, 0, 0}}}}, 900, 500},
		{"NaN values skipped", Chart{Series: []Series{
			{Name: "gappy", X: []float64{1, 2, nan, 4, 5}, Y: []float64{1, nan, 3, 4, math.Inf(1)}},
			{Name: "all nan", X: []float64{1, 2}, Y: []float64{nan, nan}},
		}}, 900, 500},
		{"empty series beside data", Chart{Series: []Series{{Name: "empty"}, {Name: "data", X: []float64{1, 2}, Y: []float64{3, 4}}}}, 900, 500},
		{"NaN ref line ignored", Chart{Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{3, 4}}},
			RefLines: []RefLine{{Name: "nan", Y: nan}, {Name: "ok", Y: 5}}}, 900, 500},
		{"ref line above data", Chart{Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{3, 4}}},
			RefLines: []RefLine{{Name: "high", Y: 1000}}}, 900, 500},
		{"negative Y", Chart{Series: []Series{{Name: "neg", X: []float64{0, 1, 2}, Y: []float64{-3, 2, -1}}}}, 900, 500},
		{"tiny values", Chart{Series: []Series{{Name: "tiny", X: []float64{0, 1e-3}, Y: []float64{1e-6, 3e-6}}}}, 900, 500},
		{"huge values", Chart{Series: []Series{{Name: "huge", X: []float64{0, 1e9}, Y: []float64{1e12, 3e12}}}}, 900, 500},
		{"many series, long names, no labels", func() Chart {
			var c Chart
			for i := 0; i < 12; i++ {
				c.Series = append(c.Series, Series{
					Name: strings.Repeat("very long engine name ", 3),
					X:    []float64{1, 2, 3}, Y: []float64{float64(i), float64(i + 1), float64(i)},
				})
			}
			return c
		}(), 900, 500},
		{"unnamed series", Chart{Series: []Series{{X: []float64{1, 2}, Y: []float64{1, 2}}}}, 900, 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := tt.chart.EncodePNG()
			if err != nil {
				t.Fatalf("EncodePNG: %v", err)
			}
			img, err := png.Decode(bytes.NewReader(data))
			if err != nil {
				t.Fatalf("decode PNG: %v", err)
			}
			if b := img.Bounds(); b.Dx() != tt.wantW || b.Dy() != tt.wantH {
				t.Fatalf("size = %dx%d, want %dx%d", b.Dx(), b.Dy(), tt.wantW, tt.wantH)
			}

			// Every series with a finite point must leave pixels of its colour
			// inside the plot area (the legend is outside it).
			rgba, l, err := tt.chart.render()
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			for i, s := range tt.chart.Series {
				if !hasFinite(s) {
					continue
				}
				col := seriesColors[i%len(seriesColors)]
				if i >= len(seriesColors) {
					continue // colour reused; a later series may cover it
				}
				if n := countColor(rgba, l.plot.Inset(-markerHalf), col); n == 0 {
					t.Errorf("series %d (%q): no pixels of colour %v in the plot area", i, s.Name, col)
				}
			}
			k := 0
			for _, r := range tt.chart.RefLines {
				if !finite(r.Y) {
					continue
				}
				col := refColors[k%len(refColors)]
				k++
				if n := countColor(rgba, l.plot, col); n == 0 {
					t.Errorf("ref line %q: no pixels of colour %v in the plot area", r.Name, col)
				}
			}
			// Y axis starts at 0 when all data is non-negative.
			if l.yLo > 0 {
				t.Errorf("yLo = %v, want <= 0", l.yLo)
			}
		})
	}
}

func TestLinesDrawn(t *testing.T) {
	// A 2-point line spanning the plot paints many more pixels than its two
	// markers, proving the segment itself is drawn.
	c := Chart{Series: []Series{{Name: "line", X: []float64{0, 10}, Y: []float64{0, 10}}}}
	img, l, err := c.render()
	if err != nil {
		t.Fatal(err)
	}
	n := countColor(img, l.plot, seriesColors[0])
	markers := 2 * (2 * markerHalf) * (2 * markerHalf)
	if n < markers+l.plot.Dx() {
		t.Errorf("only %d line pixels, want at least %d", n, markers+l.plot.Dx())
	}
}

func TestRenderErrors(t *testing.T) {
	nan := math.NaN()
	tests := []struct {
		name    string
		chart   Chart
		wantErr string
	}{
		{"no series", Chart{Title: "empty"}, "no series"},
		{"no series but ref line", Chart{RefLines: []RefLine{{Name: "r", Y: 1}}}, "no series"},
		{"series without points", Chart{Series: []Series{{Name: "a"}, {Name: "b"}}}, "no finite data points"},
		{"only NaN", Chart{Series: []Series{{Name: "a", X: []float64{nan}, Y: []float64{1}}}}, "no finite data points"},
		{"length mismatch", Chart{Series: []Series{{Name: "bad", X: []float64{1, 2}, Y: []float64{1}}}}, `series 0 ("bad") has 2 X values but 1 Y values`},
		{"too small", Chart{Width: 50, Height: 50, Series: []Series{{X: []float64{1}, Y: []float64{1}}}}, "out of range"},
		{"negative size", Chart{Width: -1, Series: []Series{{X: []float64{1}, Y: []float64{1}}}}, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img, err := tt.chart.Render()
			if err == nil {
				t.Fatalf("Render succeeded, want error containing %q", tt.wantErr)
			}
			if img != nil {
				t.Errorf("Render returned an image with error %v", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %q, want it to contain %q", err, tt.wantErr)
			}
			if err := tt.chart.WritePNG(filepath.Join(t.TempDir(), "x.png")); err == nil {
				t.Errorf("WritePNG succeeded, want error")
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	for _, c := range []Chart{workerChart(), lagChart()} {
		a, err := c.EncodePNG()
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.EncodePNG()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%q: two renders differ", c.Title)
		}
	}
}

func TestWritePNG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "workers.png")
	c := workerChart()
	if err := c.WritePNG(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("decode %s: %v", path, err)
	}
	if b := img.Bounds(); b.Dx() != DefaultWidth || b.Dy() != DefaultHeight {
		t.Errorf("size = %v, want %dx%d", b, DefaultWidth, DefaultHeight)
	}
	want, err := c.EncodePNG()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("file bytes differ from EncodePNG")
	}
	if err := c.WritePNG(filepath.Join(t.TempDir(), "missing-dir", "x.png")); err == nil {
		t.Errorf("WritePNG into a missing directory succeeded")
	}
}

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		raw, want float64
	}{
		{0.7, 1}, {1, 1}, {1.1, 2}, {2, 2}, {3, 5}, {5, 5}, {6, 10}, {17, 20}, {0.013, 0.02}, {450, 500},
	}
	for _, tt := range tests {
		if got := niceStep(tt.raw); math.Abs(got-tt.want) > tt.want*1e-9 {
			t.Errorf("niceStep(%v) = %v, want %v", tt.raw, got, tt.want)
		}
	}
	got := ticks(-0.3, 1.05, 0.5)
	want := []float64{0, 0.5, 1}
	if len(got) != len(want) {
		t.Fatalf("ticks = %v, want %v", got, want)
	}
	for i := range got {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Errorf("ticks = %v, want %v", got, want)
		}
	}
	fmts := []struct {
		v, step float64
		want    string
	}{
		{0, 1, "0"}, {20, 5, "20"}, {0.5, 0.1, "0.5"}, {0.25, 0.05, "0.25"}, {-0.0000001, 0.1, "0"}, {1.5e12, 5e11, "1.5e+12"},
	}
	for _, f := range fmts {
		if got := formatTick(f.v, f.step); got != f.want {
			t.Errorf("formatTick(%v, %v) = %q, want %q", f.v, f.step, got, f.want)
		}
	}
}

func hasFinite(s Series) bool {
	for i := range s.X {
		if finite(s.X[i]) && finite(s.Y[i]) {
			return true
		}
	}
	return false
}

// countColor counts pixels of exactly colour c within r.
func countColor(img *image.RGBA, r image.Rectangle, c color.RGBA) int {
	r = r.Intersect(img.Bounds())
	n := 0
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if img.RGBAAt(x, y) == c {
				n++
			}
		}
	}
	return n
}
