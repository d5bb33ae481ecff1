//go:build demo

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/internal/verify"
	"github.com/parapply/parapply/metrics"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/status"
	"github.com/parapply/parapply/subscriber"
)

const demoSchema = `
CREATE TYPE mood AS ENUM ('calm', 'busy', 'late');
CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(14,2) NOT NULL, tags text[], state mood, updated timestamptz);
CREATE TABLE events (id bigint PRIMARY KEY, account int NOT NULL, payload jsonb, created timestamptz DEFAULT now());
CREATE TABLE notes (account int, note text);
ALTER TABLE notes REPLICA IDENTITY FULL;
`

var demoTables = []string{"public.accounts", "public.events", "public.notes"}

// DemoCommand runs parapply between two embedded servers while a
// workload writes on the publisher, then verifies the target and shows
// what an operator sees: the quickest way to watch parapply work.
type DemoCommand struct {
	out      io.Writer
	duration time.Duration
	clients  int
	workers  int
	auto     bool
}

// newDemoCommand is the demo command, printing to out.
func newDemoCommand(out io.Writer) *DemoCommand { return &DemoCommand{out: out} }

// demoSlot is the demo's slot, and demoApp the application_name of its
// sessions (as run's default).
const (
	demoSlot = "parapply_demo"
	demoApp  = "parapply"
)

// Run is parapply demo: the servers, the schema and its first rows, the
// subscriber, the workload with the live line, then the comparison, the
// metrics and the status.
func (cmd *DemoCommand) Run(ctx context.Context, args []string) error {
	if err := cmd.parse(args); err != nil {
		return err
	}
	out := cmd.out
	fmt.Fprintln(out, "parapply demo: starting an embedded publisher and subscriber (the first run downloads PostgreSQL)...")
	pair, err := pgtest.StartPair(ctx, nil, nil)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "stopping the servers")
		pair.Stop()
	}()
	fmt.Fprintf(out, "publisher: PostgreSQL %d on port %d; subscriber on port %d\n", pair.Publisher.Version, pair.Publisher.Port, pair.Subscriber.Port)
	pub, err := pgx.Connect(ctx, pair.Publisher.DSN("postgres"))
	if err != nil {
		return err
	}
	defer pub.Close(context.Background())
	sub, err := pgx.Connect(ctx, pair.Subscriber.DSN("postgres"))
	if err != nil {
		return err
	}
	defer sub.Close(context.Background())
	if err := makeDemoSchema(ctx, pub, sub); err != nil {
		return err
	}
	d, err := cmd.startSubscriber(ctx, pair)
	if err != nil {
		return err
	}
	defer d.stop()
	select {
	case <-d.s.Ready():
	case err := <-d.done:
		d.done <- err
		return err
	}
	fmt.Fprintln(out, "parapply copied the publisher's 1000 existing accounts and is streaming; metrics at "+d.metricsURL)
	elapsed, err := cmd.writeWhileApplying(ctx, pair.Publisher.DSN("postgres"), pub, d)
	if err != nil {
		return err
	}
	return cmd.show(ctx, pub, sub, d, elapsed)
}

// parse reads the demo's flags.
func (cmd *DemoCommand) parse(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	usageFor(fs, "parapply demo [--duration 10s] [--clients 4] [--workers auto]")
	fs.DurationVar(&cmd.duration, "duration", 10*time.Second, "how long the publisher's workload runs")
	fs.IntVar(&cmd.clients, "clients", 4, "concurrent writers on the publisher")
	workersFlag := fs.String("workers", "auto", "parapply's apply workers (0: the stream reader applies; auto: as 0 until reads wait, then 8)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cmd.workers, cmd.auto = 8, true
	if *workersFlag != "auto" {
		n, err := strconv.Atoi(*workersFlag)
		if err != nil || n < 0 || n > 64 {
			return fmt.Errorf("invalid value for --workers: %q (0 to 64, or auto)", *workersFlag)
		}
		cmd.workers, cmd.auto = n, false
	}
	return nil
}

// makeDemoSchema makes the demo's tables on both servers, and on the
// publisher its first accounts and the publication.
func makeDemoSchema(ctx context.Context, pub, sub *pgx.Conn) error {
	for _, c := range []*pgx.Conn{pub, sub} {
		if _, err := c.Exec(ctx, demoSchema); err != nil {
			return fmt.Errorf("creating the demo schema: %w", err)
		}
	}
	_, err := pub.Exec(ctx, `INSERT INTO accounts SELECT g, 'owner ' || g, 100, ARRAY['new'], 'calm', now() FROM generate_series(1, 1000) g;
		CREATE PUBLICATION demo FOR TABLE accounts, events, notes`)
	return err
}

// demoRun is the demo's running subscriber: its metrics' address, and
// Run's outcome (done) until stop ends it and records it.
type demoRun struct {
	s          *subscriber.Subscriber
	metricsURL string
	done       chan error
	stop       func()
}

// startSubscriber starts parapply between the pair as run would, with
// its metrics and status record.
func (cmd *DemoCommand) startSubscriber(ctx context.Context, pair *pgtest.Pair) (*demoRun, error) {
	logs := io.Discard
	if os.Getenv("PARAPPLY_DEMO_LOG") != "" {
		logs = os.Stderr
	}
	s := subscriber.New(subscriber.Config{
		Source: withSourceEnv(source.Config{DSN: pair.Publisher.DSN("postgres"), Slot: demoSlot, Publications: []string{"demo"}, AppName: demoApp, StatusInterval: time.Second, Failover: true}), // as run's default
		Target: apply.Config{DSN: pair.Subscriber.DSN("postgres"), AppName: demoApp + " apply", Slot: demoSlot},
		Log:    slog.New(slog.NewTextHandler(logs, nil)),
		// The publisher's existing accounts reach the empty subscriber by
		// the initial copy.
		CopyData: true, CopyWorkers: 2, CopyDeferIndexes: true,
		Workers: cmd.workers, AutoWorkers: cmd.auto, Binary: true,
	})
	// Metrics and the status record, as parapply run has them.
	ln, err := metrics.Listen("127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	d := &demoRun{s: s, metricsURL: "http://" + ln.Addr().String() + "/metrics", done: make(chan error, 1)}
	go func() {
		// Ends with ctx; an error would only take the metrics from the demo.
		_ = metrics.Serve(ctx, ln, metrics.Handler(metrics.Registry(metrics.NewCollector(s.Status, metrics.Info{Version: buildVersion(), Slot: demoSlot, ApplicationName: demoApp}))))
	}()
	rec := newRecorder(pair.Subscriber.DSN("postgres"), demoSlot, demoApp, s, slog.New(slog.NewTextHandler(logs, nil)), nil)
	final := make(chan error, 1)
	recorded := make(chan struct{})
	go func() { rec.run(ctx, final); close(recorded) }()
	sctx, cancel := context.WithCancel(ctx)
	go func() { d.done <- s.Run(sctx) }()
	d.stop = func() {
		cancel()
		final <- <-d.done
		<-recorded
	}
	return d, nil
}

// writeWhileApplying runs the workload for the demo's duration with the
// live line, then waits for parapply to make the publisher's last
// position durable; it returns how long that took.
func (cmd *DemoCommand) writeWhileApplying(ctx context.Context, dsn string, pub *pgx.Conn, d *demoRun) (time.Duration, error) {
	out := cmd.out
	fmt.Fprintf(out, "writing for %s with %d clients while parapply applies (the line parapply run shows on a terminal, every second):\n", cmd.duration, cmd.clients)
	con := newConsole(out)
	var txns atomic.Int64
	wctx, wcancel := context.WithTimeout(ctx, cmd.duration)
	defer wcancel()
	var wg sync.WaitGroup
	errs := make(chan error, cmd.clients)
	var nextEvent atomic.Int64
	for w := 0; w < cmd.clients; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			if err := demoWriter(wctx, dsn, w, &nextEvent, &txns); err != nil && !errors.Is(err, context.DeadlineExceeded) && wctx.Err() == nil {
				errs <- err
			}
		}(w)
	}
	start := time.Now()
	tick := time.NewTicker(time.Second)
	prev, prevAt := d.s.Status(), time.Now()
	writing := true
	var target parapply.LSN
	for writing || d.s.Status().Durable < target {
		select {
		case err := <-d.done:
			return 0, fmt.Errorf("parapply stopped: %w", err)
		case err := <-errs:
			return 0, fmt.Errorf("demo workload: %w", err)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
		if writing && wctx.Err() != nil {
			wg.Wait()
			writing = false
			var l string
			if err := pub.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&l); err != nil {
				return 0, err
			}
			target, _ = parapply.ParseLSN(l)
			con.EndLive()
			fmt.Fprintf(out, "  publisher done: %d transactions in %.1fs; waiting for parapply to reach %s\n", txns.Load(), time.Since(start).Seconds(), target)
		}
		st, now := d.s.Status(), time.Now()
		line := fmt.Sprintf("  %5.1fs  %s", now.Sub(start).Seconds(), liveLine(st, prev, now.Sub(prevAt)))
		if con.tty {
			con.SetLive(line)
		} else {
			fmt.Fprintln(out, line)
		}
		prev, prevAt = st, now
	}
	con.EndLive()
	return time.Since(start), nil
}

// show compares the subscriber with the publisher row for row, sums up,
// and shows a few metrics and parapply status.
func (cmd *DemoCommand) show(ctx context.Context, pub, sub *pgx.Conn, d *demoRun, elapsed time.Duration) error {
	out := cmd.out
	fmt.Fprintln(out, "caught up; comparing the subscriber with the publisher row for row:")
	results, verr := verify.Tables(ctx, pub, sub, demoTables...)
	for _, r := range results {
		state := "identical"
		if !r.Equal {
			state = "DIFFERENT: " + r.Detail
		}
		fmt.Fprintf(out, "  %-16s %7d rows  %s\n", r.Table, r.Rows, state)
	}
	if verr != nil {
		return verr
	}
	st := d.s.Status()
	fmt.Fprintf(out, "summary: %d transactions, %d row changes (%d inserts, %d updates, %d deletes) in %d statements, applied in %.1fs; target verified equal to the publisher\n",
		st.Txns, st.Rows, st.Inserts, st.Updates, st.Deletes, st.Statements, elapsed.Seconds())

	// What an operator sees: a few of the metrics, and parapply status.
	time.Sleep(status.Interval + 200*time.Millisecond) // let the status record catch up
	fmt.Fprintln(out, "\nsome of the metrics (curl "+d.metricsURL+"):")
	if err := printMetrics(ctx, out, d.metricsURL, "parapply_lag_seconds", "parapply_rows_total", "parapply_commit_delay_seconds_count", "parapply_target_transactions_total"); err != nil {
		return err
	}
	fmt.Fprintln(out, "\nparapply status --target ... --source ...:")
	rep, err := collectStatus(ctx, sub, pub, demoSlot, false, "")
	if err != nil {
		return err
	}
	printStatus(out, rep)
	return nil
}

// printMetrics prints the series of the named families from a metrics
// endpoint, as curl would show them.
func printMetrics(ctx context.Context, out io.Writer, url string, names ...string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(body), "\n") {
		for _, n := range names {
			if strings.HasPrefix(line, n+"{") || strings.HasPrefix(line, n+" ") {
				fmt.Fprintln(out, "  "+line)
			}
		}
	}
	return nil
}

// demoWriter runs small mixed transactions: balance transfers, event
// inserts and deletes, and notes on a table without a key.
func demoWriter(ctx context.Context, dsn string, w int, nextEvent, txns *atomic.Int64) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	r := rand.New(rand.NewPCG(uint64(w), 42))
	for ctx.Err() == nil {
		b := &pgx.Batch{}
		b.Queue("BEGIN")
		from, to := 1+r.IntN(1000), 1+r.IntN(1000)
		amt := float64(r.IntN(10000)) / 100
		b.Queue("UPDATE accounts SET balance = balance - $2, updated = now(), state = 'busy' WHERE id = $1", from, amt)
		b.Queue("UPDATE accounts SET balance = balance + $2, updated = now(), tags = tags || 'paid'::text WHERE id = $1", to, amt)
		for i := 0; i < 1+r.IntN(20); i++ {
			b.Queue("INSERT INTO events (id, account, payload) VALUES ($1, $2, $3)", nextEvent.Add(1), from, fmt.Sprintf(`{"amount": %.2f, "to": %d, "n": %d}`, amt, to, i))
		}
		if r.IntN(4) == 0 {
			b.Queue("DELETE FROM events WHERE id = $1", r.Int64N(nextEvent.Load()+1))
		}
		switch r.IntN(3) {
		case 0:
			b.Queue("INSERT INTO notes VALUES ($1, $2)", from, fmt.Sprintf("note %d", r.IntN(50)))
		case 1:
			b.Queue("UPDATE notes SET note = note || '!' WHERE ctid = (SELECT ctid FROM notes WHERE account = $1 LIMIT 1)", from)
		}
		b.Queue("COMMIT")
		if err := c.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		txns.Add(1)
	}
	return ctx.Err()
}
