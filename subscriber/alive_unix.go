//go:build unix

package subscriber

import "syscall"

// processAlive tells whether a process of this host has that pid (signal 0
// checks without sending; EPERM: it exists, as another user's).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
