package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// writePlots draws, per workload, parapply's catch-up time against its
// worker count with the built-in's time as a reference line, and for live
// runs the lag over time of every engine.
func writePlots(dir string, rs []result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	order, byWorkload := groupByWorkload(rs)
	for _, w := range order {
		cells := byWorkload[w]
		if c := workersChart(w, cells); len(c.Series) > 0 {
			if err := c.writePNG(filepath.Join(dir, w+"-workers.png")); err != nil {
				return fmt.Errorf("plot %s: %w", w, err)
			}
		}
		if workloads[w].method != methodLive {
			continue
		}
		if lag := lagChart(w, cells); len(lag.Series) > 0 {
			if err := lag.writePNG(filepath.Join(dir, w+"-lag.png")); err != nil {
				return fmt.Errorf("plot %s lag: %w", w, err)
			}
		}
	}
	return nil
}

// groupByWorkload returns the results by workload, and the workloads in
// the order they first appear.
func groupByWorkload(rs []result) ([]string, map[string][]result) {
	byWorkload := map[string][]result{}
	var order []string
	for _, r := range rs {
		if _, ok := byWorkload[r.Workload]; !ok {
			order = append(order, r.Workload)
		}
		byWorkload[r.Workload] = append(byWorkload[r.Workload], r)
	}
	return order, byWorkload
}

// workersChart is workload w's catch-up time (sustained TPS for live runs)
// by parapply worker count, the built-in's and workers = auto's as
// reference lines; it has no series when no fixed worker count verified.
func workersChart(w string, cells []result) lineChart {
	live := workloads[w].method == methodLive
	c := lineChart{Title: w + ": catch-up time by parapply worker count", XLabel: "workers", YLabel: "seconds"}
	if live {
		c.Title, c.YLabel = w+": sustained TPS by parapply worker count", "transactions per second"
	}
	s := series{Name: "parapply"}
	for _, r := range cells {
		if !r.Verified {
			continue
		}
		y := r.CatchupS
		if live {
			y = r.SustainedTPS
		}
		switch {
		case r.Workers == autoWorkers:
			c.RefLines = append(c.RefLines, refLine{Name: "parapply, workers = auto", Y: y})
		case r.Engine == "builtin":
			c.RefLines = append(c.RefLines, refLine{Name: "built-in subscription", Y: y})
		default:
			s.X, s.Y = append(s.X, float64(r.Workers)), append(s.Y, y)
		}
	}
	if len(s.X) > 0 {
		c.Series, c.XTicks = append(c.Series, s), s.X
	}
	return c
}

// lagChart is workload w's replication lag over its live run, a line per
// verified cell that sampled it.
func lagChart(w string, cells []result) lineChart {
	lag := lineChart{Title: w + ": replication lag during the live run", XLabel: "seconds since the workload started", YLabel: "lag, seconds"}
	for _, r := range cells {
		if !r.Verified || len(r.Lag) == 0 {
			continue
		}
		name := r.Engine
		if r.Engine == "parapply" {
			name = "parapply, workers " + workersText(r.Workers)
		}
		ls := series{Name: name}
		for _, p := range r.Lag {
			ls.X, ls.Y = append(ls.X, p.T), append(ls.Y, p.Lag)
		}
		lag.Series = append(lag.Series, ls)
	}
	return lag
}

// Chart size in pixels, as PNG at vgimg's 96 dots per inch.
const (
	chartWidth  = 900 * vg.Inch / 96
	chartHeight = 500 * vg.Inch / 96
	// markedPoints is the most points a series is drawn with markers;
	// past it (lag sampled through a run) they would blot the line.
	markedPoints = 60
)

// lineChart is one chart: labelled axes, named lines and horizontal
// dashed reference lines (the built-in's time), drawn by gonum/plot.
type lineChart struct {
	Title, XLabel, YLabel string
	Series                []series
	RefLines              []refLine
	// XTicks, if set, are the only labelled X values (worker counts).
	XTicks []float64
}

// series is one named line through points (X[i], Y[i]), in that order;
// points that are NaN or infinite are left out.
type series struct {
	Name string
	X, Y []float64
}

// refLine is a horizontal dashed line across the chart at Y.
type refLine struct {
	Name string
	Y    float64
}

// writePNG draws the chart into a PNG file at path; the Y axis takes in 0
// so that lines compare by height, and room above them for the legend.
func (c lineChart) writePNG(path string) error {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = c.Title, c.XLabel, c.YLabel
	p.Title.Padding, p.Legend.Top = vg.Points(8), true
	p.Add(plotter.NewGrid())
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for i, s := range c.Series {
		var xys plotter.XYs
		for j := range s.X {
			if finite(s.X[j]) && finite(s.Y[j]) {
				xys = append(xys, plotter.XY{X: s.X[j], Y: s.Y[j]})
				xmin, xmax = math.Min(xmin, s.X[j]), math.Max(xmax, s.X[j])
			}
		}
		if len(xys) == 0 {
			continue
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("series %q: %w", s.Name, err)
		}
		l.Color, l.Width = plotutil.Color(i), vg.Points(1.5)
		p.Add(l)
		if len(xys) > markedPoints {
			p.Legend.Add(s.Name, l)
			continue
		}
		pts, err := plotter.NewScatter(xys)
		if err != nil {
			return fmt.Errorf("series %q: %w", s.Name, err)
		}
		pts.Color, pts.Shape = plotutil.Color(i), draw.BoxGlyph{}
		p.Add(pts)
		p.Legend.Add(s.Name, l, pts)
	}
	if math.IsInf(xmin, 1) {
		return fmt.Errorf("no finite data points in %d series", len(c.Series))
	}
	for k, r := range c.RefLines {
		if !finite(r.Y) {
			continue
		}
		l, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: r.Y}, {X: xmax, Y: r.Y}})
		if err != nil {
			return fmt.Errorf("reference line %q: %w", r.Name, err)
		}
		l.Color, l.Width, l.Dashes = plotutil.Color(len(c.Series)+k), vg.Points(1.5), []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(l)
		p.Legend.Add(r.Name, l)
	}
	if c.XTicks != nil {
		var ticks []plot.Tick
		for _, x := range c.XTicks {
			ticks = append(ticks, plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'f', -1, 64)})
		}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
	}
	p.Y.Min, p.Y.Max = math.Min(0, p.Y.Min), math.Max(0, p.Y.Max)
	p.Y.Max += (p.Y.Max - p.Y.Min) / 5 // room for the legend above the lines
	return p.Save(chartWidth, chartHeight, path)
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
