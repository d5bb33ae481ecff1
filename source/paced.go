//go:build linux

package source

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// pacedConn reads the replication connection with plain system calls,
// outside Go's network poller. Go registers every socket with its poller,
// and the thread that sleeps for the next timer sleeps in that poller: each
// segment the walsender sends wakes it, whether or not anything reads. On
// loopback that wake-up, and the receiving side of TCP, run in the
// walsender's own time, and the walsender sends one segment per message: a
// reader that keeps up, or merely sleeps, roughly doubles the walsender's
// CPU per row change. pacedConn's socket is in no poller. While reads may
// be paced and data keeps coming, it sleeps a moment before each read and
// then takes what arrived, up to the limit pace gives, so nothing is woken
// per message; when nothing is waiting it blocks in poll(2) on the socket
// and a wake pipe (deadlines, Close).
type pacedConn struct {
	fd            int
	wakeR, wakeW  int
	local, remote net.Addr
	pace          func() int   // 0: read at once; else pause, then read at most that much
	mu            sync.RWMutex // held shared by reads and writes, exclusively by Close
	deadlineMu    sync.Mutex
	rdl, wdl      time.Time
	closed        atomic.Bool
	waited        bool // the last read found nothing and had to wait
	cut           bool // the last read filled the reader's room before the pace's limit
	trickleOff    bool // Config.NoTrickle: pause before every read, even while the window is closed
}

// pacedSocket is newPacedConn for the dialer: reads paced as pace says,
// and with noTrickle a pause before every read (Config.NoTrickle).
func pacedSocket(c net.Conn, pace func() int, noTrickle bool) (net.Conn, error) {
	p, err := newPacedConn(c, pace)
	if err != nil {
		return nil, err
	}
	p.trickleOff = noTrickle
	return p, nil
}

// newPacedConn takes over c's socket and closes c; pace tells whether
// reads may be delayed now, and by how much a paced read is bounded. On
// error c is left as it was.
func newPacedConn(c net.Conn, pace func() int) (*pacedConn, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var derr error
	if err := raw.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, derr
	}
	var pipe [2]int
	err = unix.SetNonblock(fd, true)
	if err == nil {
		err = unix.Pipe2(pipe[:], unix.O_NONBLOCK|unix.O_CLOEXEC)
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	p := &pacedConn{fd: fd, wakeR: pipe[0], wakeW: pipe[1], local: c.LocalAddr(), remote: c.RemoteAddr(), pace: pace}
	// Closing c takes the socket out of Go's poller; the duplicate keeps
	// it open.
	_ = c.Close()
	return p, nil
}

// Read reads into b directly (the stream's reader hands it a chunk's free
// room, so nothing is copied twice); a paced read takes at most what pace
// allows.
func (p *pacedConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	buf := b
	limit := p.pace()
	if limit > 0 && !p.waited && !p.cut {
		limit = p.paced(limit)
		buf = b[:min(limit, len(b))]
	}
	p.waited, p.cut = false, false
	for {
		if p.closed.Load() {
			return 0, net.ErrClosed
		}
		n, err := unix.Read(p.fd, buf)
		switch {
		case n > 0:
			// A read the room cut short leaves more waiting: the next
			// one goes at once, as a read into a larger room would have
			// taken it.
			p.cut = n == len(buf) && len(buf) < limit
			return n, nil
		case n == 0 && err == nil:
			return 0, io.EOF
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EAGAIN):
			p.waited = true
			if err := p.wait(unix.POLLIN, true); err != nil {
				return 0, err
			}
		default:
			return 0, &net.OpError{Op: "read", Net: "tcp", Source: p.local, Addr: p.remote, Err: os.NewSyscallError("read", err)}
		}
	}
}

// Trickle reading (while the receive window is closed): see paced.
const (
	trickleRead = 8 << 10
	// closedWindow is the advertised window below which the socket counts
	// as full (on loopback the window opens a segment of 64 kB at a time).
	closedWindow = 128 << 10
	fillWait     = 20 * time.Millisecond
)

// paced pauses before a read and returns how much it may take. The
// walsender's sends are cheap only while the TCP window is closed (they
// queue, and reach the socket in bulk when a read reopens the window); a
// reader that empties the socket keeps the window open and each send
// crosses loopback TCP in the walsender's own time (perf on the walsender
// during an insert catch-up: most of its samples in send, and more CPU than
// beside the built-in; docs/benchmarks.md). So while the window this side
// advertises is closed it takes trickleRead at a time without pausing:
// each read reopens the window a little, the walsender's sends keep
// queueing, and the rate is not capped. Otherwise it waits, a pause at a
// time, for the window to close, at most fillWait (the walsender sends a
// transaction's changes in a burst at its commit, then decodes the next one
// in silence: reading everything in each silence reopened the window every
// time), and reads at once what arrives on an empty socket. Where the
// kernel does not report the window, it pauses once and takes up to limit.
func (p *pacedConn) paced(limit int) int {
	if p.trickleOff {
		time.Sleep(readPause)
		return limit
	}
	q := p.queued()
	closed, known := p.windowClosed(q)
	if closed {
		return trickleRead
	}
	if !known || limit <= trickleRead {
		time.Sleep(readPause)
		return limit
	}
	if q >= limit {
		return limit // a whole read is waiting: pausing would only cap the rate
	}
	deadline := time.Now().Add(fillWait)
	for {
		time.Sleep(readPause)
		q := p.queued()
		if q == 0 || q >= limit {
			return limit
		}
		if closed, _ := p.windowClosed(q); closed {
			return trickleRead
		}
		if time.Now().After(deadline) {
			return limit
		}
	}
}

// windowClosed reports whether the receive window this side advertises is
// (nearly) closed with queued bytes waiting: smaller than closedWindow and
// than what waits, so the socket is mostly full; and whether the kernel
// tells (tcpi_rcv_wnd, Linux 6.2+).
func (p *pacedConn) windowClosed(queued int) (closed, known bool) {
	ti, err := unix.GetsockoptTCPInfo(p.fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	if err != nil || (ti.Rcv_wnd == 0 && ti.Rcv_space == 0) {
		return false, false
	}
	return queued > 0 && ti.Rcv_wnd < closedWindow && int(ti.Rcv_wnd) < queued, true
}

// queued returns the bytes waiting in the socket (0 if it cannot tell).
func (p *pacedConn) queued() int {
	n, err := unix.IoctlGetInt(p.fd, unix.SIOCINQ)
	if err != nil {
		return 0
	}
	return n
}

func (p *pacedConn) Write(b []byte) (int, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	done := 0
	for done < len(b) {
		if p.closed.Load() {
			return done, net.ErrClosed
		}
		n, err := unix.Write(p.fd, b[done:])
		if n > 0 {
			done += n
		}
		switch {
		case err == nil:
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			if err := p.wait(unix.POLLOUT, false); err != nil {
				return done, err
			}
		default:
			return done, &net.OpError{Op: "write", Net: "tcp", Source: p.local, Addr: p.remote, Err: os.NewSyscallError("write", err)}
		}
	}
	return done, nil
}

// wait blocks until the socket is ready for events, the deadline passes
// (os.ErrDeadlineExceeded, a timeout for pgconn), or Close.
func (p *pacedConn) wait(events int16, read bool) error {
	for {
		p.deadlineMu.Lock()
		dl := p.wdl
		if read {
			dl = p.rdl
		}
		p.deadlineMu.Unlock()
		timeout := -1
		if !dl.IsZero() {
			left := time.Until(dl)
			if left <= 0 {
				return os.ErrDeadlineExceeded
			}
			timeout = int((left + time.Millisecond - 1) / time.Millisecond)
		}
		if p.closed.Load() {
			return net.ErrClosed
		}
		fds := []unix.PollFd{{Fd: int32(p.fd), Events: events}, {Fd: int32(p.wakeR), Events: unix.POLLIN}}
		_, err := unix.Poll(fds, timeout)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return os.NewSyscallError("poll", err)
		}
		if fds[1].Revents != 0 {
			var drain [64]byte
			for {
				if n, _ := unix.Read(p.wakeR, drain[:]); n <= 0 {
					break
				}
			}
		}
		if fds[0].Revents != 0 {
			return nil
		}
	}
}

// wake interrupts a wait so that it sees a new deadline or Close.
func (p *pacedConn) wake() {
	_, _ = unix.Write(p.wakeW, []byte{0})
}

func (p *pacedConn) Close() error {
	if p.closed.Swap(true) {
		return net.ErrClosed
	}
	_ = unix.Shutdown(p.fd, unix.SHUT_RDWR)
	p.wake()
	p.mu.Lock()
	defer p.mu.Unlock()
	unix.Close(p.wakeR)
	unix.Close(p.wakeW)
	return unix.Close(p.fd)
}

func (p *pacedConn) LocalAddr() net.Addr  { return p.local }
func (p *pacedConn) RemoteAddr() net.Addr { return p.remote }

func (p *pacedConn) SetDeadline(t time.Time) error      { return p.setDeadline(t, true, true) }
func (p *pacedConn) SetReadDeadline(t time.Time) error  { return p.setDeadline(t, true, false) }
func (p *pacedConn) SetWriteDeadline(t time.Time) error { return p.setDeadline(t, false, true) }

// setDeadline sets the read or write deadline, or both, and wakes a wait
// so that it sees it.
func (p *pacedConn) setDeadline(t time.Time, read, write bool) error {
	p.deadlineMu.Lock()
	if read {
		p.rdl = t
	}
	if write {
		p.wdl = t
	}
	p.deadlineMu.Unlock()
	p.wake()
	return nil
}
