package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/parapply/parapply/internal/chart"
)

// writePlots draws, per workload, parapply's catch-up time against its
// worker count with the built-in's time as a reference line, and for live
// runs the lag over time of every engine.
func writePlots(dir string, rs []result) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	byWorkload := map[string][]result{}
	var order []string
	for _, r := range rs {
		if _, ok := byWorkload[r.Workload]; !ok {
			order = append(order, r.Workload)
		}
		byWorkload[r.Workload] = append(byWorkload[r.Workload], r)
	}
	for _, w := range order {
		cells := byWorkload[w]
		c := chart.Chart{Title: w + ": catch-up time by parapply worker count", XLabel: "workers", YLabel: "seconds"}
		if workloads[w].method == methodLive {
			c.Title, c.YLabel = w+": sustained TPS by parapply worker count", "transactions per second"
		}
		s := chart.Series{Name: "parapply"}
		for _, r := range cells {
			if !r.Verified {
				continue
			}
			y := r.CatchupS
			if workloads[w].method == methodLive {
				y = r.SustainedTPS
			}
			if r.Engine == "builtin" || r.Workers == autoWorkers {
				if r.Workers == autoWorkers {
					c.RefLines = append(c.RefLines, chart.RefLine{Name: "parapply, workers = auto", Y: y})
					continue
				}
				c.RefLines = append(c.RefLines, chart.RefLine{Name: "built-in subscription", Y: y})
				continue
			}
			s.X, s.Y = append(s.X, float64(r.Workers)), append(s.Y, y)
		}
		if len(s.X) > 0 {
			c.Series = append(c.Series, s)
		}
		if len(c.Series) > 0 {
			if err := c.WritePNG(filepath.Join(dir, w+"-workers.png")); err != nil {
				return fmt.Errorf("plot %s: %w", w, err)
			}
		}
		if workloads[w].method != methodLive {
			continue
		}
		lag := chart.Chart{Title: w + ": replication lag during the live run", XLabel: "seconds since the workload started", YLabel: "lag, seconds"}
		for _, r := range cells {
			if !r.Verified || len(r.Lag) == 0 {
				continue
			}
			name := r.Engine
			if r.Engine == "parapply" {
				name = "parapply, workers " + workersText(r.Workers)
			}
			ls := chart.Series{Name: name}
			for _, p := range r.Lag {
				ls.X, ls.Y = append(ls.X, p.T), append(ls.Y, p.Lag)
			}
			lag.Series = append(lag.Series, ls)
		}
		if len(lag.Series) > 0 {
			if err := lag.WritePNG(filepath.Join(dir, w+"-lag.png")); err != nil {
				return fmt.Errorf("plot %s lag: %w", w, err)
			}
		}
	}
	return nil
}
