package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// bigTxn measures (a) the delay between the publisher's commit of one big
// transaction and its visibility on the subscriber, with the subscriber
// running, and (b) the publisher's TPS under ~36 kB-WAL transactions with
// the subscriber as its synchronous standby.
func (r *runEnv) bigTxn(ctx context.Context, w workload, m *measurement) error {
	if err := r.prime(ctx); err != nil {
		return err
	}
	rows := scaled(1000000, r.o.scale)
	var sender int
	if err := r.pub.QueryRow(ctx, "SELECT pid FROM pg_stat_replication WHERE application_name = $1", r.eng.appName()).Scan(&sender); err != nil {
		return fmt.Errorf("finding the subscriber's walsender: %w", err)
	}
	cpu0 := cpuSnapshot(sender)
	t0 := time.Now()
	if _, err := r.pub.Exec(ctx, "INSERT INTO big SELECT g, 'row ' || g FROM generate_series(1, $1::int) g", rows); err != nil {
		return err
	}
	committed := time.Now()
	m.publisher = committed.Sub(t0).Seconds()
	// How long the walsender still decodes after the commit: the rest of
	// the delay is the subscriber's.
	decoded := make(chan time.Duration, 1)
	go func() { decoded <- r.decodedAfter(ctx, committed) }()
	dr, drained := r.eng.(*drain)
	if drained {
		// The publisher's floor: the commit has arrived.
		if err := dr.waitBig(ctx, 1); err != nil {
			return err
		}
	} else if err := r.waitFor(ctx, fmt.Sprintf("SELECT EXISTS (SELECT 1 FROM big WHERE id = %d)", rows), time.Hour); err != nil {
		return err
	}
	m.catchup = time.Since(committed).Seconds()
	logf("big transaction: %d rows in %.2fs on the publisher, visible on the subscriber %.2fs after its commit", rows, m.publisher, m.catchup)
	if d := <-decoded; d >= 0 {
		logf("big transaction: the walsender had decoded past the commit %.2fs after it", d.Seconds())
	}
	logf("big transaction: %s", cpuSnapshot(sender).since(cpu0))
	if drained {
		// Its replies go every second: as a synchronous standby it would
		// measure its status interval, not the publisher.
		m.rssMB = r.eng.stop()
		return nil
	}

	// (b) synchronous standby.
	for _, q := range []string{
		fmt.Sprintf("ALTER SYSTEM SET synchronous_standby_names = '\"%s\"'", r.eng.appName()),
		"SELECT pg_reload_conf()",
	} {
		if _, err := r.pub.Exec(ctx, q); err != nil {
			return err
		}
	}
	if err := r.waitFor0(ctx); err != nil {
		return err
	}
	d := seconds(20, r.o.scale)
	txns, err := clients(ctx, r.pubDSN, 8, d, func(ctx context.Context, c *pgx.Conn, rnd *rand.Rand) error {
		// wal_test.sql: 80 rows of 8000 characters, about 36 kB of WAL.
		_, err := c.Exec(ctx, fmt.Sprintf("INSERT INTO wal_bloat_%d (data) SELECT repeat('x', 8000) FROM generate_series(1, 80)", 1+rnd.IntN(walBloatCount)))
		return err
	})
	if err != nil {
		return err
	}
	m.sustainedTPS = float64(txns) / d.Seconds()
	logf("synchronous standby: %d transactions in %s: %.1f TPS", txns, d, m.sustainedTPS)
	for _, q := range []string{"ALTER SYSTEM RESET synchronous_standby_names", "SELECT pg_reload_conf()"} {
		if _, err := r.pub.Exec(ctx, q); err != nil {
			return err
		}
	}
	if err := r.mark(ctx); err != nil {
		return err
	}
	err = r.waitMarker(ctx)
	m.rssMB = r.eng.stop()
	return err
}

// waitFor0 waits until the publisher lists the subscriber as synchronous.
func (r *runEnv) waitFor0(ctx context.Context) error {
	for i := 0; i < 600; i++ {
		var n int
		if err := r.pub.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'").Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("the subscriber (%s) never became the publisher's synchronous standby", r.eng.appName())
}

// cpu is what /proc says of CPU time: one process's and the whole
// machine's busy time, in clock ticks (100 a second on Linux).
type cpu struct {
	at          time.Time
	proc, total float64
}

// cpuSnapshot reads the CPU time of process pid and of the machine; a
// field it cannot read stays 0 (it only informs the log).
func cpuSnapshot(pid int) cpu {
	c := cpu{at: time.Now()}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// Fields after the command name, which is in parentheses.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 {
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 12 {
				u, _ := strconv.ParseFloat(f[11], 64)
				s, _ := strconv.ParseFloat(f[12], 64)
				c.proc = u + s
			}
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line)
		for i, v := range f[1:] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			n, _ := strconv.ParseFloat(v, 64)
			c.total += n
		}
	}
	return c
}

// since describes the CPU used between two snapshots.
func (c cpu) since(o cpu) string {
	wall := c.at.Sub(o.at).Seconds()
	return fmt.Sprintf("walsender CPU %.2fs, machine busy %.2f cores, over %.2fs", (c.proc-o.proc)/100, (c.total-o.total)/100/wall, wall)
}

// decodedAfter polls the walsender's sent position until it passes the
// publisher's WAL position at the time of the call, and returns how long
// after since that took (-1 if it could not tell within a minute).
func (r *runEnv) decodedAfter(ctx context.Context, since time.Time) time.Duration {
	c, err := pgx.Connect(ctx, r.pubDSN)
	if err != nil {
		return -1
	}
	defer c.Close(context.Background())
	var end string
	if err := c.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&end); err != nil {
		return -1
	}
	for time.Since(since) < time.Minute {
		var past bool
		err := c.QueryRow(ctx, "SELECT coalesce(sent_lsn >= $2::text::pg_lsn, false) FROM pg_stat_replication WHERE application_name = $1", r.eng.appName(), end).Scan(&past)
		if err != nil {
			return -1
		}
		if past {
			return time.Since(since)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return -1
}
