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
)

// engine is one subscriber under test: the built-in subscription or a
// parapply process.
type engine interface {
	// start begins applying; it may be called again after stop.
	start(ctx context.Context) error
	// stop stops applying and returns parapply's peak RSS in MB (0 for the
	// built-in).
	stop() float64
	// appName is the name the publisher sees in pg_stat_replication.
	appName() string
	// close releases everything, including the slot's connection.
	close()
}

type builtin struct {
	sub  *pgx.Conn
	name string
}

func newBuiltin(ctx context.Context, sub *pgx.Conn, pubDSN string, copyData bool) (*builtin, error) {
	b := &builtin{sub: sub, name: "bench"}
	_, err := sub.Exec(ctx, fmt.Sprintf("CREATE SUBSCRIPTION bench CONNECTION '%s' PUBLICATION bench WITH (copy_data = %v, enabled = false)", pubDSN, copyData))
	return b, err
}

func (b *builtin) start(ctx context.Context) error {
	_, err := b.sub.Exec(ctx, "ALTER SUBSCRIPTION bench ENABLE")
	return err
}

func (b *builtin) stop() float64 {
	_, _ = b.sub.Exec(context.Background(), "ALTER SUBSCRIPTION bench DISABLE")
	return 0
}

func (b *builtin) appName() string { return b.name }

func (b *builtin) close() {
	_, _ = b.sub.Exec(context.Background(), "ALTER SUBSCRIPTION bench DISABLE")
	_, _ = b.sub.Exec(context.Background(), "ALTER SUBSCRIPTION bench SET (slot_name = NONE)")
	_, _ = b.sub.Exec(context.Background(), "DROP SUBSCRIPTION bench")
}

type parapplyEngine struct {
	bin  string
	args []string
	p    *process
	// lastLog is the output of the process stopped last, for a wait
	// on the slot that fails after it (waitSlot).
	lastLog string
}

// newParapply makes the engine of a parapply binary; with cpus (a taskset
// list), the process runs on those CPUs only (--layout separate).
func newParapply(bin, pubDSN, subDSN string, workers int, copyData bool, flags []string, cpus string) (*parapplyEngine, error) {
	cp := "off"
	if copyData {
		cp = "on"
	}
	args := []string{"run", "--source", pubDSN, "--target", subDSN, "--publication", "bench", "--slot", "bench", "--application-name", "parapply", "--copy-data", cp}
	if workers != autoWorkers {
		// auto is the default; left out, an older build (binary=PATH)
		// runs at its own default.
		args = append(args, "--workers", workersText(workers))
	}
	args = append(args, flags...)
	if cpus != "" {
		// taskset sets the CPUs and executes parapply in its place: the
		// process measured is parapply's.
		args = append([]string{"-c", cpus, bin}, args...)
		bin = "taskset"
	}
	return &parapplyEngine{bin: bin, args: args}, nil
}

func (e *parapplyEngine) start(ctx context.Context) error {
	p, err := startProcess(e.bin, e.args)
	if err != nil {
		return err
	}
	e.p = p
	return nil
}

func (e *parapplyEngine) stop() float64 {
	if e.p == nil {
		return 0
	}
	rss := e.p.stop()
	e.lastLog = e.p.out.String()
	if os.Getenv("PARAPPLY_BENCH_SHOW_LOG") != "" {
		fmt.Fprint(os.Stderr, e.lastLog)
	}
	e.p = nil
	return rss
}

func (e *parapplyEngine) appName() string { return "parapply" }

func (e *parapplyEngine) close() { e.stop() }

// exited reports a parapply process that ended on its own, with its output.
func (e *parapplyEngine) exited() error {
	if e.p == nil {
		return nil
	}
	select {
	case <-e.p.done:
		return fmt.Errorf("parapply exited: %s", strings.TrimSpace(e.p.out.String()))
	default:
		return nil
	}
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
		return "", fmt.Errorf("building parapply: %w: %s", err, out)
	}
	return path, nil
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
	go func() { _ = p.cmd.Wait(); close(p.done) }() // the exit is read from the output
	return p, nil
}

// stop ends the process with SIGTERM and returns its peak RSS in MB.
func (p *process) stop() float64 {
	rss := peakRSS(p.cmd.Process.Pid)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
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
