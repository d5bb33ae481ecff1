package pgtest

import "syscall"

// serverProcAttr starts the postmaster as cred, in a process group of its
// own (killed as one), and sends it SIGQUIT (immediate shutdown) if the
// test binary dies without stopping it.
func serverProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGQUIT}
}
