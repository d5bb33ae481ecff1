//go:build !linux

package source

import (
	"errors"
	"net"
)

// pacedSocket needs Linux's socket queries (the bytes queued, the receive
// window); elsewhere the replication connection stays a coalescingConn.
func pacedSocket(net.Conn, func() int, bool) (net.Conn, error) {
	return nil, errors.New("paced reads need Linux")
}
