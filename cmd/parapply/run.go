package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"github.com/parapply/parapply/internal/pgerr"
	"github.com/parapply/parapply/metrics"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/status"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/tablesync"
)

func usageFor(fs *flag.FlagSet, synopsis string) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\n", synopsis)
		fs.PrintDefaults()
	}
}

// withSourceEnv sets the source's switches for diagnosis and measurement,
// which are not settings (no flag, no file entry, not in -h), from the
// environment: PARAPPLY_PACED=off and PARAPPLY_TRICKLE=off (see
// source.Config's Unpaced and NoTrickle).
func withSourceEnv(c source.Config) source.Config {
	c.Unpaced = os.Getenv("PARAPPLY_PACED") == "off"
	c.NoTrickle = os.Getenv("PARAPPLY_TRICKLE") == "off"
	return c
}

// RunCommand replicates the publication to the target until stopped:
// parapply run, the command every other one serves. Its logs and, on a
// terminal, its live line go to stderr.
type RunCommand struct {
	stderr io.Writer
}

// Run is parapply run: it takes every setting, starts the metrics
// endpoint and the status recorder, gates the start on the pre-flight
// checks, and reports progress until the run ends or is interrupted.
func (cmd *RunCommand) Run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	usageFor(fs, "parapply run --source DSN --target DSN --publication NAME[,NAME] [--slot NAME] [--config FILE]")
	c, err := loadConfig(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) || errors.As(err, new(usageError)) {
			return err
		}
		return subscriber.Permanent(err)
	}
	o, err := c.read()
	if err != nil {
		return subscriber.Permanent(err)
	}
	stopProfiles, err := startProfiles(o.CPUProfile)
	if err != nil {
		return subscriber.Permanent(err)
	}
	defer stopProfiles()
	con := newConsole(cmd.stderr, o.Source, o.Target)
	log := o.logger(con)
	cfg, err := o.subscriberConfig(log)
	if err != nil {
		return subscriber.Permanent(err)
	}
	cfg.Source = withSourceEnv(cfg.Source)
	cfg.Target.SkipCommand = skipLine(o, fs.Lookup("config").Value.String())
	if !con.tty {
		cfg.CopyProgress = copyProgressLogger(log)
	}
	sub := subscriber.New(cfg)
	if addr := o.MetricsAddr; addr != "" {
		if err := serveMetrics(ctx, addr, sub, cfg.Source, o.ApplicationName, log); err != nil {
			return err
		}
	}
	rec := newRecorder(cfg.Target.DSN, cfg.Source.Slot, o.ApplicationName, sub, log, con.secrets)
	final := make(chan error, 1)
	recorded := make(chan struct{})
	go func() { rec.run(ctx, final); close(recorded) }()
	done := make(chan error, 1)
	go func() {
		// After the recorder has started, so that a refusal is recorded
		// where parapply status shows it.
		if err := preflightGate(ctx, cfg, log); err != nil {
			done <- subscriber.Permanent(err)
			return
		}
		done <- sub.Run(ctx)
	}()
	err = followRun(ctx, sub, con, log, cfg.Source.StatusInterval, done)
	con.EndLive()
	st := sub.Status()
	attrs := []any{"applied", st.Applied.String(), "flushed", st.Durable.String(), "txns", st.Txns, "rows", st.Rows, "conflicts", st.Conflicts}
	if err != nil && ctx.Err() == nil {
		attrs = append(attrs, "error", pgerr.Text(err))
	}
	log.Info(stoppedLine(st, ctx.Err() != nil, err), attrs...)
	final <- err
	<-recorded
	return err
}

// startProfiles starts the profiles asked for, each written at exit (the
// returned function): cpu_profile (cpu, when not empty), a CPU profile of
// the whole run, and the developer aid PARAPPLY_ALLOC_PROFILE, where the
// run's memory was allocated (bytes and objects since the start).
func startProfiles(cpu string) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if cpu != "" {
		f, err := os.Create(cpu)
		if err != nil {
			return stop, fmt.Errorf("cpu_profile: %w (name a file parapply may write, or leave it empty)", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return stop, fmt.Errorf("cpu_profile: %w", err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); f.Close() })
	}
	if path := os.Getenv("PARAPPLY_ALLOC_PROFILE"); path != "" {
		runtime.MemProfileRate = 64 << 10
		stops = append(stops, func() {
			if f, err := os.Create(path); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		})
	}
	return stop, nil
}

// serveMetrics serves the run's metrics at addr until ctx ends, with, for
// a failover slot, its failover state read on a connection of its own.
func serveMetrics(ctx context.Context, addr string, sub *subscriber.Subscriber, src source.Config, app string, log *slog.Logger) error {
	ln, err := metrics.Listen(addr)
	if err != nil {
		return err
	}
	col := metrics.NewCollector(sub.Status, metrics.Info{Version: buildVersion(), Slot: src.Slot, ApplicationName: app})
	if src.Failover {
		fw := &failoverWatch{dsn: src.DSN, slot: src.Slot, app: app + " failover", every: max(src.StatusInterval, time.Second)}
		go fw.run(ctx, log)
		col.WithFailover(fw.state.Load)
	}
	go func() {
		if err := metrics.Serve(ctx, ln, metrics.Handler(metrics.Registry(col))); err != nil {
			log.Error("metrics endpoint stopped", "error", err)
		}
	}()
	log.Info("serving metrics", "address", "http://"+ln.Addr().String()+"/metrics")
	return nil
}

// followRun shows the run's progress until it ends (done) and returns
// why it ended: on a terminal, a live line redrawn every second;
// otherwise a log line every status_interval (every) while it streams.
// Interrupted, it waits for Run, which returns once it has rolled back
// any open transaction and closed its connections.
func followRun(ctx context.Context, sub *subscriber.Subscriber, con *console, log *slog.Logger, every time.Duration, done <-chan error) error {
	if con.tty {
		every = time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	prev, prevAt := sub.Status(), time.Now()
	for {
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			return <-done
		case now := <-tick.C:
			st := sub.Status()
			dt := now.Sub(prevAt)
			if con.tty {
				con.SetLive(liveLine(st, prev, dt))
			} else if st.State == subscriber.StateStreaming {
				log.Info("progress", "received", st.Received.String(), "applied", st.Applied.String(), "flushed", st.Durable.String(),
					"lag", st.Lag.Round(time.Millisecond).String(), "lag_bytes", st.LagBytes(),
					"txns", st.Txns, "target_txns", st.Groups, "rows", st.Rows,
					"rows_per_s", int64(float64(st.Rows-prev.Rows)/dt.Seconds()), "missing_rows", st.Missing, "conflicts", st.Conflicts)
			}
			prev, prevAt = st, now
		}
	}
}

// failoverWatch reads, every status_interval, whether the slot survives a
// failover of the publisher (its failover flag, synchronized_standby_slots,
// each standby's copy), for the metrics: on a connection of its own, so
// that the apply pays nothing for it.
type failoverWatch struct {
	dsn, slot, app string
	every          time.Duration
	state          atomic.Pointer[metrics.Failover]
}

func (w *failoverWatch) run(ctx context.Context, log *slog.Logger) {
	for {
		w.state.Store(w.read(ctx, log))
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.every):
		}
	}
}

// read is one look; nil when the publisher cannot be read, or has no
// failover slots (before PostgreSQL 17), or no such slot yet.
func (w *failoverWatch) read(ctx context.Context, log *slog.Logger) *metrics.Failover {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := connectPlain(ctx, w.dsn, "source", w.app)
	if err != nil {
		log.Debug("reading the slot's failover state", "error", err)
		return nil
	}
	defer conn.Close(context.Background())
	p, err := status.ReadSlot(ctx, conn, w.slot)
	if err != nil || p.Failover == nil {
		return nil
	}
	f := &metrics.Failover{Slot: *p.Failover, SyncStandbySlots: p.SyncStandbySlots != "", Synced: map[string]bool{}}
	for _, sb := range readStandbys(ctx, w.dsn, w.slot, conn) {
		if sb.Error == "" && sb.InRecovery {
			f.Synced[sb.Host] = sb.Synced
		}
	}
	return f
}

// stoppedLine says, at every stop, where the target stands: the source
// position its last commit applied (the next start goes on from there),
// the transactions applied since this process started, and why it
// stopped.
func stoppedLine(st subscriber.Status, interrupted bool, err error) string {
	why := "the run ended"
	switch {
	case interrupted:
		why = "interrupted (SIGINT or SIGTERM)"
	case err != nil:
		why = "an error, below"
	}
	return fmt.Sprintf("stopped at %s after %d transactions: %s", st.Applied, st.Txns, why)
}

// copyProgressLogger logs the initial copy's progress (off a terminal; on
// one, the live line shows it).
func copyProgressLogger(log *slog.Logger) func(tablesync.Progress) {
	return func(p tablesync.Progress) {
		pct, left, ok := subscriber.CopyEstimate(p)
		rate := float64(p.Bytes) / max(p.Elapsed.Seconds(), 0.001) / (1 << 20)
		eta := "?"
		if ok {
			eta = left.Round(time.Second).String()
		}
		log.Info("copy progress", "tables_done", p.TablesDone, "tables", p.Tables, "rows", p.Rows, "rows_estimated", p.EstRows,
			"mb", p.Bytes>>20, "mb_per_s", int(rate), "percent", int(pct), "eta", eta)
	}
}
