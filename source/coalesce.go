package source

import (
	"context"
	"net"
	"sync/atomic"
	"time"
)

// The publisher's walsender sends every message with a send() of its own,
// and a reader that keeps up receives them one read() at a time: a syscall
// and a goroutine wake-up per row change, which on a busy machine takes the
// CPU the walsender itself needs. Inside a large transaction (where nothing
// can be confirmed before its commit anyway), coalescingConn waits a moment
// before a read when reads keep coming back small, so that one read takes
// many messages. Elsewhere, and for small transactions whose commit a
// synchronous publisher may be waiting for, reads are never delayed.

const (
	smallRead   = 16 << 10
	smallStreak = 4
	readPause   = 300 * time.Microsecond // about a millisecond in practice
	// coalesceAfter is the number of row changes a transaction (or a
	// stream block) must have before its reads may be delayed.
	coalesceAfter = 1000
)

type coalescingConn struct {
	net.Conn
	allow atomic.Bool
	small int // consecutive small reads
}

func (c *coalescingConn) Read(p []byte) (int, error) {
	if c.small >= smallStreak && c.allow.Load() {
		time.Sleep(readPause)
	}
	start := time.Now()
	n, err := c.Conn.Read(p)
	if n >= smallRead || time.Since(start) > time.Millisecond {
		// Full, or the read waited: the stream is not trickling.
		c.small = 0
	} else {
		c.small++
	}
	return n, err
}

func (s *Source) coalescingDialer(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		s.coalesce = &coalescingConn{Conn: c}
		return s.coalesce, nil
	}
}

// txnTracker follows transaction boundaries by message tag, to tell the
// connection when reads may be delayed.
type txnTracker struct {
	inTxn   bool
	changes int
}

func (t *txnTracker) saw(tag byte, c *coalescingConn) {
	switch tag {
	case 'B', 'S': // begin, stream start
		t.inTxn, t.changes = true, 0
	case 'C', 'E', 'c', 'A': // commit, stream stop, stream commit, stream abort
		t.inTxn, t.changes = false, 0
		if c != nil {
			c.allow.Store(false)
		}
	case 'I', 'U', 'D':
		t.changes++
		if t.changes == coalesceAfter && t.inTxn && c != nil {
			c.allow.Store(true)
		}
	}
}
