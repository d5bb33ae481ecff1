package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// backendCPU is the CPU time the server process pid has used (the
// scheduler's count, in nanoseconds: /proc/pid/schedstat).
func backendCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseInt(strings.Fields(string(b))[0], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Duration(ns)
}

// TestIdleTunerQuiet: with workers = auto and nothing to apply, the session
// that watches the target's sessions samples pg_stat_activity a few times
// a second, not every 10 ms: its backend's CPU over five idle seconds
// stays under a bound that sampling every 10 ms exceeds (here 10 ms of
// CPU per second and more), and the run still applies what comes after.
func TestIdleTunerQuiet(t *testing.T) {
	e := newEnv(t, `CREATE TABLE a (id int PRIMARY KEY, v text)`)
	cfg := e.config("idle")
	cfg.Workers, cfg.AutoWorkers = 2, true
	r := e.start(cfg)
	var pid int
	deadline := time.Now().Add(30 * time.Second)
	for e.sub.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity WHERE application_name LIKE '% tuner'`).Scan(&pid) != nil {
		if time.Now().After(deadline) {
			t.Fatal("no tuner session on the target after 30 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // past the first idle samples
	before := backendCPU(t, pid)
	time.Sleep(5 * time.Second)
	used := backendCPU(t, pid) - before
	t.Logf("the tuner's backend used %s of CPU in 5 idle seconds", used)
	if used > 20*time.Millisecond {
		t.Errorf("the tuner's backend used %s of CPU in 5 s with nothing to apply: it samples as if the appliers were busy", used)
	}
	e.exec(e.pub, `INSERT INTO a SELECT g, 'x' FROM generate_series(1, 1000) g`)
	e.waitCaughtUp(r)
	e.verify("public.a")
}
