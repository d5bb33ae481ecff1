package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/internal/pgerr"
	"github.com/parapply/parapply/status"
	"github.com/parapply/parapply/subscriber"
)

// recorder keeps the slot's row of parapply.status on the target up to
// date, on a connection of its own, so `parapply status` can read it. It
// never stops the run: a failure to record is logged and tried again.
type recorder struct {
	dsn     string
	base    status.Record // identity fields: slot, pid, host, version, application_name
	sub     *subscriber.Subscriber
	log     *slog.Logger
	secrets [][]byte

	conn    *pgx.Conn
	prev    subscriber.Status
	prevAt  time.Time
	failing bool
	// ran: the run got past starting (its checks passed, and it
	// recorded itself). A start refused before that creates no row of
	// its own, nor the schema for one: its end only updates the row of a
	// slot that ran before.
	ran bool
}

func newRecorder(dsn, slot, app string, sub *subscriber.Subscriber, log *slog.Logger, secrets [][]byte) *recorder {
	host, _ := os.Hostname()
	return &recorder{dsn: dsn, sub: sub, log: log, secrets: secrets,
		base: status.Record{Slot: slot, PID: os.Getpid(), Host: host, Version: buildVersion(), ApplicationName: app}}
}

// run records every status.Interval until final delivers Run's result, then
// records the end state (with the error, if any) and returns.
func (r *recorder) run(ctx context.Context, final <-chan error) {
	tick := time.NewTicker(status.Interval)
	defer tick.Stop()
	done := ctx.Done()
	for {
		select {
		case err := <-final:
			// The run's context may be cancelled already: the last
			// record gets a few seconds of its own.
			fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			r.write(fctx, err, true)
			cancel()
			if r.conn != nil {
				r.conn.Close(context.Background())
			}
			return
		case <-tick.C:
			// While starting, the run itself creates parapply's schema;
			// recording waits so as not to race it.
			if r.sub.Status().State != subscriber.StateStarting {
				r.ran = true
				r.write(ctx, nil, false)
			}
		case <-done:
			// Stop recording; wait for final.
			tick.Stop()
			done = nil
		}
	}
}

func (r *recorder) write(ctx context.Context, runErr error, last bool) {
	st := r.sub.Status()
	now := time.Now()
	elapsed := time.Duration(0)
	if !r.prevAt.IsZero() {
		elapsed = now.Sub(r.prevAt)
	}
	rec := status.Sample(st, r.prev, elapsed)
	r.prev, r.prevAt = st, now
	rec.Slot, rec.PID, rec.Host, rec.Version, rec.ApplicationName = r.base.Slot, r.base.PID, r.base.Host, r.base.Version, r.base.ApplicationName
	if rec.Waiting != nil {
		rec.Waiting.Error = string(redact([]byte(oneLine(rec.Waiting.Error)), r.secrets))
	}
	if last {
		rec.Waiting = nil // a process that ended waits for nothing
		rec.State = subscriber.StateStopped
		if runErr != nil {
			rec.State = subscriber.StateFailed
			rec.LastError = string(redact([]byte(oneLine(pgerr.Text(runErr))), r.secrets))
			rec.LastErrorAt = &now
		}
		rec.TxnsPerSecond, rec.RowsPerSecond = 0, 0
	}
	if last && !r.ran && st.Copy == nil && st.Received == 0 {
		r.writeRefused(ctx, rec)
		return
	}
	err := r.connect(ctx)
	if err == nil {
		err = status.Write(ctx, r.conn, rec)
	}
	if err != nil {
		if r.conn != nil && r.conn.IsClosed() {
			r.conn = nil
		}
		if !r.failing || last {
			r.log.Warn("cannot record status on the target (parapply status will show the last record); trying again", "error", err)
		}
		r.failing = true
		return
	}
	if r.failing {
		r.log.Info("recording status on the target again")
		r.failing = false
	}
}

// writeRefused records the end of a run that never got past starting
// over the slot's row, if the target has one; it creates nothing.
func (r *recorder) writeRefused(ctx context.Context, rec status.Record) {
	if r.conn == nil {
		conn, err := connectPlain(ctx, r.dsn, "target", r.base.ApplicationName+" status")
		if err != nil {
			r.log.Debug("not recording the refused start on the target", "error", err)
			return
		}
		r.conn = conn
	}
	var exists bool
	err := r.conn.QueryRow(ctx, "SELECT pg_catalog.to_regclass('parapply.status') IS NOT NULL").Scan(&exists)
	if err == nil && exists {
		_, err = status.WriteExisting(ctx, r.conn, rec)
	}
	if err != nil {
		r.log.Warn("cannot record the end of the start on the target (parapply status shows the slot's last record)", "error", err)
	}
}

func (r *recorder) connect(ctx context.Context) error {
	if r.conn != nil {
		return nil
	}
	conn, err := connectPlain(ctx, r.dsn, "target", r.base.ApplicationName+" status")
	if err != nil {
		return err
	}
	if _, err = conn.Exec(ctx, "SET synchronous_commit = off"); err == nil {
		err = status.Create(ctx, conn)
	}
	if err != nil {
		conn.Close(context.Background())
		return err
	}
	r.conn = conn
	return nil
}
