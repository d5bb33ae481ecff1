//go:build !linux

package pgtest

import "syscall"

// serverProcAttr starts the postmaster as cred in a process group of its
// own; without Linux's parent-death signal a server outlives a test binary
// that dies without stopping it.
func serverProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true}
}
