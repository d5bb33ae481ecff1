package apply

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// A prefetcher reads, on a target connection of its own, the rows that the
// applier's coming UPDATE and DELETE statements will change, while the
// applier's connection still executes the statements before them. When a
// table is larger than the target's shared_buffers, most of an update's
// cost is bringing the row's page into the buffer cache (reading it, and
// writing out the dirty page it replaces); the prefetcher's backend pays
// that on another core, and the applier finds the page in memory. It is
// best effort: a key set offered while the prefetcher is busy is dropped,
// and an error stops prefetching, never applying.
type prefetcher struct {
	// conns grows from one to max while key sets wait for a connection
	// (see offer): reads that come from the operating system's cache
	// keep one connection up, reads from a slow disk need several.
	mu    sync.Mutex
	conns []*pgx.Conn
	max   int
	// opening counts the connections being opened (at most
	// prefetchOpening at once); growFailed is set once one could not be.
	opening    int
	growFailed bool
	// waits is what the target's own view of the prefetch sessions says
	// (Tune): their reads wait on a disk, and more
	// connections may open. Until told, one connection reads. (The wall
	// time of a read cannot tell a busy CPU from a slow disk: on two busy
	// cores a row from the operating system's cache takes as long as one
	// from a network-attached disk.)
	waits atomic.Bool
	// retire is how many connections are to close (each after the set it
	// reads): told that reads do not wait on a disk, the prefetcher goes
	// back to one.
	retire atomic.Int32
	closed bool
	cc     *pgx.ConnConfig
	jobs   chan prefetchJob
	done   sync.WaitGroup
	// Rows counts the rows read ahead; Dropped the rows not read: offered
	// while the queue was full, or applied before a connection took them.
	Rows, Dropped atomic.Int64
	err           atomic.Pointer[error]
	warn          func(string)
	closeOnce     sync.Once
	// offered numbers the key sets offered, so that some are samples
	// (see sampled); resting is the judge's verdict that reading ahead
	// saves the appliers no wait: then only the samples are read.
	offered atomic.Uint64
	resting atomic.Bool
	judged  atomic.Bool
	judgeMu sync.Mutex
	judge   aheadJudge
}

type prefetchJob struct {
	sql  string
	args []any
	rows int
	// stale is set once the statement that changes these rows has run:
	// a job still waiting then is skipped, so that a prefetcher that fell
	// behind (while it had fewer connections, or the appliers found
	// pages in memory) catches up with the appliers instead of reading
	// pages they no longer need.
	stale *atomic.Bool
	// pending counts the run's key sets not read yet (see readAhead.await);
	// the job takes one off once read, skipped or dropped.
	pending *pendingReads
	// sample marks a key set to be read twice, the two times going to
	// the judge (see aheadJudge).
	sample bool
}

// finished takes the job off its run's pending count.
func (j *prefetchJob) finished() {
	if j.pending != nil {
		j.pending.add(-1)
	}
}

// pendingReads counts a run's key sets offered to the prefetcher and not
// read yet, so that the statement that changes the rows can wait for them
// (readAhead.await) without polling.
type pendingReads struct {
	mu sync.Mutex
	n  int32
	// drained is made by a waiter and closed when n falls to zero.
	drained chan struct{}
}

// add changes the count by d, waking the waiters once none is left.
func (p *pendingReads) add(d int32) {
	p.mu.Lock()
	p.n += d
	if p.n == 0 && p.drained != nil {
		close(p.drained)
		p.drained = nil
	}
	p.mu.Unlock()
}

// count is how many key sets are not read yet.
func (p *pendingReads) count() int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

// done returns a channel closed once no key set is left to read, or nil
// if none is now.
func (p *pendingReads) done() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		return nil
	}
	if p.drained == nil {
		p.drained = make(chan struct{})
	}
	return p.drained
}

// prefetchChunk is how many keys of a run are read ahead at a time: the
// first chunk goes out while the run is still filling, and the chunks of a
// run are read on several connections at once.
const prefetchChunk = 128

// prefetchPiece is how many keys one prefetch statement reads for a worker
// (Config.PrefetchPieces): its batch's keys are split so that every
// prefetch connection takes some.
const prefetchPiece = 32

// minPrefetchPiece is the fewest keys a prefetch statement reads when
// round trips are small (see readAhead): a floor, so that a small round
// trip does not become a prefetch statement per key.
const minPrefetchPiece = 8

// prefetchQueue bounds the key sets waiting (about 12,000 rows): beyond
// that, pages read ahead would be evicted before they are used.
const prefetchQueue = 384

// DefaultPrefetchConns is how many connections may read ahead at once
// unless Config.PrefetchConns says otherwise: each reads one row after
// another (an index lookup, then the heap page), so reads overlap only
// across connections; on a disk where a read waits, that many reads are in
// flight. The prefetcher starts with one and opens more only while key
// sets wait for one and its sessions wait on reads (Tune):
// reads from the operating system's cache need no more, and more would
// only take CPU from the appliers.
const DefaultPrefetchConns = 16

// openPrefetcher opens a prefetcher of up to n connections, told whether
// its reads wait on a disk.
func openPrefetcher(ctx context.Context, cc *pgx.ConnConfig, n int, waits bool, warn func(string)) (*prefetcher, error) {
	cc = cc.Copy()
	cc.RuntimeParams["application_name"] = strings.TrimSuffix(cc.RuntimeParams["application_name"], " apply") + " prefetch"
	p := &prefetcher{jobs: make(chan prefetchJob, prefetchQueue), warn: warn, cc: cc, max: max(n, 1)}
	p.waits.Store(waits)
	conn, err := p.connect(ctx)
	if err != nil {
		return nil, err
	}
	p.start(conn)
	return p, nil
}

func (p *prefetcher) connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.ConnectConfig(ctx, p.cc)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, "SELECT pg_catalog.set_config('search_path', 'pg_catalog', false)"); err != nil {
		conn.Close(ctx)
		return nil, err
	}
	return conn, nil
}

// start adds a connection that takes key sets; false if the prefetcher
// is closed (the connection is then closed too).
func (p *prefetcher) start(conn *pgx.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		conn.Close(context.Background())
		return false
	}
	p.conns = append(p.conns, conn)
	p.done.Add(1)
	go p.loop(conn)
	return true
}

// prefetchOpening is how many prefetch connections may be opening at
// once: one at a time, on two busy cores, the prefetcher took about a
// second to reach 16, a third of a slow-read-cold catch-up at scale 0.3.
const prefetchOpening = 4

// grow opens one more connection in the background, unless
// prefetchOpening are being opened or there would be more than max. A
// connection that cannot be opened only stops the growth.
func (p *prefetcher) grow() {
	p.mu.Lock()
	if p.closed || !mayOpen(len(p.conns), p.opening, p.max) {
		p.mu.Unlock()
		return
	}
	p.opening++
	p.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := p.connect(ctx)
		if err == nil {
			p.start(conn) // counted as opening until started: never past max
		}
		p.mu.Lock()
		p.opening--
		first := err != nil && !p.growFailed
		if err != nil {
			p.max, p.growFailed = len(p.conns)+p.opening, true
		}
		n := p.max
		p.mu.Unlock()
		if first {
			p.warn(fmt.Sprintf("cannot open another prefetch connection to the target (prefetching goes on with at most %d): %v", n, err))
		}
	}()
}

// mayOpen says whether another connection may start opening, with conns
// open and opening being opened, up to limit.
func mayOpen(conns, opening, limit int) bool {
	return opening < prefetchOpening && conns+opening < limit
}

func (p *prefetcher) loop(conn *pgx.Conn) {
	defer p.done.Done()
	for j := range p.jobs {
		read, err := p.read(conn, j)
		j.finished()
		if err != nil && p.err.CompareAndSwap(nil, &err) {
			p.warn(fmt.Sprintf("prefetching stopped (applying goes on without it; prefetch = off turns it off): %v", err))
		}
		if !read {
			continue
		}
		if p.retired(conn) {
			return
		}
		p.maybeGrow()
	}
}

// read runs one key set's statement, unless prefetching stopped or the
// rows were applied already.
func (p *prefetcher) read(conn *pgx.Conn, j prefetchJob) (bool, error) {
	if p.err.Load() != nil {
		return false, nil
	}
	if j.stale != nil && j.stale.Load() {
		p.Dropped.Add(int64(j.rows))
		return false, nil
	}
	if j.sample {
		if err := p.sampleRead(conn, j); err != nil {
			return false, err
		}
	} else if err := execArrays(context.Background(), conn, j.sql, j.args); err != nil {
		return false, err
	}
	p.Rows.Add(int64(j.rows))
	return true, nil
}

// sampleRead reads a sample key set twice, timing each (clock reads per
// sample set, never per row), and tells the judge: the second read finds
// every page in shared_buffers, so the difference is what bringing the
// set's pages in cost.
func (p *prefetcher) sampleRead(conn *pgx.Conn, j prefetchJob) error {
	began := time.Now()
	if err := execArrays(context.Background(), conn, j.sql, j.args); err != nil {
		return err
	}
	again := time.Now()
	if err := execArrays(context.Background(), conn, j.sql, j.args); err != nil {
		return err
	}
	ended := time.Now()
	p.judgeMu.Lock()
	resting, judged := p.judge.add(again.Sub(began), ended.Sub(again), j.rows)
	p.judgeMu.Unlock()
	if judged {
		p.resting.Store(resting)
		p.judged.Store(true)
	}
	return nil
}

// Until the first verdict every key set is a sample (it comes after
// aheadWindow sets, a thousand rows at most); then one in aheadSampleEvery
// while the prefetcher reads ahead (a sample costs one more lookup of pages
// in memory: at one in four, slow-read at scale 1 took 4.3-4.65 s against
// 4.1 s without samples; a verdict every 256 sets is still about a second
// there), one in aheadSampleResting while it rests: the samples are then
// all it reads, and they notice when reading ahead would pay again.
const (
	aheadSampleEvery   = 32
	aheadSampleResting = 16
)

// aheadWindow is how many samples the judge weighs at a time, and
// aheadPays how many times longer than the same keys' second read a
// first read must take for reading ahead to pay (see aheadJudge).
const (
	aheadWindow = 8
	aheadPays   = 5
)

// An aheadJudge decides, from sample key sets each read twice, whether
// reading ahead saves the appliers any wait. The first read brings the
// set's pages into shared_buffers and the second finds them there, so the
// second is what a statement costs when its rows were read ahead, and the
// first what it costs when they were not. Where the pages come from a
// slow disk the first is many times the second, and the appliers, finding
// them in memory, wait less; where they come from shared_buffers or the
// operating system's cache the two are close, and a prefetch session only
// repeats the appliers' index lookups and copies on another core. A busy
// CPU only adds to a read's time (a backend, or PostgreSQL 18's I/O worker,
// waiting for a core), which a single read's wall time cannot tell from a
// slow disk: the judge takes, over aheadWindow samples, the shortest first
// and the shortest second read per row, and rests (reads only the samples)
// while the first is under aheadPays times the second. Point-update (pages
// from the operating system's cache) on two overloaded cores: single first
// reads from 7 to 750 us a row, the shortest of four 7 to 32 against 2.5 to
// 9 for the second; slow-read (0.1 ms a file read): never under 100 us a
// row, the second 3 to 15, the shortest of a window 25 to 35 times apart.
type aheadJudge struct {
	first, again time.Duration // per row, the shortest of the window
	n            int
}

// add weighs one sample of rows rows, read twice; once a window is full it
// returns the verdict (resting: reading ahead does not pay) and judged
// true.
func (j *aheadJudge) add(first, again time.Duration, rows int) (resting, judged bool) {
	rows = max(rows, 1)
	f, a := first/time.Duration(rows), again/time.Duration(rows)
	if j.n == 0 || f < j.first {
		j.first = f
	}
	if j.n == 0 || a < j.again {
		j.again = a
	}
	j.n++
	if j.n < aheadWindow {
		return false, false
	}
	resting = j.first < aheadPays*j.again
	*j = aheadJudge{}
	return resting, true
}

// sampled numbers a key set about to be offered: whether it is a sample,
// and whether it is to be left out (the prefetcher rests and it is not a
// sample). One atomic add per key set, not per change.
func (p *prefetcher) sampled() (sample, skip bool) {
	n := p.offered.Add(1)
	if !p.judged.Load() {
		return true, false
	}
	if p.resting.Load() {
		sample = n%aheadSampleResting == 0
		return sample, !sample
	}
	return n%aheadSampleEvery == 0, false
}

// execArrays runs sql, prepared on conn once, with args, each a rawArray
// (of any element type: pgx would not send an enum's array in binary).
func execArrays(ctx context.Context, conn *pgx.Conn, sql string, args []any) error {
	sd, err := conn.Prepare(ctx, sql, sql)
	if err != nil {
		return err
	}
	values := make([][]byte, len(args))
	for i, a := range args {
		v, ok := a.(rawArray)
		if !ok {
			return fmt.Errorf("parameter %d is a %T, not an array (internal error)", i+1, a)
		}
		values[i] = v
	}
	_, err = conn.PgConn().ExecPrepared(ctx, sd.Name, values, binaryFormat, nil).Close()
	return err
}

// retired closes conn and drops it from the connections if one is to
// retire (never the last).
func (p *prefetcher) retired(conn *pgx.Conn) bool {
	for {
		n := p.retire.Load()
		if n <= 0 {
			return false
		}
		if p.retire.CompareAndSwap(n, n-1) {
			break
		}
	}
	p.mu.Lock()
	i := slices.Index(p.conns, conn)
	if i < 0 || len(p.conns) == 1 {
		p.mu.Unlock()
		return false
	}
	p.conns = slices.Delete(p.conns, i, i+1)
	p.mu.Unlock()
	conn.Close(context.Background())
	return true
}

// maybeGrow opens another connection when more key sets wait than there
// are connections to read them and the reads wait on a disk; it is asked
// when a set is offered and when one has been read.
func (p *prefetcher) maybeGrow() {
	p.mu.Lock()
	n := len(p.conns)
	p.mu.Unlock()
	if shouldGrow(len(p.jobs), n, p.waits.Load()) {
		p.grow()
	}
}

// shouldGrow says whether queued key sets, waiting for conns connections,
// call for another connection, given whether the target sees the prefetch
// sessions wait on reads.
func shouldGrow(queued, conns int, waits bool) bool {
	return waits && queued > conns
}

// pids appends the backends of the prefetch connections.
func (p *prefetcher) pids(dst []uint32) []uint32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		dst = append(dst, c.PgConn().PID())
	}
	return dst
}

// sharedPrefetcher opens a prefetcher the first time one is needed, once,
// for every applier that shares it.
type sharedPrefetcher struct {
	mu    sync.Mutex
	pf    *prefetcher
	tried bool
	conns int
	cc    *pgx.ConnConfig
	warn  func(string)
	// waits is the last verdict Tune passed on, for a prefetcher opened
	// after it; slow is the same, read without the lock on every change.
	waits bool
	slow  atomic.Bool
	// idle is set while nothing is to be read ahead (see
	// Applier.ReadAheadWanted): keys are not offered and statements do
	// not wait.
	idle atomic.Bool
}

// get returns the prefetcher, opening it on the first call; nil if it
// could not be opened (said once).
func (r *sharedPrefetcher) get() *prefetcher {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.tried {
		r.tried = true
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pf, err := openPrefetcher(ctx, r.cc, r.conns, r.waits, r.warn)
		if err != nil {
			r.warn(fmt.Sprintf("cannot open the prefetch connections to the target (applying goes on without them; prefetch = off turns them off): %v", err))
		}
		r.pf = pf
	}
	return r.pf
}

// counts reports the prefetcher's rows read and dropped and its error;
// nothing before it opens.
func (r *sharedPrefetcher) counts() (rows, dropped int64, err error) {
	pf := r.opened()
	if pf == nil {
		return 0, 0, nil
	}
	return pf.Rows.Load(), pf.Dropped.Load(), pf.Err()
}

// open counts the prefetch connections open.
func (r *sharedPrefetcher) open() int {
	pf := r.opened()
	if pf == nil {
		return 0
	}
	pf.mu.Lock()
	defer pf.mu.Unlock()
	return len(pf.conns)
}

// opened returns the prefetcher if it is open.
func (r *sharedPrefetcher) opened() *prefetcher {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pf
}

// close closes the prefetcher, if it opened.
func (r *sharedPrefetcher) close(ctx context.Context) {
	pf := r.opened()
	if pf != nil {
		pf.close(ctx)
	}
}

// offer queues a key set unless the queue is full.
func (p *prefetcher) offer(j prefetchJob) {
	if p.err.Load() != nil {
		return
	}
	if j.pending != nil {
		j.pending.add(1)
	}
	select {
	case p.jobs <- j:
		p.maybeGrow()
	default:
		j.finished()
		p.Dropped.Add(int64(j.rows))
	}
}

// Err is the error that stopped prefetching, if any.
func (p *prefetcher) Err() error {
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}

// close ends the prefetcher once its queue is done; later calls do nothing.
func (p *prefetcher) close(ctx context.Context) {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		close(p.jobs)
		p.done.Wait()
		for _, c := range p.conns {
			c.Close(ctx)
		}
	})
}

// PrefetchSQL reads the rows of t whose key values the parameters give
// (one array per key column), through the same index lookups as the
// UPDATE or DELETE that will change them. It asks for the ctid so that no
// index-only scan can skip the heap page.
func PrefetchSQL(t *Table) string {
	var b strings.Builder
	k := aliases("k", len(t.Key))
	b.WriteString("SELECT count(t.ctid) FROM " + t.Target() + " AS t, ")
	unnest(&b, t, t.Key, k, false)
	b.WriteString(" WHERE ")
	keyMatch(&b, t, "t", t.Key, k)
	return b.String()
}

// InsertProbeSQL looks up, in the index that column c leads, the values
// the parameter gives (an array): the lookup reads the leaf pages
// where inserts of those values will go, so that the insert finds them in
// the buffer cache. What it finds does not matter.
func InsertProbeSQL(t *Table, c int) string {
	var b strings.Builder
	b.WriteString("SELECT count(*) FROM " + t.Target() + " AS t, ")
	unnest(&b, t, []int{c}, []string{"k1"}, false)
	b.WriteString(" WHERE ")
	keyMatch(&b, t, "t", []int{c}, []string{"k1"})
	return b.String()
}

// readAhead is the part of an Applier that reads ahead (never without
// Config.Prefetch): it offers the keys of the runs the builder fills to a
// prefetcher, the applier's own or one shared with other appliers, and
// makes a round trip wait for its rows when reads wait on a disk. The
// builder writes it (open, noteTable, offer); the round trip only reads
// it (await).
type readAhead struct {
	on, pieces bool // Config.Prefetch, Config.PrefetchPieces
	// shared opens the prefetcher when a table first needs it; own says
	// whether this applier reports and closes it (see ShareReadAhead).
	shared *sharedPrefetcher
	own    bool
	// roundRows caps the rows of a round trip while statements wait for
	// their rows to be read ahead (see readAheadRows): the least of its
	// large tables'.
	roundRows int
}

// open gives the applier a prefetcher of its own, of up to n connections
// (0: DefaultPrefetchConns), opened when a table first needs it.
func (ra *readAhead) open(cc *pgx.ConnConfig, n int, warn func(string)) {
	if n <= 0 {
		n = DefaultPrefetchConns
	}
	ra.shared, ra.own = &sharedPrefetcher{cc: cc, conns: n, warn: warn}, true
}

// close closes the applier's own prefetcher, if it has one.
func (ra *readAhead) close(ctx context.Context) {
	if ra.own {
		ra.shared.close(ctx)
	}
}

// noteTable lowers roundRows to what a table larger than shared_buffers
// calls for.
func (ra *readAhead) noteTable(t *Table) {
	if t.Large {
		if n := readAheadRows(t.BufferPages); ra.roundRows == 0 || n < ra.roundRows {
			ra.roundRows = n
		}
	}
}

// roundFull reports whether a round trip of rows rows is as large as one
// may be while statements wait for their rows (see readAheadRows).
func (ra *readAhead) roundFull(rows int) bool {
	return ra.roundRows > 0 && ra.slow() && rows >= ra.roundRows
}

// Prefetched reports the rows read ahead and those dropped while the
// prefetcher was busy, and the error that stopped it, if any (for an
// applier sharing another's prefetcher: nothing, that one reports them).
func (a *Applier) Prefetched() (rows, dropped int64, err error) {
	if !a.readAhead.own {
		return 0, 0, nil
	}
	return a.readAhead.shared.counts()
}

// PrefetchConns reports how many prefetch connections are open (they
// grow while key sets wait; see prefetcher), for status.
func (a *Applier) PrefetchConns() int { return a.readAhead.conns() }

// conns counts the applier's own prefetch connections open.
func (ra *readAhead) conns() int {
	if !ra.own {
		return 0
	}
	return ra.shared.open()
}

// pids appends the backends of the applier's own prefetch connections.
func (ra *readAhead) pids(dst []uint32) []uint32 {
	if !ra.own {
		return dst
	}
	if pf := ra.shared.opened(); pf != nil {
		return pf.pids(dst)
	}
	return dst
}

// setWaits tells the applier's own prefetcher (open, or opened later)
// whether its sessions were seen waiting on reads of a disk: only then
// does it open more connections, and when told they do not, it goes back
// to one. Never told, it keeps one.
func (ra *readAhead) setWaits(wait bool) {
	if !ra.own {
		return
	}
	r := ra.shared
	r.mu.Lock()
	r.waits = wait
	r.slow.Store(wait)
	pf := r.pf
	r.mu.Unlock()
	if pf == nil {
		return
	}
	pf.waits.Store(wait)
	pf.mu.Lock()
	defer pf.mu.Unlock()
	if wait {
		pf.retire.Store(0)
	} else {
		pf.retire.Store(int32(len(pf.conns) - 1))
	}
}

// ShareReadAhead makes a read ahead on from's prefetch connections instead
// of opening its own: workers share one prefetcher, so that its
// connections stay few however many workers there are.
func (a *Applier) ShareReadAhead(from *Applier) {
	if !a.cfg.Prefetch || from.readAhead.shared == nil {
		return
	}
	a.readAhead.shared, a.readAhead.own = from.readAhead.shared, false
}

// offer offers the keys of r's rows not offered yet to the prefetcher:
// a chunk at a time while the run fills, and what is left when it becomes a
// statement (final), unless that is a handful of rows.
func (ra *readAhead) offer(r *run, final bool) {
	if !ra.on || !r.table.Large || ra.idle() {
		return
	}
	if r.kind != 'U' && r.kind != 'D' && (r.kind != 'I' || len(r.table.Probes) == 0) {
		return
	}
	n := r.rows - r.ahead
	if n < prefetchChunk && (!final || n < prefetchChunk/8) {
		return
	}
	pf := ra.shared.get()
	if pf == nil {
		return
	}
	if r.table.prefetchSQL == "" {
		r.table.prefetchSQL = PrefetchSQL(r.table)
	}
	// In pieces, so that the prefetch connections read them side by side.
	piece := prefetchChunk
	if ra.pieces {
		piece = prefetchPiece
	}
	if ra.slow() && ra.roundRows > 0 {
		piece = slowPiece(piece, ra.roundRows, ra.shared.conns)
	}
	for from := r.ahead; from < r.rows; from += piece {
		to := min(from+piece, r.rows)
		sample, skip := pf.sampled()
		if skip {
			continue
		}
		if r.kind == 'I' {
			probe(pf, r, from, to, sample)
			continue
		}
		args := make([]any, r.split)
		for i := range args {
			v, err := r.table.encodeParam(nil, r.cols[i], r.params[i][from:to])
			if err != nil {
				return // the statement will say so
			}
			args[i] = v
		}
		pf.offer(prefetchJob{sql: r.table.prefetchSQL, args: args, rows: to - from, stale: &r.applied, pending: &r.reading, sample: sample})
	}
	r.ahead = r.rows
}

// slowPiece is how many keys a set holds while statements wait for their
// rows, given the usual piece, round trips of roundRows rows, and up to
// conns prefetch connections: two sets per connection and round trip (at
// least minPrefetchPiece keys). With one set per connection, the round
// trip's last sets were read by a few connections while the others idled
// (its statement waits for the last), and the queue (this round trip and
// the next, being built) never held more sets than connections, so the
// prefetcher could not grow past them.
func slowPiece(piece, roundRows, conns int) int {
	return min(piece, max(roundRows/(2*max(conns, 1)), minPrefetchPiece))
}

// probe offers the values that rows from..to of an insert run take in
// each probed column (Table.Probes) to the prefetcher, as samples if
// sample (see aheadJudge).
func probe(pf *prefetcher, r *run, from, to int, sample bool) {
	for _, c := range r.table.Probes {
		i := slices.Index(r.cols, c)
		if i < 0 {
			continue // not sent: the target's default goes in
		}
		sql, ok := r.table.probeSQL[c]
		if !ok {
			if r.table.probeSQL == nil {
				r.table.probeSQL = map[int]string{}
			}
			sql = InsertProbeSQL(r.table, c)
			r.table.probeSQL[c] = sql
		}
		v, err := r.table.encodeParam(nil, c, r.params[i][from:to])
		if err != nil {
			return // the statement will say so
		}
		pf.offer(prefetchJob{sql: sql, args: []any{v}, rows: to - from, stale: &r.applied, pending: &r.reading, sample: sample})
	}
}

// When the prefetch sessions' reads wait on a disk, a statement waits, before
// it is sent, until the rows it changes have been read ahead: applied at
// once, it would overtake the prefetch connections and read its pages one
// at a time, while they, their key sets read, would wait for the stream
// reader, which waits for the statement. Waiting, the applier's session
// finds every page in memory, and the prefetch connections, fed while it
// waits, keep prefetch_connections reads in flight. A round trip then holds
// at most readAheadRows rows, so that what is read ahead of the
// statement being applied (that round trip, and the next being built) fits
// well within shared_buffers. The wait is bounded by readAheadWaitMax;
// past it the statement reads what is left itself.
const readAheadWaitMax = time.Second

// readAheadRows is how many rows a round trip holds while statements wait
// for their rows to be read ahead, given shared_buffers in pages: an
// eighth of them (two round trips, each row on a page of its own, within a
// quarter of the cache: pages read ahead must not be evicted before their
// statement runs), at least 16, at most 2048 (smaller round trips wait
// more often, larger ones lose pages read ahead before their statement
// runs; figures: docs/benchmarks.md).
func readAheadRows(bufferPages int) int {
	return min(max(bufferPages/8, 16), 2048)
}

// slow reports whether statements wait for their rows to be read ahead
// (see readAheadRows).
func (ra *readAhead) slow() bool {
	return ra.on && ra.shared != nil && ra.shared.slow.Load() && !ra.idle()
}

// idle reports whether nothing is to be read ahead now (see
// Applier.ReadAheadWanted).
func (ra *readAhead) idle() bool { return ra.shared != nil && ra.shared.idle.Load() }

// ReadAheadWanted tells the applier, and every applier sharing its
// prefetcher, whether reading ahead pays now: while the run is behind the
// publisher, it does; while the run keeps up, the prefetch sessions would
// only repeat the appliers' lookups, and nothing is offered.
func (a *Applier) ReadAheadWanted(on bool) {
	if a.readAhead.shared != nil {
		a.readAhead.shared.idle.Store(!on)
	}
}

// await waits until the key sets of the runs among ops have been read
// ahead, or readAheadWaitMax has passed, when reads wait on a disk; it
// adds the time waited to waited (Stats.PrefetchWait).
func (ra *readAhead) await(ctx context.Context, ops []op, waited *atomic.Int64) {
	if !ra.slow() {
		return
	}
	var began time.Time
	var bound *time.Timer
	defer func() {
		if bound != nil {
			bound.Stop()
			waited.Add(int64(time.Since(began)))
		}
	}()
	for _, o := range ops {
		if o.run == nil {
			continue
		}
		for done := o.run.reading.done(); done != nil; done = o.run.reading.done() {
			if bound == nil {
				began, bound = time.Now(), time.NewTimer(readAheadWaitMax)
			}
			select {
			case <-done:
			case <-bound.C:
				return
			case <-ctx.Done():
				return
			}
		}
	}
}
