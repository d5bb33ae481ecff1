// Command parapply-bench measures parapply against PostgreSQL's built-in
// subscription on the workloads of docs/benchmarks.md: each engine gets a
// fresh publisher and subscriber with identical data, the catch-up time is
// taken from the moment the subscriber starts until a marker written after
// the workload is visible on it, and every run is verified by checksums of
// every table before its time counts.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

type options struct {
	workloads []string
	engines   []string
	scale     float64
	runs      int
	json      string
	binary    string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "parapply-bench:", err)
		os.Exit(1)
	}
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("parapply-bench", flag.ContinueOnError)
	wl := fs.String("workload", "insert,update", "workloads to run: "+strings.Join(workloadNames(), ", "))
	eng := fs.String("engines", "builtin,parapply", "engines to compare: builtin, parapply")
	scale := fs.Float64("scale", 1, "size factor; 1 is the size of docs/benchmarks.md")
	runs := fs.Int("runs", 3, "runs per cell; times are medians")
	jsonPath := fs.String("json", "", "append one JSON record per cell to this file")
	bin := fs.String("parapply", "", "parapply binary to measure (default: build ./cmd/parapply)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o := options{workloads: splitList(*wl), engines: splitList(*eng), scale: *scale, runs: *runs, json: *jsonPath, binary: *bin}
	for _, w := range o.workloads {
		if _, ok := workloads[w]; !ok {
			return fmt.Errorf("unknown workload %q (have %s)", w, strings.Join(workloadNames(), ", "))
		}
	}
	for _, e := range o.engines {
		if e != "builtin" && e != "parapply" {
			return fmt.Errorf("unknown engine %q (builtin or parapply)", e)
		}
	}
	if o.runs < 1 || o.scale <= 0 {
		return errors.New("--runs must be at least 1 and --scale above 0")
	}
	if o.binary == "" && contains(o.engines, "parapply") {
		b, err := buildParapply()
		if err != nil {
			return err
		}
		o.binary = b
	}
	var results []result
	for _, w := range o.workloads {
		var base float64
		for _, e := range o.engines {
			res := result{Workload: w, Engine: e, Scale: o.scale, Runs: o.runs, Verified: true}
			var pubs, catchups []float64
			for i := 0; i < o.runs; i++ {
				logf("%s / %s: run %d of %d", w, e, i+1, o.runs)
				m, err := measure(ctx, o, workloads[w], e)
				if err != nil {
					res.Verified = false
					res.Error = err.Error()
					logf("%s / %s: run %d FAILED: %v", w, e, i+1, err)
					break
				}
				logf("%s / %s: run %d: publisher %.2fs, catch-up %.2fs, peak RSS %.0f MB", w, e, i+1, m.publisher, m.catchup, m.rssMB)
				pubs, catchups = append(pubs, m.publisher), append(catchups, m.catchup)
				res.PeakRSSMB = max(res.PeakRSSMB, m.rssMB)
				res.PGVersion = m.pgVersion
			}
			if res.Verified {
				res.PublisherS, res.CatchupS = median(pubs), median(catchups)
				res.CatchupRuns = catchups
				if e == "builtin" {
					base = res.CatchupS
				}
				if base > 0 {
					res.Speedup = base / res.CatchupS
				}
			}
			results = append(results, res)
			if o.json != "" {
				if err := appendJSON(o.json, res); err != nil {
					return err
				}
			}
		}
	}
	printTable(results)
	for _, r := range results {
		if !r.Verified {
			return fmt.Errorf("%s / %s failed: %s", r.Workload, r.Engine, r.Error)
		}
	}
	return nil
}

type result struct {
	Workload    string    `json:"workload"`
	Engine      string    `json:"engine"`
	Workers     int       `json:"workers"`
	CommitOrder string    `json:"commit_order"`
	Scale       float64   `json:"scale"`
	Runs        int       `json:"runs"`
	PublisherS  float64   `json:"publisher_s"`
	CatchupS    float64   `json:"catchup_s"`
	CatchupRuns []float64 `json:"catchup_runs_s"`
	Speedup     float64   `json:"speedup_vs_builtin"`
	PeakRSSMB   float64   `json:"peak_rss_mb"`
	Verified    bool      `json:"verified"`
	Error       string    `json:"error,omitempty"`
	PGVersion   string    `json:"pg_version"`
	Time        time.Time `json:"time"`
}

func appendJSON(path string, r result) error {
	r.Time = time.Now().UTC()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	return json.NewEncoder(f).Encode(r)
}

func printTable(rs []result) {
	fmt.Printf("%-16s %-9s %7s %12s %12s %9s %9s %s\n", "workload", "engine", "scale", "publisher_s", "catchup_s", "speedup", "rss_mb", "verified")
	for _, r := range rs {
		speed := "-"
		if r.Speedup > 0 {
			speed = strconv.FormatFloat(r.Speedup, 'f', 2, 64) + "x"
		}
		rss := "-"
		if r.PeakRSSMB > 0 {
			rss = strconv.FormatFloat(r.PeakRSSMB, 'f', 0, 64)
		}
		ver := "yes"
		if !r.Verified {
			ver = "FAILED"
		}
		fmt.Printf("%-16s %-9s %7g %12.2f %12.2f %9s %9s %s\n", r.Workload, r.Engine, r.Scale, r.PublisherS, r.CatchupS, speed, rss, ver)
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}
