// Command parapply-bench measures parapply against PostgreSQL's built-in
// subscription on the workloads of docs/benchmarks.md: each engine gets a
// fresh publisher and subscriber with identical data, the catch-up time is
// taken from the moment the subscriber starts until a marker written after
// the workload is visible on it, and every run is verified by checksums of
// every table before its time counts.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
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
	workers   []int
	plot      string
	// readDelay delays every file read of the subscriber server (0: the
	// workload's own, none for most).
	readDelay time.Duration
	// layouts are the layouts measured, each cell in each (see layout.go).
	layouts []string
	// target is where parapply applies: targetPostgres, or targetCitus
	// (a coordinator and two workers; the built-in, which cannot fill
	// one, still applies to a plain server, for scale: see citus.go).
	target string
	// pgClientFrom is --pg-client: the client installation pgcopydb
	// runs; pgClient is its folder of wrappers, made once per run.
	pgClientFrom string
	pgClient     pgClient
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return // the usage asked for is printed
		}
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

// run is the benchmark: the options, the parapply binary to measure,
// every cell measured, then the charts, the table, and an error if a run
// failed its verification.
func run(ctx context.Context, args []string) error {
	o, err := parseOptions(args)
	if err != nil {
		return err
	}
	if o.binary == "" && slices.ContainsFunc(o.engines, isParapply) {
		b, err := buildParapply()
		if err != nil {
			return err
		}
		o.binary = b
	}
	if slices.ContainsFunc(o.engines, isPgcopydb) {
		if o.pgClient, err = preparePgClient(o.pgClientFrom); err != nil {
			return err
		}
		if o.pgClient.dir != "" {
			defer os.RemoveAll(o.pgClient.dir)
		}
	}
	var results []result
	for _, cells := range allCells(o) {
		// Run i of every cell before run i+1 of any: the machine's pace
		// drifts over minutes, and each engine then meets the same drift.
		for i := 0; i < o.runs; i++ {
			for _, c := range cells {
				c.measureRun(ctx, o, i)
			}
		}
		more, err := summarize(o, cells)
		if err != nil {
			return err
		}
		results = append(results, more...)
	}
	if o.plot != "" {
		if err := writePlots(o.plot, results); err != nil {
			return err
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

// parseOptions reads the flags into options and checks them.
func parseOptions(args []string) (options, error) {
	fs := flag.NewFlagSet("parapply-bench", flag.ContinueOnError)
	wl := fs.String("workload", "insert,update", "workloads to run, or all: "+strings.Join(workloadNames(), ", "))
	eng := fs.String("engines", "builtin,parapply", "engines to compare: builtin, parapply, drain (catch-up workloads and big-transaction: the publisher's floor, see docs/benchmarks.md), pgcopydb (initial-sync workloads: pgcopydb clone into an empty target; pgcopydb:table_jobs=N:index_jobs=M, default 2 and 2); parapply:name=value[:name=value] is parapply with those settings (e.g. parapply:detect_conflicts=off; binary=PATH measures another build)")
	scale := fs.Float64("scale", 1, "size factor; 1 is the size of docs/benchmarks.md")
	runs := fs.Int("runs", 3, "runs per cell; times are medians")
	jsonPath := fs.String("json", "", "append one JSON record per cell to this file")
	bin := fs.String("parapply", "", "parapply binary to measure (default: build ./cmd/parapply)")
	workersFlag := fs.String("workers", "auto", "parapply worker counts to measure, comma separated: 0 to 64, or auto (parapply's default)")
	plot := fs.String("plot", "", "write PNG charts to this directory")
	layoutFlag := fs.String("layout", layoutShared, "where the processes run, comma separated: shared (one machine: every process on every CPU) or separate (two machines: the publisher, its walsender and the clients on one half of the CPUs, the subscriber and parapply on the other); ratios are against the built-in in the same layout")
	target := fs.String("target", targetPostgres, "where parapply applies: postgres, or citus (a Citus coordinator and two workers from Debian's postgresql-15 with Citus; the built-in, which cannot fill one, applies to a plain server in the same run, for scale)")
	readDelay := fs.Duration("read-delay", 0, "delay every file read of the subscriber server by this long, as a network-attached disk would (a preload library built with cc; the slow-read workloads default to 100us)")
	pgClientFrom := fs.String("pg-client", pgClientDefault(), "PostgreSQL client programs pgcopydb runs (pg_dump, pg_restore, psql; of the servers' version or newer): a bin folder, or a package tree unpacked with its own loader as .ci/run makes; empty: those in PATH")
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	o := options{workloads: splitList(*wl), engines: splitList(*eng), scale: *scale, runs: *runs, json: *jsonPath, binary: *bin, plot: *plot, readDelay: *readDelay, layouts: splitList(*layoutFlag), target: *target, pgClientFrom: *pgClientFrom}
	if err := o.checkWhere(); err != nil {
		return o, err
	}
	if len(o.workloads) == 1 && o.workloads[0] == "all" {
		o.workloads = workloadNames()
	}
	for _, w := range splitList(*workersFlag) {
		n, err := strconv.Atoi(w)
		if w == "auto" {
			n, err = autoWorkers, nil
		}
		if err != nil || n < autoWorkers || n > 64 {
			return o, fmt.Errorf("invalid worker count %q (0 to 64, or auto)", w)
		}
		o.workers = append(o.workers, n)
	}
	return o, o.checkWhat()
}

// checkWhere refuses an unknown target or layout, or a layout the
// machine cannot give.
func (o options) checkWhere() error {
	if err := checkTarget(o); err != nil {
		return err
	}
	for _, l := range o.layouts {
		if !slices.Contains(layouts, l) {
			return fmt.Errorf("unknown layout %q (have %s)", l, strings.Join(layouts, ", "))
		}
		if l == layoutSeparate {
			if err := checkSeparate(); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkWhat refuses an unknown workload or engine, no runs or no scale.
func (o options) checkWhat() error {
	for _, w := range o.workloads {
		if _, ok := workloads[w]; !ok {
			return fmt.Errorf("unknown workload %q (have %s)", w, strings.Join(workloadNames(), ", "))
		}
	}
	for _, e := range o.engines {
		if err := checkEngine(e, o.workloads); err != nil {
			return err
		}
	}
	if o.runs < 1 || o.scale <= 0 {
		return errors.New("--runs must be at least 1 and --scale above 0")
	}
	return nil
}

// summarize makes each cell's result, with its speedup against the
// built-in and, for a local mode, its rate against the same engine's off
// mode, and appends each to the JSON file if one is named.
func summarize(o options, cells []*cell) ([]result, error) {
	var results []result
	var base, off *result
	for _, c := range cells {
		w := c.workload
		res := c.summary()
		if c.engine == "builtin" && res.Verified && c.mode == "" {
			b := res
			base = &b
		}
		res.Speedup = speedup(workloads[w].method, base, &res)
		if c.mode == "off" || c.mode == "" {
			off = nil // each engine's other modes compare with its own off
		}
		if c.mode == "off" && res.Verified {
			b := res
			off = &b
		}
		if off != nil && off.LocalTPS > 0 && res.Verified {
			res.LocalTPSVsOff = res.LocalTPS / off.LocalTPS
		}
		results = append(results, res)
		if o.json != "" {
			if err := appendJSON(o.json, res); err != nil {
				return results, err
			}
		}
	}
	return results, nil
}

// cell is one workload for one engine, worker count and local mode, with
// the runs measured so far.
type cell struct {
	workload, engine string
	workers          int
	mode             string
	layout           string
	res              result
	runs             []measurement
	failed           bool
}

func newCell(o options, w, e string, workers int, mode string) *cell {
	c := &cell{workload: w, engine: e, workers: workers, mode: mode}
	c.res = result{Workload: w, Engine: e, Workers: workers, Scale: o.scale, Runs: o.runs, Verified: true, Method: workloads[w].method, Detection: mode}
	if o.target == targetCitus && isParapply(e) {
		c.res.Target = targetCitus
	}
	if isParapply(e) {
		// parapply takes its settings from the environment too.
		c.res.CommitOrder = cmp.Or(os.Getenv("PARAPPLY_COMMIT_ORDER"), "preserve")
	}
	return c
}

// allCells lists the cells of each workload in each layout: each list is
// measured run by run, and its speedups are against its built-in.
func allCells(o options) [][]*cell {
	var all [][]*cell
	for _, w := range o.workloads {
		for _, l := range o.layouts {
			cells := cellsOf(o, w)
			for _, c := range cells {
				c.layout, c.res.Layout = l, l
			}
			all = append(all, cells)
		}
	}
	return all
}

// cellsOf lists workload w's cells, in the order of o.engines (the
// built-in first when it is first: the others' speedups are against it).
func cellsOf(o options, w string) []*cell {
	var cells []*cell
	for _, e := range o.engines {
		if isPgcopydb(e) && workloads[w].method != methodInitial {
			continue // it copies once: see checkEngine
		}
		counts := []int{0}
		if isParapply(e) {
			counts = o.workers
		}
		for _, workers := range counts {
			modes := []string{""}
			if workloads[w].method == methodLocal {
				modes = localModes(e)
			}
			for _, mode := range modes {
				cells = append(cells, newCell(o, w, e, workers, mode))
			}
		}
	}
	return cells
}

// measureRun measures run i of the cell, unless an earlier run failed.
func (c *cell) measureRun(ctx context.Context, o options, i int) {
	if c.failed {
		return
	}
	w, e := c.workload, c.engine
	logf("%s / %s (workers %s, layout %s): run %d of %d", w, e, workersText(c.workers), c.layout, i+1, o.runs)
	m, err := measure(ctx, o, workloads[w], e, c.workers, c.mode, c.layout)
	c.res.PGVersion = m.pgVersion
	if err != nil {
		c.failed, c.res.Verified = true, false
		c.res.Error = oneLine(err.Error())
		logf("%s / %s: run %d FAILED: %v", w, e, i+1, err)
		return
	}
	logf("%s / %s: run %d: publisher %.2fs, %d transactions, catch-up %.2fs, sustained %.1f TPS, peak RSS %.0f MB", w, e, i+1, m.publisher, m.txns, m.catchup, m.sustainedTPS, m.rssMB)
	if m.conflicts > 0 && m.catchup > 0 {
		logf("%s / %s: run %d: %d conflicts, %.0f per second of catch-up", w, e, i+1, m.conflicts, float64(m.conflicts)/m.catchup)
	}
	c.runs = append(c.runs, m)
}

// summary summarises the cell's runs by their medians.
func (c *cell) summary() result {
	res := c.res
	if c.failed {
		return res
	}
	var pubs, catchups, rates, tps, busy, wcpu, tcpu, pcpu, confl, conflRate, local []float64
	for i, m := range c.runs {
		pubs, catchups, tps = append(pubs, m.publisher), append(catchups, m.catchup), append(tps, m.sustainedTPS)
		if m.catchup > 0 && m.txns > 0 {
			rates = append(rates, float64(m.txns)/m.catchup)
		}
		busy, wcpu, tcpu, pcpu = append(busy, m.busy), append(wcpu, m.walsenderCPU), append(tcpu, m.targetCPU), append(pcpu, m.processCPU)
		if m.conflicts > 0 && m.catchup > 0 {
			confl, conflRate = append(confl, float64(m.conflicts)), append(conflRate, float64(m.conflicts)/m.catchup)
		}
		local = append(local, m.localTPS)
		res.PeakRSSMB = max(res.PeakRSSMB, m.rssMB)
		res.Transactions = m.txns
		if i == 0 {
			res.Lag = m.lag
		}
	}
	res.PublisherS, res.CatchupS, res.SustainedTPS = median(pubs), median(catchups), median(tps)
	res.CatchupRuns = catchups
	if len(rates) == len(catchups) {
		res.CatchupRate = median(rates)
	}
	res.BusyCores, res.WalsenderCPU, res.TargetCPU, res.ProcessCPU = median(busy), median(wcpu), median(tcpu), median(pcpu)
	res.LocalTPS = median(local)
	if len(confl) > 0 {
		res.Conflicts, res.ConflictsPerSec = median(confl), median(conflRate)
	}
	return res
}

// speedup compares a cell with the built-in's: the ratio of catch-up
// rates (transactions per second of catch-up: workloads whose clients run
// for a fixed time queue a backlog of a different size in each run, and a
// time ratio would credit the engine that was handed less), of delay
// times, or for live runs of sustained TPS.
func speedup(method string, base, r *result) float64 {
	if base == nil || !r.Verified {
		return 0
	}
	switch {
	case method == methodLive:
		if base.SustainedTPS == 0 {
			return 0
		}
		return r.SustainedTPS / base.SustainedTPS
	case r.CatchupRate > 0 && base.CatchupRate > 0:
		return r.CatchupRate / base.CatchupRate
	case r.CatchupS == 0:
		return 0
	}
	return base.CatchupS / r.CatchupS
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

type result struct {
	Workload string `json:"workload"`
	Engine   string `json:"engine"`
	Layout   string `json:"layout"`
	// Target is "citus" for parapply applying to a Citus cluster.
	Target      string    `json:"target,omitempty"`
	Method      string    `json:"method"`
	Workers     int       `json:"workers"` // autoWorkers: auto
	CommitOrder string    `json:"commit_order"`
	Scale       float64   `json:"scale"`
	Runs        int       `json:"runs"`
	PublisherS  float64   `json:"publisher_s"`
	CatchupS    float64   `json:"catchup_s"`
	CatchupRuns []float64 `json:"catchup_runs_s"`
	// CatchupRate is the median over runs of transactions per second of
	// catch-up; speedup compares these.
	CatchupRate  float64 `json:"catchup_txn_per_s,omitempty"`
	SustainedTPS float64 `json:"sustained_tps,omitempty"`
	Transactions int64   `json:"transactions"`
	Speedup      float64 `json:"speedup_vs_builtin"`
	PeakRSSMB    float64 `json:"peak_rss_mb"`
	// Medians over the runs: the machine's busy cores and the CPU seconds
	// of the walsender, the target backends that applied and the parapply
	// process (see measurement).
	BusyCores    float64 `json:"busy_cores,omitempty"`
	WalsenderCPU float64 `json:"walsender_cpu_s,omitempty"`
	TargetCPU    float64 `json:"target_cpu_s,omitempty"`
	ProcessCPU   float64 `json:"parapply_cpu_s,omitempty"`
	// Conflicts (medians) for workloads with local changes on the
	// subscriber: counted by the engine, and per second of catch-up.
	// Detection and LocalTPS, for the conflict-overhead workloads: the
	// detection mode (off, tombstones, retention-10s, retention-100s)
	// and the median TPS of the target's own load.
	Detection       string      `json:"detection,omitempty"`
	LocalTPS        float64     `json:"local_tps,omitempty"`
	LocalTPSVsOff   float64     `json:"local_tps_vs_off,omitempty"`
	Conflicts       float64     `json:"conflicts,omitempty"`
	ConflictsPerSec float64     `json:"conflicts_per_s,omitempty"`
	Verified        bool        `json:"verified"`
	Error           string      `json:"error,omitempty"`
	PGVersion       string      `json:"pg_version"`
	Time            time.Time   `json:"time"`
	Lag             []lagSample `json:"lag,omitempty"`
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
	fmt.Printf("%-17s %-9s %-8s %7s %7s %12s %12s %10s %9s %7s %6s %s\n", "workload", "engine", "layout", "workers", "scale", "publisher_s", "catchup_s", "tps", "speedup", "rss_mb", "busy", "verified")
	for _, r := range rs {
		speed := "-"
		if r.Speedup > 0 {
			speed = strconv.FormatFloat(r.Speedup, 'f', 2, 64) + "x"
		}
		rss, tps := "-", "-"
		if r.PeakRSSMB > 0 {
			rss = strconv.FormatFloat(r.PeakRSSMB, 'f', 0, 64)
		}
		// tps: sustained for live workloads, of the catch-up otherwise.
		if t := cmp.Or(r.SustainedTPS, r.CatchupRate); t > 0 {
			tps = strconv.FormatFloat(t, 'f', 0, 64)
		}
		ver := "yes"
		if r.Engine == "drain" {
			ver = "n/a (applies nothing)"
		}
		if !r.Verified {
			ver = "FAILED: " + r.Error
		}
		busy := "-"
		if r.BusyCores > 0 {
			busy = strconv.FormatFloat(r.BusyCores, 'f', 2, 64)
		}
		if r.Conflicts > 0 {
			ver += fmt.Sprintf(" (%.0f conflicts, %.0f/s)", r.Conflicts, r.ConflictsPerSec)
		}
		if r.Detection != "" {
			tps = strconv.FormatFloat(r.LocalTPS, 'f', 0, 64)
			speed = "-"
			if r.LocalTPSVsOff > 0 {
				speed = strconv.FormatFloat(r.LocalTPSVsOff, 'f', 2, 64) + "x"
			}
			ver += " (detection " + r.Detection + "; tps: the target's local load; speedup: vs detection off)"
		}
		eng := r.Engine
		if r.Target != "" {
			eng += "@" + r.Target
		}
		fmt.Printf("%-17s %-9s %-8s %7s %7g %12.2f %12.2f %10s %9s %7s %6s %s\n", r.Workload, eng, r.Layout, workersText(r.Workers), r.Scale, r.PublisherS, r.CatchupS, tps, speed, rss, busy, ver)
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

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// autoWorkers stands for workers = auto among the worker counts.
const autoWorkers = -1

func workersText(n int) string {
	if n == autoWorkers {
		return "auto"
	}
	return strconv.Itoa(n)
}

// localModes are the detection modes a conflict-overhead workload runs
// an engine in: tombstones are parapply's only.
func localModes(e string) []string {
	if isParapply(e) {
		return detectionModes
	}
	return slices.DeleteFunc(slices.Clone(detectionModes), func(m string) bool { return m == "tombstones" })
}

// isParapply tells parapply's engines (with or without settings) from the
// others.
func isParapply(e string) bool { return e == "parapply" || strings.HasPrefix(e, "parapply:") }

// parapplySettings returns the settings an engine name gives parapply
// (parapply:name=value:name=value), as command-line flags, so that one run
// can compare parapply with itself under other settings, and the binary
// it names (binary=PATH; empty: the invocation's), so that one run can
// compare two builds; it refuses unknown engines and malformed settings.
func parapplySettings(e string) (binary string, flags []string, err error) {
	if e == "builtin" || e == "drain" || e == "parapply" {
		return "", nil, nil
	}
	rest, ok := strings.CutPrefix(e, "parapply:")
	if !ok {
		return "", nil, fmt.Errorf("unknown engine %q (builtin, parapply, parapply:name=value[:name=value], pgcopydb, pgcopydb:table_jobs=N:index_jobs=M or drain)", e)
	}
	for _, kv := range strings.Split(rest, ":") {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" || strings.ContainsFunc(name, func(r rune) bool { return !(r == '_' || r >= 'a' && r <= 'z') }) {
			return "", nil, fmt.Errorf("engine %q: %q is not name=value (a parapply setting, e.g. detect_conflicts=off)", e, kv)
		}
		if name == "binary" {
			if _, err := os.Stat(value); err != nil {
				return "", nil, fmt.Errorf("engine %q: binary: %w", e, err)
			}
			binary = value
			continue
		}
		flags = append(flags, "--"+strings.ReplaceAll(name, "_", "-"), value)
	}
	return binary, flags, nil
}

// checkEngine refuses an unknown engine, malformed settings, and
// pgcopydb without an initial-sync workload (it copies once: it has no
// catch-up to time; cellsOf leaves it out of the other workloads).
func checkEngine(e string, workloadNames []string) error {
	if !isPgcopydb(e) {
		_, _, err := parapplySettings(e)
		return err
	}
	if _, _, err := pgcopydbJobs(e); err != nil {
		return err
	}
	if !slices.ContainsFunc(workloadNames, func(w string) bool { return workloads[w].method == methodInitial }) {
		return fmt.Errorf("engine %q measures the initial-sync workloads only: add one to --workload", e)
	}
	return nil
}
