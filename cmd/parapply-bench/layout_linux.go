//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// checkSeparate tells whether this machine can take the separate layout
// (at least two CPUs this process may use).
func checkSeparate() error {
	_, _, err := cpuSides()
	return err
}

// cpuSides splits the CPUs this process may use into the publisher's half
// and the subscriber's (on two CPUs, one each).
func cpuSides() (pub, sub unix.CPUSet, err error) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return pub, sub, fmt.Errorf("reading this process's CPUs: %w", err)
	}
	var cpus []int
	for i := 0; i < len(all)*64; i++ {
		if all.IsSet(i) {
			cpus = append(cpus, i)
		}
	}
	if len(cpus) < 2 {
		return pub, sub, fmt.Errorf("--layout %s needs at least two CPUs, this process may use %d", layoutSeparate, len(cpus))
	}
	for i, c := range cpus {
		if i < len(cpus)/2 {
			pub.Set(c)
		} else {
			sub.Set(c)
		}
	}
	return pub, sub, nil
}

// cpuList is set as taskset's -c list.
func cpuList(set unix.CPUSet) string {
	var l []string
	for i := 0; i < len(set)*64; i++ {
		if set.IsSet(i) {
			l = append(l, strconv.Itoa(i))
		}
	}
	return strings.Join(l, ",")
}

// pinTree sets the CPUs of process pid, every thread of it, and every
// process it started, theirs too: a postmaster and its server processes
// (those it starts later inherit the postmaster's).
func pinTree(pid int, set unix.CPUSet) error {
	if err := pinThreads(pid, set); err != nil {
		return err
	}
	for _, child := range children(pid) {
		if err := pinTree(child, set); err != nil {
			return err
		}
	}
	return nil
}

// children lists the processes whose parent is pid.
func children(pid int) []int {
	var out []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // ended since
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(string(b[i+1:])); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			child, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			out = append(out, child)
		}
	}
	return out
}

// pinThreads sets the CPUs of every thread of process pid.
func pinThreads(pid int, set unix.CPUSet) error {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/[0-9]*", pid))
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, _ := strconv.Atoi(filepath.Base(t))
		if err := unix.SchedSetaffinity(tid, &set); err != nil && err != unix.ESRCH {
			return fmt.Errorf("setting the CPUs of process %d: %w", pid, err)
		}
	}
	return nil
}

// separate pins the publisher's and the subscriber's servers (postmaster
// pids) to their sides, and this process (the clients) to the publisher's,
// and returns what puts this process back on every CPU it had.
func separate(pubPID, subPID int) (restore func(), cpus string, err error) {
	var all unix.CPUSet
	if err := unix.SchedGetaffinity(0, &all); err != nil {
		return nil, "", err
	}
	pub, sub, err := cpuSides()
	if err != nil {
		return nil, "", err
	}
	if err := pinTree(pubPID, pub); err != nil {
		return nil, "", err
	}
	if err := pinTree(subPID, sub); err != nil {
		return nil, "", err
	}
	if err := pinThreads(os.Getpid(), pub); err != nil {
		return nil, "", err
	}
	logf("layout separate: the publisher and the clients on CPUs %s, the subscriber and parapply on CPUs %s", cpuList(pub), cpuList(sub))
	return func() { _ = pinThreads(os.Getpid(), all) }, cpuList(sub), nil
}
