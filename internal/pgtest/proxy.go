package pgtest

import (
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// Proxy forwards TCP connections from a loopback port to a server, and can
// cut them: the faults of a network between parapply and a server.
type Proxy struct {
	Port int

	to    string
	ln    net.Listener
	mu    sync.Mutex
	conns map[net.Conn]struct{}
	down  time.Time // new connections are refused until then
	cuts  int
	wg    sync.WaitGroup
}

// NewProxy listens on a free loopback port and forwards to port on
// 127.0.0.1.
func NewProxy(port int) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Port: ln.Addr().(*net.TCPAddr).Port, to: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// DSN is s's connection string for database db through the proxy.
func (p *Proxy) DSN(db string) string { return p.DSNAs(db, "postgres") }

// DSNAs is DSN as role user, as Server.DSNAs.
func (p *Proxy) DSNAs(db, user string) string { return dsn(p.Port, db, user) }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := time.Now().Before(p.down)
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.to, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
			p.mu.Lock()
			delete(p.conns, dst)
			delete(p.conns, src)
			p.mu.Unlock()
		}
		go pipe(s, c)
		go pipe(c, s)
	}
}

// Cut closes every connection through the proxy (both ends see them
// reset) and refuses new ones for the given time.
func (p *Proxy) Cut(refuseFor time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = time.Now().Add(refuseFor)
	p.cuts++
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // a reset, not an orderly close
		}
		c.Close()
	}
}

// Open returns the number of connections currently forwarded (each counted
// once per side).
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// Close stops accepting and cuts every connection.
func (p *Proxy) Close() {
	p.ln.Close()
	p.Cut(0)
	p.wg.Wait()
}
