package source

import (
	"context"
	"net"
	"sync/atomic"
	"time"
)

// The publisher's walsender sends every message with a send() of its own.
// The replication connection's socket is normally a pacedConn (paced.go),
// which reads outside Go's poller and paces reads while data keeps coming
// and pace allows: inside large transactions always (in small reads),
// elsewhere unless parapply is a synchronous standby. Where the socket cannot be taken over,
// coalescingConn paces reads itself, inside large transactions only: after
// a streak of small reads it waits a moment before the next, so that one
// read takes many messages. Small transactions of a synchronous publisher
// are never delayed.

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
	allow *atomic.Bool // Source.largeTxn
	small int          // consecutive small reads
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
		// Config.Unpaced keeps the socket in Go's poller (for diagnosis);
		// so does a connection pacedConn cannot take over.
		if !s.cfg.Unpaced {
			if pc, err := pacedSocket(c, s.pace, s.cfg.NoTrickle); err == nil {
				return pc, nil
			}
		}
		return &coalescingConn{Conn: c, allow: &s.largeTxn}, nil
	}
}

// largeTxnRead bounds a paced read inside a large transaction. There the
// walsender sends row after row as fast as it decodes; a reader that
// empties the socket at every read keeps the TCP window open, and each of
// the walsender's sends is then carried through loopback TCP in its own
// time (on a 1M-row transaction, more walsender CPU and a longer delay
// after commit than with reads of 8 kB; docs/benchmarks.md). A reader a
// little behind keeps the window mostly closed and the
// walsender's sends cheap.
const largeTxnRead = 8 << 10

// pacedReadBuffer is the most one paced read takes (the reader's room
// bounds it too): far more than a walsender sends between two paced
// reads.
const pacedReadBuffer = 1 << 20

// pace tells pacedConn whether reads may be delayed now, and how much a
// paced read may take: inside a large transaction largeTxnRead; elsewhere
// up to its buffer while no synchronous publisher waits on parapply's
// replies (the rate must not be capped where rows are wide); 0 otherwise.
func (s *Source) pace() int {
	switch {
	case s.largeTxn.Load():
		return largeTxnRead
	case s.cfg.Prompt == nil || !s.cfg.Prompt.Load():
		return pacedReadBuffer
	}
	return 0
}

// txnTracker follows transaction boundaries by message tag, to tell the
// connection when reads may be delayed (largeTxn).
type txnTracker struct {
	inTxn   bool
	changes int
}

func (t *txnTracker) saw(tag byte, largeTxn *atomic.Bool) {
	switch tag {
	case 'B', 'S': // begin, stream start
		t.inTxn, t.changes = true, 0
	case 'C', 'E', 'c', 'A': // commit, stream stop, stream commit, stream abort
		t.inTxn, t.changes = false, 0
		largeTxn.Store(false)
	case 'I', 'U', 'D':
		t.changes++
		if t.changes == coalesceAfter && t.inTxn {
			largeTxn.Store(true)
		}
	}
}
