package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/internal/verify"
)

// workload is one benchmark scenario.
type workload struct {
	// schema runs on both servers; preload (optional) too, so the
	// subscriber starts identical to the publisher without an initial copy.
	schema  string
	preload func(scale float64) string
	tables  []string
	// write runs on the publisher while the subscriber is stopped.
	write func(ctx context.Context, c *pgx.Conn, scale float64) error
}

type measurement struct {
	publisher, catchup, rssMB float64
	pgVersion                 string
}

func buildParapply() (string, error) {
	dir, err := os.MkdirTemp("", "parapply-bench-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "parapply")
	logf("building parapply")
	out, err := exec.Command("go", "build", "-o", path, "github.com/parapply/parapply/cmd/parapply").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building parapply: %v: %s", err, out)
	}
	return path, nil
}

const markerTable = "bench_marker"

// measure runs one workload once for one engine on a fresh pair.
func measure(ctx context.Context, o options, w workload, engine string) (m measurement, err error) {
	pair, err := pgtest.StartPair(ctx, nil, nil)
	if err != nil {
		return m, err
	}
	defer pair.Stop()
	pub, err := pgx.Connect(ctx, pair.Publisher.DSN("postgres"))
	if err != nil {
		return m, err
	}
	defer pub.Close(context.Background())
	sub, err := pgx.Connect(ctx, pair.Subscriber.DSN("postgres"))
	if err != nil {
		return m, err
	}
	defer sub.Close(context.Background())
	if err := pub.QueryRow(ctx, "SHOW server_version").Scan(&m.pgVersion); err != nil {
		return m, err
	}
	schema := w.schema + fmt.Sprintf("; CREATE TABLE %s (id int PRIMARY KEY, at timestamptz)", markerTable)
	for _, c := range []*pgx.Conn{pub, sub} {
		if _, err := c.Exec(ctx, schema); err != nil {
			return m, fmt.Errorf("schema: %w", err)
		}
		if w.preload != nil {
			if _, err := c.Exec(ctx, w.preload(o.scale)); err != nil {
				return m, fmt.Errorf("preload: %w", err)
			}
		}
		for _, q := range []string{"VACUUM ANALYZE", "CHECKPOINT"} {
			if _, err := c.Exec(ctx, q); err != nil {
				return m, err
			}
		}
	}
	tables := append(append([]string(nil), w.tables...), markerTable)
	if _, err := pub.Exec(ctx, "CREATE PUBLICATION bench FOR TABLE "+strings.Join(tables, ", ")); err != nil {
		return m, err
	}
	pubDSN, subDSN := pair.Publisher.DSN("postgres"), pair.Subscriber.DSN("postgres")

	// Set up the subscriber, let it start streaming, stop it.
	var start func() (stop func() float64, err error)
	switch engine {
	case "builtin":
		if _, err := sub.Exec(ctx, fmt.Sprintf("CREATE SUBSCRIPTION bench CONNECTION '%s' PUBLICATION bench WITH (copy_data = false)", pubDSN)); err != nil {
			return m, err
		}
		if err := waitSlot(ctx, pub, "bench", true); err != nil {
			return m, err
		}
		if _, err := sub.Exec(ctx, "ALTER SUBSCRIPTION bench DISABLE"); err != nil {
			return m, err
		}
		defer sub.Exec(context.Background(), "ALTER SUBSCRIPTION bench DISABLE; ALTER SUBSCRIPTION bench SET (slot_name = NONE); DROP SUBSCRIPTION bench")
		start = func() (func() float64, error) {
			_, err := sub.Exec(ctx, "ALTER SUBSCRIPTION bench ENABLE")
			return func() float64 {
				sub.Exec(context.Background(), "ALTER SUBSCRIPTION bench DISABLE")
				return 0
			}, err
		}
	case "parapply":
		args := []string{"run", "--source", pubDSN, "--target", subDSN, "--publication", "bench", "--slot", "bench"}
		p, err := startProcess(o.binary, args)
		if err != nil {
			return m, err
		}
		if err := waitSlot(ctx, pub, "bench", true); err != nil {
			p.stop()
			return m, fmt.Errorf("%v: %s", err, p.out.String())
		}
		p.stop()
		start = func() (func() float64, error) {
			p, err := startProcess(o.binary, args)
			if err != nil {
				return nil, err
			}
			return p.stop, nil
		}
	}
	if err := waitSlot(ctx, pub, "bench", false); err != nil {
		return m, err
	}

	t0 := time.Now()
	if err := w.write(ctx, pub, o.scale); err != nil {
		return m, fmt.Errorf("workload: %w", err)
	}
	m.publisher = time.Since(t0).Seconds()
	if _, err := pub.Exec(ctx, "INSERT INTO "+markerTable+" VALUES (1, now())"); err != nil {
		return m, err
	}
	logf("publisher wrote the workload in %.2fs; starting the subscriber", m.publisher)

	t1 := time.Now()
	stop, err := start()
	if err != nil {
		return m, err
	}
	err = waitMarker(ctx, sub)
	m.catchup = time.Since(t1).Seconds()
	m.rssMB = stop()
	if err != nil {
		return m, err
	}
	if err := verify.Checksums(ctx, pub, sub, tables...); err != nil {
		return m, fmt.Errorf("verification: %w", err)
	}
	return m, nil
}

func waitSlot(ctx context.Context, pub *pgx.Conn, slot string, active bool) error {
	for i := 0; i < 1200; i++ {
		var a bool
		err := pub.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&a)
		if err == nil && a == active {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("slot %s did not become active=%v within 60s", slot, active)
}

// waitMarker waits, polling every 5 ms, for the marker row: both engines
// commit in source order, so once it is visible everything before it is.
func waitMarker(ctx context.Context, sub *pgx.Conn) error {
	deadline := time.Now().Add(2 * time.Hour)
	for time.Now().Before(deadline) {
		var n int
		if err := sub.QueryRow(ctx, "SELECT count(*) FROM "+markerTable).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return fmt.Errorf("subscriber did not catch up within 2 hours")
}

type process struct {
	cmd  *exec.Cmd
	out  bytes.Buffer
	done chan struct{}
}

func startProcess(bin string, args []string) (*process, error) {
	p := &process{cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	return p, nil
}

// stop ends the process with SIGTERM and returns its peak RSS in MB.
func (p *process) stop() float64 {
	rss := peakRSS(p.cmd.Process.Pid)
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
	return rss
}

// peakRSS reads VmHWM (the peak resident set) of a live process, in MB.
func peakRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			if len(f) >= 2 {
				kb, _ := strconv.ParseFloat(f[1], 64)
				return kb / 1024
			}
		}
	}
	return 0
}
