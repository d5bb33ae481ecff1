package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/internal/pgtest"
	"github.com/parapply/parapply/internal/verify"
)

// Methods of measurement.
const (
	methodCatchup = "catch-up" // subscriber stopped while the publisher writes, then timed to catch up
	methodLive    = "live"     // subscriber running while the publisher writes; sustained TPS and lag
	methodBigTxn  = "big-txn"  // commit-to-visible delay of one big transaction; TPS under synchronous replication
	methodInitial = "initial"  // publisher holds data, subscriber starts empty: time until in sync
	methodLocal   = "local"    // the target's own load while the engine applies a stream: its TPS by detection mode (local.go)
)

// workload is one benchmark scenario.
type workload struct {
	doc    string
	method string
	// schema runs on both servers. preload runs on both too (the subscriber
	// starts in sync without a copy), or only on the publisher for the
	// initial-sync method.
	schema  string
	preload func(scale float64) []string
	tables  []string
	// pubSettings and subSettings are extra server settings
	// (postgresql.conf).
	pubSettings, subSettings map[string]string
	// readDelay delays every file read of the subscriber server, unless
	// --read-delay says otherwise.
	readDelay time.Duration
	// write generates the workload on the publisher and returns the number
	// of transactions it committed.
	write func(ctx context.Context, r *runEnv) (int64, error)
	// local, for catch-ups, runs on the subscriber while it is stopped,
	// before the publisher writes: changes the replicated ones will meet
	// as conflicts.
	local []string
	// replicated, for catch-ups: the preloaded rows reach the subscriber
	// through the engine (before the clock starts), not by a local
	// session, so that they are the engine's own, as after an initial
	// copy: with track_commit_timestamp on, a local session's rows are
	// in conflict with every replicated change.
	replicated bool
	// localDeletes, for the local method: the target's load deletes (and
	// inserts back) rows of a published table too.
	localDeletes bool
	// cold, for catch-ups: between the write and the timed catch-up the
	// subscriber server restarts (shared_buffers empty) and, where the
	// bench runs as root, the operating system's cache is dropped, so
	// that the apply starts with nothing of the tables in memory.
	cold bool
}

// runEnv is what a workload sees of one run.
type runEnv struct {
	o      options
	pubDSN string
	subDSN string
	pub    *pgx.Conn
	sub    *pgx.Conn
	eng    engine
	// subServer is the subscriber server, which a cold catch-up restarts.
	subServer *pgtest.Server
	// nodes are the workers of a Citus target, whose CPU counts as the
	// target's.
	nodes []*pgtest.Server
}

type measurement struct {
	publisher, catchup, rssMB float64
	sustainedTPS              float64
	// The machine's busy cores, and the CPU seconds of the walsender, the
	// target backends applying and the parapply process: over the
	// catch-up, or for live runs from the first write to the marker.
	busy, walsenderCPU, targetCPU, processCPU float64
	txns                                      int64
	// conflicts is how many conflicts the engine counted in the catch-up
	// (parapply.conflicts, or pg_stat_subscription_stats).
	conflicts int64
	// localTPS: the local method's load on the target.
	localTPS  float64
	lag       []lagSample
	pgVersion string
}

type lagSample struct {
	T   float64 `json:"t"`
	Lag float64 `json:"lag_s"`
}

const (
	markerTable    = "bench_marker"
	heartbeatTable = "bench_heartbeat"
)

// beforeVerify, when set (by tests), runs on the subscriber between the
// catch-up and the verification.
var beforeVerify func(ctx context.Context, sub *pgx.Conn) error

// measure runs one workload once for one engine on a fresh pair.
func measure(ctx context.Context, o options, w workload, engineName string, workers int, detection, layout string) (m measurement, err error) {
	sub, err := subscriberServer(o, w)
	if err != nil {
		return m, err
	}
	citus := o.target == targetCitus && isParapply(engineName)
	var pair *pgtest.Pair
	var nodes []*pgtest.Server
	if citus {
		var stop func()
		if pair, nodes, stop, err = citusPair(ctx, pgtest.Options{Settings: w.pubSettings}, sub); err != nil {
			return m, err
		}
		defer stop()
	} else {
		if pair, err = pgtest.StartPairWith(ctx, pgtest.Options{Settings: w.pubSettings}, sub); err != nil {
			return m, err
		}
		defer pair.Stop()
	}
	var engineCPUs string
	if layout == layoutSeparate {
		restore, cpus, err := separate(pair.Publisher.PID(), pair.Subscriber.PID())
		if err != nil {
			return m, err
		}
		defer restore()
		engineCPUs = cpus
	}
	r := &runEnv{o: o, pubDSN: pair.Publisher.DSN("postgres"), subDSN: pair.Subscriber.DSN("postgres"), subServer: pair.Subscriber, nodes: nodes}
	if r.pub, err = pgx.Connect(ctx, r.pubDSN); err != nil {
		return m, err
	}
	defer r.pub.Close(context.Background())
	if r.sub, err = pgx.Connect(ctx, r.subDSN); err != nil {
		return m, err
	}
	defer func() { r.sub.Close(context.Background()) }() // a cold catch-up reconnects
	if err := r.pub.QueryRow(ctx, "SHOW server_version").Scan(&m.pgVersion); err != nil {
		return m, err
	}
	// An engine that makes the target's tables itself starts an initial
	// sync with an empty target database, as a DBA would run it.
	emptyTarget := w.method == methodInitial && bringsOwnSchema(engineName)
	if emptyTarget && citus {
		return m, fmt.Errorf("engine %s makes the target's tables itself: not measured on a Citus target", engineName)
	}
	tables, err := r.prepare(ctx, w, citus, emptyTarget)
	if err != nil {
		return m, err
	}
	if r.eng, err = r.newEngine(ctx, w, engineName, workers, detection, engineCPUs, citus); err != nil {
		return m, err
	}
	defer r.eng.close()
	if err := r.runWorkload(ctx, w, &m, tables, detection); err != nil {
		return m, err
	}
	if _, ok := r.eng.(*drain); ok {
		return m, nil // nothing was applied: nothing to verify
	}
	if beforeVerify != nil {
		if err := beforeVerify(ctx, r.sub); err != nil {
			return m, err
		}
	}
	if err := verify.Checksums(ctx, r.pub, r.sub, tables...); err != nil {
		return m, fmt.Errorf("verification: %w", err)
	}
	return m, nil
}

// subscriberServer is how the subscriber server starts: the workload's
// settings, those PARAPPLY_BENCH_SUB_SETTINGS adds, and the read delay.
func subscriberServer(o options, w workload) (pgtest.Options, error) {
	sub := pgtest.Options{Settings: maps.Clone(w.subSettings)}
	// Developer aid: PARAPPLY_BENCH_SUB_SETTINGS="name=value,..." adds
	// subscriber server settings (for example io_workers=16), to find out
	// what bounds a cell; published figures use the servers' defaults.
	for _, kv := range splitList(os.Getenv("PARAPPLY_BENCH_SUB_SETTINGS")) {
		name, value, ok := strings.Cut(kv, "=")
		if !ok {
			return sub, fmt.Errorf("PARAPPLY_BENCH_SUB_SETTINGS: %q is not name=value", kv)
		}
		if sub.Settings == nil {
			sub.Settings = map[string]string{}
		}
		sub.Settings[strings.TrimSpace(name)] = strings.TrimSpace(value)
		logf("subscriber setting %s = %s (PARAPPLY_BENCH_SUB_SETTINGS)", name, value)
	}
	if delay := cmp.Or(o.readDelay, w.readDelay); delay > 0 {
		env, err := pgtest.ReadDelayEnv(delay)
		if err != nil {
			return sub, err
		}
		sub.Env = env
		logf("every file read of the subscriber server is delayed by %s", delay)
	}
	return sub, nil
}

// prepare makes the workload's schema, the marker and heartbeat tables
// on both sides (distributed on a Citus target; on the publisher alone
// for an emptyTarget), preloads them, and publishes them; it returns the
// tables published.
func (r *runEnv) prepare(ctx context.Context, w workload, citus, emptyTarget bool) ([]string, error) {
	for i, c := range []*pgx.Conn{r.pub, r.sub} {
		if i == 1 && emptyTarget {
			if _, err := c.Exec(ctx, "CHECKPOINT"); err != nil {
				return nil, err
			}
			break
		}
		if err := r.prepareSide(ctx, c, i == 1, w, citus); err != nil {
			return nil, err
		}
	}
	tables := append(append([]string(nil), w.tables...), markerTable, heartbeatTable)
	// The heartbeat row starts identical on both sides; live runs update it.
	for i, c := range []*pgx.Conn{r.pub, r.sub} {
		if i == 1 && w.method == methodInitial {
			break
		}
		if _, err := c.Exec(ctx, "INSERT INTO "+heartbeatTable+" VALUES (1, '2000-01-01 00:00:00+00')"); err != nil {
			return nil, err
		}
	}
	if _, err := r.pub.Exec(ctx, "CREATE PUBLICATION bench FOR TABLE "+strings.Join(tables, ", ")); err != nil {
		return nil, err
	}
	return tables, nil
}

// prepareSide makes the schema on one side (the subscriber's if sub),
// distributes it on a Citus subscriber, preloads it where the workload
// wants it there, and vacuums and checkpoints.
func (r *runEnv) prepareSide(ctx context.Context, c *pgx.Conn, sub bool, w workload, citus bool) error {
	schema := w.schema + fmt.Sprintf("; CREATE TABLE %s (id int PRIMARY KEY, at timestamptz); CREATE TABLE %s (id int PRIMARY KEY, at timestamptz)", markerTable, heartbeatTable)
	if _, err := c.Exec(ctx, schema); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if sub && citus {
		if err := distribute(ctx, c, append(append([]string(nil), w.tables...), markerTable, heartbeatTable)); err != nil {
			return err
		}
	}
	if w.preload != nil && (!sub || w.method != methodInitial) && !w.replicated {
		side := "publisher"
		if sub {
			side = "subscriber"
		}
		logf("preloading the %s", side)
		for _, q := range w.preload(r.o.scale) {
			if _, err := c.Exec(ctx, q); err != nil {
				return fmt.Errorf("preload: %w", err)
			}
		}
	}
	for _, q := range []string{"VACUUM ANALYZE", "CHECKPOINT"} {
		if _, err := c.Exec(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// newEngine makes the engine the cell measures: the built-in
// subscription, parapply with the cell's settings, or the drain.
func (r *runEnv) newEngine(ctx context.Context, w workload, engineName string, workers int, detection, engineCPUs string, citus bool) (engine, error) {
	copyData := w.method == methodInitial
	switch {
	case engineName == "builtin":
		return newBuiltin(ctx, r.sub, r.pubDSN, copyData)
	case isParapply(engineName):
		bin, flags, _ := parapplySettings(engineName) // checked with the options
		if bin == "" {
			bin = r.o.binary
		}
		if detection == "tombstones" {
			flags = append(flags, "--detect-update-deleted", "on")
		}
		if citus {
			flags = append(flags, "--detect-conflicts", "off") // refused on Citus
		}
		return newParapply(bin, r.pubDSN, r.subDSN, workers, copyData, flags, engineCPUs)
	case isPgcopydb(engineName):
		if w.method != methodInitial {
			return nil, fmt.Errorf("the pgcopydb engine measures initial-sync workloads only")
		}
		return newPgcopydb(ctx, r, engineName)
	case engineName == "drain":
		if w.method != methodCatchup && w.method != methodBigTxn {
			return nil, fmt.Errorf("the drain engine measures catch-up workloads and big-transaction only")
		}
		return newDrain(r.pubDSN), nil
	}
	return nil, fmt.Errorf("unknown engine %q", engineName) // checked with the options
}

// runWorkload runs the workload as its method measures it.
func (r *runEnv) runWorkload(ctx context.Context, w workload, m *measurement, tables []string, detection string) error {
	switch w.method {
	case methodCatchup:
		return r.catchup(ctx, w, m)
	case methodLive:
		return r.live(ctx, w, m)
	case methodBigTxn:
		return r.bigTxn(ctx, w, m)
	case methodInitial:
		return r.initial(ctx, m, tables)
	case methodLocal:
		return r.localLoad(ctx, w, m, detection)
	}
	return nil
}

// prime starts the subscriber until its slot is active, so the slot exists
// before the workload.
func (r *runEnv) prime(ctx context.Context) error {
	if err := r.eng.start(ctx); err != nil {
		return err
	}
	return r.waitSlot(ctx, true)
}

func (r *runEnv) catchup(ctx context.Context, w workload, m *measurement) error {
	if err := r.prime(ctx); err != nil {
		return err
	}
	if w.replicated && w.preload != nil {
		if err := r.preloadReplicated(ctx, w); err != nil {
			return err
		}
	}
	r.eng.stop()
	if err := r.waitSlot(ctx, false); err != nil {
		return err
	}
	for _, q := range w.local {
		if _, err := r.sub.Exec(ctx, q); err != nil {
			return fmt.Errorf("local changes on the subscriber: %w", err)
		}
	}
	t0 := time.Now()
	txns, err := w.write(ctx, r)
	if err != nil {
		return fmt.Errorf("workload: %w", err)
	}
	m.publisher, m.txns = time.Since(t0).Seconds(), txns
	if err := r.mark(ctx); err != nil {
		return err
	}
	if w.cold {
		if err := r.coldSubscriber(ctx); err != nil {
			return err
		}
	}
	logf("publisher wrote %d transactions in %.2fs; starting the subscriber", txns, m.publisher)
	t1 := time.Now()
	// The walsender, the target backends and the process start with the
	// subscriber: all their CPU time is the catch-up's.
	from := cpuUse{machine: cpuSnapshot(0)}
	if err := r.eng.start(ctx); err != nil {
		return err
	}
	if d, ok := r.eng.(*drain); ok {
		err = d.waitMarked(ctx)
	} else {
		err = r.waitMarker(ctx)
	}
	m.catchup = time.Since(t1).Seconds()
	logf("catch-up: %s", m.setCPU(from, r.cpuNow(ctx)))
	if err == nil && len(w.local) > 0 {
		m.conflicts, err = r.conflicts(ctx)
	}
	m.rssMB = r.eng.stop()
	return err
}

// coldSubscriber restarts the subscriber server, drops the operating
// system's cache where it may (as root; else it says so) and reconnects,
// so that the catch-up starts cold (workload.cold).
func (r *runEnv) coldSubscriber(ctx context.Context) error {
	if err := r.subServer.Restart(ctx, false); err != nil {
		return fmt.Errorf("restarting the subscriber server: %w", err)
	}
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		logf("the operating system's cache stays warm (only shared_buffers starts empty): %v", err)
	} else {
		logf("subscriber server restarted and the operating system's cache dropped")
	}
	r.sub.Close(ctx)
	var err error
	if r.sub, err = pgx.Connect(ctx, r.subDSN); err != nil {
		return err
	}
	if b, ok := r.eng.(*builtin); ok {
		b.sub = r.sub
	}
	return nil
}

// preloadReplicated preloads the publisher while the engine runs, and
// waits until the subscriber has it all (marker row 2).
func (r *runEnv) preloadReplicated(ctx context.Context, w workload) error {
	logf("preloading the publisher; the rows reach the subscriber through the engine")
	for _, q := range w.preload(r.o.scale) {
		if _, err := r.pub.Exec(ctx, q); err != nil {
			return fmt.Errorf("preload: %w", err)
		}
	}
	if _, err := r.pub.Exec(ctx, "INSERT INTO "+markerTable+" VALUES (2, now())"); err != nil {
		return err
	}
	if d, ok := r.eng.(*drain); ok {
		// The drain applies nothing: it only reads past the preload.
		if err := d.waitMarked(ctx); err != nil {
			return fmt.Errorf("waiting for the preload to be streamed: %w", err)
		}
	} else if err := r.waitFor(ctx, "SELECT count(*) > 0 FROM "+markerTable+" WHERE id = 2", markerWait); err != nil {
		return fmt.Errorf("waiting for the preloaded rows on the subscriber: %w", err)
	}
	for _, c := range []*pgx.Conn{r.pub, r.sub} {
		for _, q := range []string{"VACUUM ANALYZE", "CHECKPOINT"} {
			if _, err := c.Exec(ctx, q); err != nil {
				return err
			}
		}
	}
	return nil
}

// conflicts reads how many conflicts the engine met: parapply's log, or
// the built-in's counters (every confl_ column of pg_stat_subscription_stats).
func (r *runEnv) conflicts(ctx context.Context) (int64, error) {
	q := `SELECT count(*) FROM parapply.conflicts`
	if _, ok := r.eng.(*builtin); ok {
		q = `SELECT coalesce(sum(v.value::bigint), 0)::int8 FROM pg_stat_subscription_stats AS s, jsonb_each_text(to_jsonb(s)) AS v WHERE v.key LIKE 'confl%'`
	}
	var n int64
	if err := r.sub.QueryRow(ctx, q).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting conflicts: %w", err)
	}
	return n, nil
}

// cpuUse is the CPU time, so far, of the processes that take part in
// applying: the walsender, the target backends applying (the built-in's
// apply and parallel workers, parapply's connections) and the parapply
// process, with the machine's.
type cpuUse struct {
	machine, walsender cpu
	sender             int // the walsender's pid
	backends           []backend
	process            float64 // seconds
}

type backend struct {
	PID  int
	Name string
	CPU  float64 // seconds
}

// cpuNow reads cpuUse (what it cannot read stays 0: it only informs).
func (r *runEnv) cpuNow(ctx context.Context) cpuUse {
	u := cpuUse{machine: cpuSnapshot(0)} // the machine's counters only: no process 0
	if r.pub.QueryRow(ctx, "SELECT pid FROM pg_stat_replication WHERE application_name = $1", r.eng.appName()).Scan(&u.sender) == nil {
		u.walsender = cpuSnapshot(u.sender)
	}
	rows, err := r.sub.Query(ctx, `SELECT pid, coalesce(nullif(application_name, ''), backend_type), 0::float8 FROM pg_stat_activity
		WHERE application_name LIKE 'parapply%' OR backend_type LIKE 'logical replication%worker' ORDER BY 2`)
	if err == nil {
		u.backends, _ = pgx.CollectRows(rows, pgx.RowToStructByPos[backend])
	}
	for i := range u.backends {
		u.backends[i].CPU = cpuSnapshot(u.backends[i].PID).proc / 100
	}
	if p, ok := r.eng.(*parapplyEngine); ok && p.p != nil {
		u.process = cpuSnapshot(p.p.cmd.Process.Pid).proc / 100
	}
	for _, n := range r.nodes {
		u.backends = append(u.backends, backend{PID: n.PID(), Name: n.Name + ", every process", CPU: nodeCPU(n.PID())})
	}
	return u
}

// setCPU records in m the CPU used between from and to, and describes it
// (a backend that was not there at from used all its time since).
func (m *measurement) setCPU(from, to cpuUse) string {
	wall := to.machine.at.Sub(from.machine.at).Seconds()
	m.busy = (to.machine.total - from.machine.total) / 100 / wall
	m.walsenderCPU = to.walsender.proc / 100
	if from.sender == to.sender {
		m.walsenderCPU -= from.walsender.proc / 100 // else it started after from
	}
	before := map[int]float64{}
	for _, b := range from.backends {
		before[b.PID] = b.CPU
	}
	s := fmt.Sprintf("walsender CPU %.2fs, machine busy %.2f cores, over %.2fs; target backends CPU", m.walsenderCPU, m.busy, wall)
	m.targetCPU = 0
	for _, b := range to.backends {
		t := b.CPU - before[b.PID]
		m.targetCPU += t
		s += fmt.Sprintf(" %.2fs (%s)", t, b.Name)
	}
	if to.process > 0 {
		m.processCPU = to.process - from.process
		s += fmt.Sprintf(", parapply process CPU %.2fs", m.processCPU)
	}
	return s
}

// live runs the workload with the subscriber applying, samples the lag from
// a heartbeat row the publisher updates every 100 ms, and reports the
// sustained rate: transactions / (writing time + time to catch up after).
func (r *runEnv) live(ctx context.Context, w workload, m *measurement) error {
	if err := r.prime(ctx); err != nil {
		return err
	}
	// A first heartbeat, applied before the clock starts.
	if _, err := r.pub.Exec(ctx, "UPDATE "+heartbeatTable+" SET at = clock_timestamp() WHERE id = 1"); err != nil {
		return err
	}
	if err := r.waitFor(ctx, "SELECT at > '2001-01-01' FROM "+heartbeatTable, time.Minute); err != nil {
		return err
	}
	from := r.cpuNow(ctx)
	var last atomic.Int64 // the last heartbeat written, unix microseconds, once writing stopped
	hctx, stopHeartbeat := context.WithCancel(ctx)
	sctx, stopSampling := context.WithCancel(ctx)
	var hb, sampler sync.WaitGroup
	t0 := time.Now()
	var hbErr, sampleErr error
	hb.Add(1)
	sampler.Add(1)
	go func() { defer hb.Done(); hbErr = heartbeat(hctx, r.pubDSN, &last) }()
	go func() { defer sampler.Done(); m.lag, sampleErr = sampleLag(sctx, r.subDSN, t0, &last) }()
	txns, err := w.write(ctx, r)
	m.publisher = time.Since(t0).Seconds()
	// The heartbeat stops before the marker, so the marker is the last
	// thing the publisher writes.
	stopHeartbeat()
	hb.Wait()
	if err == nil {
		err = r.mark(ctx)
	}
	if err == nil {
		err = r.waitMarker(ctx)
	}
	total := time.Since(t0).Seconds()
	if err == nil {
		logf("live: %s", m.setCPU(from, r.cpuNow(ctx)))
	}
	stopSampling()
	sampler.Wait()
	m.rssMB = r.eng.stop()
	if err != nil {
		return err
	}
	if hbErr != nil {
		return hbErr
	}
	if sampleErr != nil {
		return sampleErr
	}
	m.catchup = total - m.publisher
	m.txns = txns
	m.sustainedTPS = float64(txns) / total
	logf("live: %d transactions, publisher %.1f TPS, sustained %.1f TPS, %.2fs behind at the end", txns, float64(txns)/m.publisher, m.sustainedTPS, m.catchup)
	return nil
}

// heartbeat updates the heartbeat row every 100 ms; when it stops it
// stores the last time it wrote in last.
func heartbeat(ctx context.Context, dsn string, last *atomic.Int64) error {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	var at time.Time
	for {
		select {
		case <-ctx.Done():
			last.Store(at.UnixMicro())
			return nil
		case <-t.C:
		}
		err := c.QueryRow(context.Background(), "UPDATE "+heartbeatTable+" SET at = clock_timestamp() WHERE id = 1 RETURNING at").Scan(&at)
		if err != nil {
			return err
		}
	}
}

// sampleLag reads, every 250 ms, how old the heartbeat visible on the
// subscriber is: the replication lag, to 100 ms. Once the heartbeat has
// stopped and its last beat is visible, the subscriber has caught up.
func sampleLag(ctx context.Context, dsn string, t0 time.Time, last *atomic.Int64) ([]lagSample, error) {
	c, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer c.Close(context.Background())
	var out []lagSample
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return out, nil
		case <-t.C:
		}
		var at time.Time
		var lag float64
		if err := c.QueryRow(ctx, "SELECT at, extract(epoch FROM clock_timestamp() - at)::float8 FROM "+heartbeatTable+" WHERE id = 1").Scan(&at, &lag); err != nil {
			if ctx.Err() != nil {
				return out, nil
			}
			return out, err
		}
		if l := last.Load(); l != 0 && at.UnixMicro() >= l {
			lag = 0
		}
		out = append(out, lagSample{T: time.Since(t0).Seconds(), Lag: lag})
	}
}

func (r *runEnv) initial(ctx context.Context, m *measurement, tables []string) error {
	if err := r.mark(ctx); err != nil {
		return err
	}
	t0 := time.Now()
	machine := cpuSnapshot(0)
	if err := r.eng.start(ctx); err != nil {
		return err
	}
	// In sync: every table copied (the built-in's tables "ready"; parapply's
	// sync_state "done"), and a marker written before the start applied.
	ready := "SELECT count(*) = 0 FROM pg_subscription_rel WHERE srsubstate <> 'r'"
	if _, ok := r.eng.(*parapplyEngine); ok {
		// parapply creates its state table when it starts.
		if err := r.waitFor(ctx, "SELECT to_regclass('parapply.sync_state') IS NOT NULL", time.Minute); err != nil {
			return err
		}
		ready = fmt.Sprintf("SELECT count(*) FILTER (WHERE state = 'done') = %d FROM parapply.sync_state", len(tables))
	}
	var err error
	if p, ok := r.eng.(*pgcopydbEngine); ok {
		// In sync when the clone exits; the marker it copied is checked
		// after the clock stops.
		err = p.wait(ctx)
		m.catchup = time.Since(t0).Seconds()
		if err != nil {
			return err
		}
		m.processCPU = p.cpu
	} else {
		if err := r.waitFor(ctx, ready, 2*time.Hour); err != nil {
			return err
		}
		err = r.waitMarker(ctx)
		m.catchup = time.Since(t0).Seconds()
	}
	s := cpuSnapshot(0)
	m.busy = (s.total - machine.total) / 100 / s.at.Sub(machine.at).Seconds()
	if p, ok := r.eng.(*parapplyEngine); ok && p.p != nil {
		m.processCPU = cpuSnapshot(p.p.cmd.Process.Pid).proc / 100
	}
	if m.processCPU > 0 {
		logf("in sync: machine busy %.2f cores over %.2fs, %s process CPU %.2fs", m.busy, m.catchup, r.eng.appName(), m.processCPU)
	} else {
		logf("in sync: machine busy %.2f cores over %.2fs", m.busy, m.catchup)
	}
	m.rssMB = r.eng.stop()
	if _, ok := r.eng.(*pgcopydbEngine); ok && err == nil {
		err = r.waitFor(ctx, "SELECT count(*) > 0 FROM "+markerTable+" WHERE id = 1", time.Second)
	}
	return err
}

// mark writes the marker row: once it is visible on the subscriber,
// everything the publisher committed before it is too.
func (r *runEnv) mark(ctx context.Context) error {
	_, err := r.pub.Exec(ctx, "INSERT INTO "+markerTable+" VALUES (1, now()) ON CONFLICT (id) DO UPDATE SET at = now()")
	return err
}

func (r *runEnv) waitSlot(ctx context.Context, active bool) error {
	for i := 0; i < 1200; i++ {
		if p, ok := r.eng.(*parapplyEngine); ok && active {
			if err := p.exited(); err != nil {
				return err
			}
		}
		// A slot being created is active before it has a consistent
		// point (confirmed_flush_lsn): stopped then, its walsender may
		// stay until the transactions it waits for end.
		var a bool
		err := r.pub.QueryRow(ctx, "SELECT active AND (confirmed_flush_lsn IS NOT NULL OR NOT $1) FROM pg_replication_slots WHERE slot_name = 'bench'", active).Scan(&a)
		if err == nil && a == active {
			return nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	err := fmt.Errorf("slot bench did not become active=%v within 60s", active)
	if p, ok := r.eng.(*parapplyEngine); ok && p.lastLog != "" {
		err = fmt.Errorf("%w; the engine's last lines:\n%s", err, lastLines(p.lastLog, 20))
	}
	return err
}

// markerWait bounds the wait for the marker.
const markerWait = 2 * time.Hour

// waitMarker waits, polling every 5 ms, for the marker row.
func (r *runEnv) waitMarker(ctx context.Context) error {
	return r.waitFor(ctx, "SELECT count(*) > 0 FROM "+markerTable+" WHERE id = 1", markerWait)
}

// waitFor polls a boolean query on the subscriber every 5 ms.
func (r *runEnv) waitFor(ctx context.Context, query string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if p, ok := r.eng.(*parapplyEngine); ok {
			if err := p.exited(); err != nil {
				return err
			}
		}
		var done bool
		if err := r.sub.QueryRow(ctx, query).Scan(&done); err != nil {
			return err
		}
		if done {
			return nil
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("subscriber did not catch up within %s", limit)
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
