package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/subscriber"
)

// console is where parapply run writes: log records, and on a terminal one
// live status line kept below them. Every write has the connection
// passwords blanked out, in case a message ever quotes one.
type console struct {
	mu      sync.Mutex
	w       io.Writer
	tty     bool
	live    string
	secrets [][]byte
}

func newConsole(w io.Writer, dsns ...string) *console {
	c := &console{w: w, tty: isTerminal(w)}
	c.secrets = passwords(dsns...)
	return c
}

// passwords returns the passwords the connection strings (or PGPASSWORD)
// hold; those too short to be told from ordinary words are left out.
func passwords(dsns ...string) [][]byte {
	var out [][]byte
	for _, d := range dsns {
		if d == "" {
			continue
		}
		if cfg, err := pgconn.ParseConfig(d); err == nil && len(cfg.Password) >= 4 {
			out = append(out, []byte(cfg.Password))
		}
	}
	if p := os.Getenv("PGPASSWORD"); len(p) >= 4 {
		out = append(out, []byte(p))
	}
	return out
}

// redact blanks out the passwords in b.
func redact(b []byte, secrets [][]byte) []byte {
	for _, s := range secrets {
		if bytes.Contains(b, s) {
			b = bytes.ReplaceAll(b, s, []byte("********"))
		}
	}
	return b
}

// Write writes a log record above the live line.
func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := redact(p, c.secrets)
	if c.tty && c.live != "" {
		out = append(append([]byte("\r\033[K"), out...), c.live...)
	}
	if _, err := c.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// SetLive replaces the live line (on a terminal only).
func (c *console) SetLive(line string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.tty {
		return
	}
	c.live = string(redact([]byte(line), c.secrets))
	fmt.Fprint(c.w, "\r\033[K"+c.live)
}

// EndLive leaves the last live line on the screen and stops redrawing.
func (c *console) EndLive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tty && c.live != "" {
		fmt.Fprintln(c.w)
	}
	c.live = ""
}

// liveLine is the one-line view of a run: state, lag, positions, rates and
// workers; prev is the status dt ago.
func liveLine(st, prev subscriber.Status, dt time.Duration) string {
	var b strings.Builder
	b.WriteString(st.State)
	if p := st.Copy; st.State == subscriber.StateCopying && p != nil {
		pct, _, _ := subscriber.CopyEstimate(*p)
		frac := pct / 100
		const width = 20
		fmt.Fprintf(&b, " [%s%s] %3.0f%%  %d/%d tables  %d rows  %s  %.0f MB/s",
			strings.Repeat("#", int(frac*width)), strings.Repeat(".", width-int(frac*width)), frac*100,
			p.TablesDone, p.Tables, p.Rows, bytesText(p.Bytes), float64(p.Bytes)/max(p.Elapsed.Seconds(), 0.001)/(1<<20))
		return b.String()
	}
	lag := st.LagBytes()
	secs := max(dt.Seconds(), 0.001)
	fmt.Fprintf(&b, "  lag %.1f s, %s  applied %s  %.0f txn/s  %.0f rows/s", st.Lag.Seconds(), bytesText(lag), st.Applied,
		float64(st.Txns-prev.Txns)/secs, float64(st.Rows-prev.Rows)/secs)
	if n := len(st.Workers); n > 0 && len(prev.Workers) == n {
		var busy time.Duration
		for i, w := range st.Workers {
			busy += w.Busy - prev.Workers[i].Busy
		}
		if st.AutoWorkers && st.ActiveWorkers == 0 {
			b.WriteString("  workers auto: reader applies")
		} else {
			fmt.Fprintf(&b, "  workers %d, %.0f%% busy", n, 100*busy.Seconds()/secs/float64(n))
		}
	}
	if q := st.QueueBytes + st.StreamBytes; q > 0 {
		fmt.Fprintf(&b, "  queued %s", bytesText(q))
	}
	if w := st.Waiting; w != nil {
		fmt.Fprintf(&b, "  WAITING %s for %s: %s", w.Reason, time.Since(w.Since).Round(time.Second), w.Fix)
	}
	return b.String()
}
