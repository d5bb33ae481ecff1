//go:build !unix

package subscriber

import "os"

// processAlive tells whether a process of this host has that pid: where
// there are no signals, whether it can be opened.
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	_ = p.Release()
	return true
}
