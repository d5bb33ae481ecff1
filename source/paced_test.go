//go:build linux

package source

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// pacedPair connects a pacedConn (reading) to a plain TCP peer (writing).
func pacedPair(t *testing.T, pace func() int) (*pacedConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	p, err := newPacedConn(c, pace)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(); peer.Close() })
	return p, peer
}

func TestPacedConnCarriesBytesBothWays(t *testing.T) {
	for _, limit := range []int{0, 8 << 10, pacedReadBuffer} {
		paced := limit > 0
		p, peer := pacedPair(t, func() int { return limit })
		want := make([]byte, 3<<20)
		for i := range want {
			want[i] = byte(i * 7)
		}
		go func() {
			// Uneven writes, some after a pause, as a walsender sends.
			for off := 0; off < len(want); {
				n := min(1+off%9000, len(want)-off)
				_, _ = peer.Write(want[off : off+n])
				off += n
				if off%100 == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
		got := make([]byte, len(want))
		// Reads of 8 kB at a time, as the protocol reader asks.
		for off := 0; off < len(got); {
			n, err := p.Read(got[off:min(off+8192, len(got))])
			if err != nil {
				t.Fatalf("paced=%v: read at %d: %v", paced, off, err)
			}
			off += n
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("paced=%v: bytes differ", paced)
		}
		if _, err := p.Write([]byte("reply")); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 5)
		if _, err := io.ReadFull(peer, buf); err != nil || string(buf) != "reply" {
			t.Fatalf("paced=%v: peer read %q, %v", paced, buf, err)
		}
	}
}

func TestPacedConnDeadlines(t *testing.T) {
	p, peer := pacedPair(t, func() int { return 0 })
	// A deadline in the past: a timeout at once, and the connection
	// stays usable (pgconn renews the deadline and reads again).
	_ = p.SetReadDeadline(time.Unix(1, 0))
	_, err := p.Read(make([]byte, 10))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past its deadline: %v, want a timeout", err)
	}
	// A deadline set while a read is blocked wakes it.
	_ = p.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := p.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	began := time.Now()
	_ = p.SetReadDeadline(time.Now())
	select {
	case err := <-done:
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("woken read: %v, want a timeout", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("SetReadDeadline did not wake a blocked read")
	}
	t.Logf("woken in %s", time.Since(began))
	_ = p.SetReadDeadline(time.Time{})
	_, _ = peer.Write([]byte("after"))
	buf := make([]byte, 5)
	if _, err := io.ReadFull(p, buf); err != nil || string(buf) != "after" {
		t.Fatalf("read after timeouts: %q, %v", buf, err)
	}
	// Close wakes a blocked read too.
	go func() {
		_, err := p.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	p.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("read on a closed connection returned no error")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not wake a blocked read")
	}
}

// TestPacedConnPacesOnlyABacklog checks that a read pauses only while
// data keeps coming and pacing is allowed: a read after a wait is made at
// once.
func TestPacedConnPacesOnlyABacklog(t *testing.T) {
	var limit atomic.Int64
	p, peer := pacedPair(t, func() int { return int(limit.Load()) })
	limit.Store(pacedReadBuffer)
	buf := make([]byte, 64)
	// Nothing waiting: the read waits, and the next read (after a wait)
	// does not pause.
	go func() {
		time.Sleep(20 * time.Millisecond)
		_, _ = peer.Write([]byte("x"))
	}()
	if _, err := p.Read(buf); err != nil {
		t.Fatal(err)
	}
	if !p.waited {
		t.Fatal("a read that found nothing is not marked as having waited")
	}
	_, _ = peer.Write([]byte("y"))
	time.Sleep(10 * time.Millisecond)
	if _, err := p.Read(buf); err != nil {
		t.Fatal(err)
	}
	if p.waited {
		t.Fatal("a read that found data is marked as having waited")
	}
	// With data waiting and pacing allowed, the next read pauses first.
	_, _ = peer.Write([]byte("z"))
	time.Sleep(10 * time.Millisecond)
	began := time.Now()
	if _, err := p.Read(buf); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d < readPause {
		t.Errorf("paced read took %s, want a pause of at least %s", d, readPause)
	}
	// A paced read takes no more than the limit, however much waits.
	limit.Store(100)
	_, _ = peer.Write(make([]byte, 5000))
	time.Sleep(10 * time.Millisecond)
	if n, err := p.Read(make([]byte, 8192)); err != nil || n > 100 {
		t.Errorf("read with a limit of 100 took %d bytes (%v)", n, err)
	}
}

// TestDialerSwitches: Config.Unpaced leaves the connection in Go's poller
// (coalescingConn), and Config.NoTrickle reaches the paced connection, as
// PARAPPLY_PACED=off and PARAPPLY_TRICKLE=off did when package source read
// them itself.
func TestDialerSwitches(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	tests := []struct {
		cfg        Config
		paced      bool
		trickleOff bool
	}{
		{Config{}, true, false},
		{Config{NoTrickle: true}, true, true},
		{Config{Unpaced: true}, false, false},
		{Config{Unpaced: true, NoTrickle: true}, false, false},
	}
	var d net.Dialer
	for _, tt := range tests {
		s := &Source{cfg: tt.cfg}
		c, err := s.coalescingDialer(d.DialContext)(t.Context(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		switch pc := c.(type) {
		case *pacedConn:
			if !tt.paced || pc.trickleOff != tt.trickleOff {
				t.Errorf("Unpaced %v, NoTrickle %v: a paced connection, trickleOff %v; want paced %v, trickleOff %v",
					tt.cfg.Unpaced, tt.cfg.NoTrickle, pc.trickleOff, tt.paced, tt.trickleOff)
			}
		case *coalescingConn:
			if tt.paced {
				t.Errorf("Unpaced %v, NoTrickle %v: a coalescing connection; want a paced one", tt.cfg.Unpaced, tt.cfg.NoTrickle)
			}
		default:
			t.Errorf("Unpaced %v: a %T", tt.cfg.Unpaced, c)
		}
		c.Close()
	}
}
