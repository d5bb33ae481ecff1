//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestPinTree: pinTree sets the CPUs of a process and of the processes it
// started (a shell and its background sleep, as a postmaster and its
// server processes), and a process they start afterwards inherits them.
func TestPinTree(t *testing.T) {
	pub, sub, err := cpuSides()
	if err != nil {
		t.Skip(err)
	}
	if cpuList(pub) == "" || cpuList(sub) == "" || cpuList(pub) == cpuList(sub) {
		t.Fatalf("sides %q and %q: want two disjoint, non-empty sets", cpuList(pub), cpuList(sub))
	}
	// The shell starts one sleep now and, once told (a file appears),
	// another.
	dir := t.TempDir()
	go_ := filepath.Join(dir, "go")
	cmd := exec.Command("sh", "-c", `sleep 30 & while [ ! -e "$1" ]; do sleep 0.05; done; sleep 30 & wait`, "sh", go_)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	first := waitChildren(t, cmd.Process.Pid, 1)
	if err := pinTree(cmd.Process.Pid, sub); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(go_, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	all := waitChildren(t, cmd.Process.Pid, 2)
	for _, pid := range append([]int{cmd.Process.Pid}, all...) {
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(pid, &got); err != nil {
			t.Fatal(err)
		}
		started := "started before the pinning"
		if pid != cmd.Process.Pid && pid != first[0] {
			started = "started after it"
		}
		if got != sub {
			t.Errorf("process %d (%s) runs on CPUs %s, want %s", pid, started, cpuList(got), cpuList(sub))
		}
	}
}

// waitChildren waits, up to five seconds, until process pid has n children,
// and returns their pids.
func waitChildren(t *testing.T, pid, n int) []int {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		kids := children(pid)
		// The shell's own sleep 0.05 calls come and go: count the 30 s ones.
		var sleeps []int
		for _, k := range kids {
			if b, _ := os.ReadFile("/proc/" + strconv.Itoa(k) + "/cmdline"); strings.Contains(string(b), "30") {
				sleeps = append(sleeps, k)
			}
		}
		if len(sleeps) >= n {
			return sleeps
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d has %d of the %d children waited for", pid, len(sleeps), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
