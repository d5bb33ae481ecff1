package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/conflict"
	"github.com/parapply/parapply/metrics"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/tablesync"
)

func usageFor(fs *flag.FlagSet, synopsis string) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: %s\n\n", synopsis)
		fs.PrintDefaults()
	}
}

// subscriberConfig turns resolved settings into a subscriber configuration,
// rejecting bad values with a message that names the setting.
func subscriberConfig(c config, log *slog.Logger) (subscriber.Config, error) {
	var cfg subscriber.Config
	if c["source"] == "" {
		return cfg, errors.New("no source given: set --source (or source in the config file, or PARAPPLY_SOURCE) to the publisher's connection string")
	}
	if c["target"] == "" {
		return cfg, errors.New("no target given: set --target (or target in the config file, or PARAPPLY_TARGET) to the target's connection string")
	}
	pubs := splitList(c["publication"])
	if len(pubs) == 0 {
		return cfg, errors.New("no publication given: set --publication to the publication(s) to subscribe to")
	}
	streaming, err := c.bool("streaming")
	if err != nil {
		return cfg, err
	}
	twoPhase, err := c.bool("two_phase")
	if err != nil {
		return cfg, err
	}
	switch c["origin"] {
	case source.OriginAny, source.OriginNone:
	default:
		return cfg, fmt.Errorf("invalid value for origin: %q (any or none)", c["origin"])
	}
	if cfg.DetectConflicts, err = c.bool("detect_conflicts"); err != nil {
		return cfg, err
	}
	if cfg.Conflicts, err = conflict.Parse(c["conflict_resolution"]); err != nil {
		return cfg, err
	}
	switch cfg.OnError = c["on_error"]; cfg.OnError {
	case subscriber.OnErrorStop, subscriber.OnErrorSkip:
	default:
		return cfg, fmt.Errorf("invalid value for on_error: %q (stop or skip_transaction)", c["on_error"])
	}
	if cfg.DetectUpdateDeleted, err = c.bool("detect_update_deleted"); err != nil {
		return cfg, err
	}
	if cfg.DetectUpdateDeleted && !cfg.DetectConflicts {
		return cfg, errors.New("detect_update_deleted is on, but detect_conflicts is off: turn detect_conflicts on, or detect_update_deleted off")
	}
	if cfg.MaxRetention, err = c.durationOrOff("max_retention_duration"); err != nil {
		return cfg, err
	}
	if cfg.MaxClockSkew, err = c.durationOrOff("max_clock_skew"); err != nil {
		return cfg, err
	}
	if !cfg.DetectConflicts && cfg.Conflicts.String() != "" {
		return cfg, errors.New("conflict_resolution is set, but detect_conflicts is off: turn detect_conflicts on, or leave conflict_resolution empty")
	}
	prefetch, err := c.bool("prefetch")
	if err != nil {
		return cfg, err
	}
	pfConns, err := c.int("prefetch_connections", 1)
	if err != nil {
		return cfg, err
	}
	rows, err := c.int("batch_rows", 1)
	if err != nil {
		return cfg, err
	}
	interval, err := c.duration("status_interval")
	if err != nil {
		return cfg, err
	}
	switch c["synchronous_commit"] {
	case "on", "off", "local", "remote_write", "remote_apply":
	default:
		return cfg, fmt.Errorf("invalid value for synchronous_commit: %q (on, off, local, remote_write or remote_apply)", c["synchronous_commit"])
	}
	if cfg.CopyData, err = c.bool("copy_data"); err != nil {
		return cfg, err
	}
	if cfg.SharedTables, err = c.bool("shared_tables"); err != nil {
		return cfg, err
	}
	if cfg.CopyDeferIndexes, err = c.bool("copy_defer_indexes"); err != nil {
		return cfg, err
	}
	if cfg.CopyWorkers, err = c.int("copy_workers", 1); err != nil {
		return cfg, err
	}
	switch c["existing_data"] {
	case tablesync.ExistingError, tablesync.ExistingTruncate, tablesync.ExistingKeep:
		cfg.ExistingData = c["existing_data"]
	default:
		return cfg, fmt.Errorf("invalid value for existing_data: %q (error, truncate or keep)", c["existing_data"])
	}
	if strings.EqualFold(strings.TrimSpace(c["workers"]), "auto") {
		cfg.AutoWorkers = true
		if cfg.Workers, err = c.int("max_workers", 1); err != nil {
			return cfg, err
		}
		if cfg.Workers > 64 {
			return cfg, fmt.Errorf("invalid value for max_workers: %d (1 to 64)", cfg.Workers)
		}
	} else if cfg.Workers, err = c.int("workers", 0); err != nil {
		return cfg, fmt.Errorf("%w, or auto", err)
	}
	switch c["commit_order"] {
	case subscriber.CommitPreserve, subscriber.CommitDependency:
		cfg.CommitOrder = c["commit_order"]
	default:
		return cfg, fmt.Errorf("invalid value for commit_order: %q (preserve or dependency)", c["commit_order"])
	}
	if cfg.StreamWorkers, err = c.int("stream_workers", 0); err != nil {
		return cfg, err
	}
	cfg.SpillDir = c["spill_directory"]
	if cfg.ReconnectTimeout, err = c.durationOrOff("reconnect_timeout"); err != nil {
		return cfg, err
	}
	if cfg.Sequences, err = sequencesMode(c); err != nil {
		return cfg, err
	}
	if cfg.SequenceSyncInterval, err = c.durationOrOff("sequence_sync_interval"); err != nil {
		return cfg, err
	}
	lockTimeout, err := c.durationOrOff("lock_timeout")
	if err != nil {
		return cfg, err
	}
	if v := c["logical_decoding_work_mem"]; v != "" {
		n, err := c.size("logical_decoding_work_mem")
		if err != nil {
			return cfg, err
		}
		if n < 64<<10 {
			return cfg, fmt.Errorf("invalid value for logical_decoding_work_mem: %q (at least 64kB, as on the publisher)", v)
		}
		c["logical_decoding_work_mem"] = fmt.Sprintf("%dkB", n>>10)
	}
	if cfg.Workers > 64 {
		return cfg, fmt.Errorf("invalid value for workers: %d (0 to 64)", cfg.Workers)
	}
	if cfg.Group.MaxChanges, err = c.int("group_max_changes", 1); err != nil {
		return cfg, err
	}
	if cfg.Group.MaxBytes, err = c.size("group_max_bytes"); err != nil {
		return cfg, err
	}
	if cfg.Group.MaxDelay, err = c.duration("group_max_delay"); err != nil {
		return cfg, err
	}
	cfg.Source = source.Config{DSN: c["source"], Slot: c["slot"], Publications: pubs, Streaming: streaming, AppName: c["application_name"], StatusInterval: interval,
		DecodingWorkMem: c["logical_decoding_work_mem"], TwoPhase: twoPhase, Origin: c["origin"]}
	cfg.Target = apply.Config{DSN: c["target"], AppName: c["application_name"] + " apply", Slot: c["slot"], SynchronousCommit: c["synchronous_commit"], BatchRows: rows,
		LockTimeout: fmt.Sprintf("%dms", lockTimeout.Milliseconds()),
		Prefetch:    prefetch, PrefetchConns: pfConns}
	cfg.Log = log
	return cfg, nil
}

func newLogger(c config, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c["log_level"])); err != nil {
		return nil, fmt.Errorf("invalid value for log_level: %q (debug, info, warn or error)", c["log_level"])
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c["log_format"] {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("invalid value for log_format: %q (text or json)", c["log_format"])
}

func runCommand(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	usageFor(fs, "parapply run --source DSN --target DSN --publication NAME[,NAME] [--slot NAME] [--config FILE]")
	c, err := loadConfig(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return subscriber.Permanent(err)
	}
	if path := os.Getenv("PARAPPLY_CPU_PROFILE"); path != "" {
		// Developer aid: a CPU profile of the whole run, written at exit.
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	con := newConsole(os.Stderr, c["source"], c["target"])
	log, err := newLogger(c, con)
	if err != nil {
		return subscriber.Permanent(err)
	}
	cfg, err := subscriberConfig(c, log)
	if err != nil {
		return subscriber.Permanent(err)
	}
	if !con.tty {
		cfg.CopyProgress = copyProgressLogger(log)
	}
	sub := subscriber.New(cfg)
	if addr := c["metrics_addr"]; addr != "" {
		ln, err := metrics.Listen(addr)
		if err != nil {
			return err
		}
		col := metrics.NewCollector(sub.Status, metrics.Info{Version: version, Slot: cfg.Source.Slot, ApplicationName: c["application_name"]})
		go func() {
			if err := metrics.Serve(ctx, ln, metrics.Handler(metrics.Registry(col))); err != nil {
				log.Error("metrics endpoint stopped", "error", err)
			}
		}()
		log.Info("serving metrics", "address", "http://"+ln.Addr().String()+"/metrics")
	}
	rec := newRecorder(cfg.Target.DSN, cfg.Source.Slot, c["application_name"], sub, log, con.secrets)
	final := make(chan error, 1)
	recorded := make(chan struct{})
	go func() { rec.run(ctx, final); close(recorded) }()
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	finish := func(err error) error {
		con.EndLive()
		final <- err
		<-recorded
		return err
	}
	// On a terminal, a live line redrawn every second; otherwise a log
	// line every status_interval.
	every := cfg.Source.StatusInterval
	if con.tty {
		every = time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	prev, prevAt := sub.Status(), time.Now()
	for {
		select {
		case err := <-done:
			return finish(err)
		case <-ctx.Done():
			// Run returns once it has rolled back any open transaction and
			// closed its connections.
			return finish(<-done)
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
