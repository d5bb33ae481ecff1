// Package metrics exposes a running subscriber's figures in the Prometheus
// text format. Everything is read from Subscriber.Status when scraped, so the
// apply path pays nothing for metrics nobody reads.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/parapply/parapply/conflict"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/tablesync"
)

// Info labels the parapply_info series.
type Info struct {
	Version, Slot, ApplicationName string
}

// Collector turns a subscriber's Status into metrics at scrape time.
type Collector struct {
	status   func() subscriber.Status
	info     Info
	failover func() *Failover
}

// Failover is what the publisher and the standbys the source names say of
// the slot (see WithFailover): whether it survives a failover.
type Failover struct {
	// Slot is the slot's failover flag; SyncStandbySlots whether the
	// publisher sets synchronized_standby_slots; Synced, by standby
	// (host:port), whether it keeps a synchronized copy of the slot.
	Slot, SyncStandbySlots bool
	Synced                 map[string]bool
}

// WithFailover adds the failover series, read from f at each scrape (nil:
// not known yet, or a publisher without failover slots).
func (c *Collector) WithFailover(f func() *Failover) *Collector {
	c.failover = f
	return c
}

// NewCollector returns a collector reading status on every scrape.
func NewCollector(status func() subscriber.Status, info Info) *Collector {
	return &Collector{status: status, info: info}
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("parapply_"+name, help, labels, nil)
}

var (
	infoDesc       = desc("info", "Always 1; labels name the version, the slot and the application_name.", "version", "slot", "application_name")
	stateDesc      = desc("state", "1 for the state parapply is in (starting, copying, streaming, reconnecting, waiting, stopped, failed), 0 for the others.", "state")
	waitingDesc    = desc("target_waiting", "1 for what parapply waits for on the target while it lacks a resource or takes no writes (disk_full, out_of_memory, too_many_connections, configuration_limit, insufficient_resources, read_only, recovery), 0 for the other reasons; all 0 while it waits for nothing.", "reason")
	waitStartDesc  = desc("target_wait_start_time_seconds", "When the current wait for the target began, in seconds since the Unix epoch; 0 while parapply waits for nothing.")
	startDesc      = desc("start_time_seconds", "When the run started, in seconds since the Unix epoch.")
	lsnDesc        = desc("lsn_bytes", "Publisher WAL positions as byte offsets: received (end of the last change received), applied (committed on the target), flushed (durable on the target, reported to the publisher), source_wal_end (the publisher's WAL end as of its last message).", "position")
	lagBytesDesc   = desc("lag_bytes", "Publisher WAL not yet applied on the target: source_wal_end minus applied; during the initial copy (and before anything is applied), the WAL the slot retains on the publisher.")
	lagSecondsDesc = desc("lag_seconds", "Age of the source commit of the last transaction applied, while more is waiting; 0 when caught up.")
	delayDesc      = desc("commit_delay_seconds", "Time from a source commit to the target commit that applied it (last transaction of each target transaction), on parapply's clock.")
	srcTxnsDesc    = desc("source_transactions_total", "Source transactions applied.")
	tgtTxnsDesc    = desc("target_transactions_total", "Target transactions committed (source transactions are grouped into them).")
	rowsDesc       = desc("rows_total", "Row changes committed on the target, by published table and kind (insert, update, delete).", "table", "kind")
	truncDesc      = desc("truncates_total", "TRUNCATEs committed on the target, by published table.", "table")
	conflictsDesc  = desc("conflicts_total", "Conflicts found on the target and resolved, by table and type (update_missing and delete_missing always; the other types of docs/conflicts.md once met).", "table", "type")
	stmtsDesc      = desc("statements_total", "Set-based statements executed on the target.")
	collapsedDesc  = desc("collapsed_updates_total", "Updates folded into an earlier update of the same row in the same statement.")
	replaysDesc    = desc("replayed_statements_total", "Set-based updates replayed row by row after a unique violation that row order avoids.")
	prefetchDesc   = desc("prefetched_rows_total", "Rows of coming updates and deletes read ahead on the prefetch connections, and values of coming inserts looked up in large indexes.")
	pfConnsDesc    = desc("prefetch_connections", "Prefetch connections open: one, and more while key sets wait for one and the prefetch sessions wait on reads, up to prefetch_connections.")
	pfDroppedDesc  = desc("prefetch_dropped_rows_total", "Rows not read ahead: offered while the prefetch queue was full, or applied before a prefetch connection took them.")
	pfWaitDesc     = desc("prefetch_wait_seconds_total", "Time statements waited, before they were sent, for their rows to be read ahead (only while the prefetch sessions' reads wait on a disk).")
	queueDesc      = desc("queue_bytes", "Bytes of transactions handed to workers and not yet committed.")
	streamDesc     = desc("stream_buffer_bytes", "Bytes of streamed in-progress transactions held in spill files until their commit or abort.")
	spillDesc      = desc("spill_bytes_total", "Bytes written to spill files (every streamed change is kept there until its transaction ends).")
	inflightDesc   = desc("streams_in_flight", "Streamed transactions being applied as they arrive, each on a target connection of its own.")
	ddlDesc        = desc("ddl_statements_total", "Schema changes from the publisher run on the target (ddl = apply), each a DDL message (its statements run together).")
	streamedDesc   = desc("streamed_transactions_total", "Streamed transactions committed, by how: in_flight (applied as they arrived) or at_commit (applied from their spill file at commit).", "how")
	skippedDesc    = desc("skipped_transactions_total", "Source transactions skipped at parapply skip's request, none of their changes applied.")
	tombDesc       = desc("tombstones_removed_total", "Records of deletes on the target (detect_update_deleted) removed, by reason: pruned (no remote update can be concurrent with the delete any more), expired (max_retention_duration; a later update of the row is reported as update_missing).", "reason")
	retriesDesc    = desc("retries_total", "Transactions tried again, by cause: deadlock, serialization_failure, lock_timeout, unique_violation, conflict (met while earlier transactions were in flight).", "cause")
	seqAtDesc      = desc("sequence_sync_timestamp_seconds", "When the publisher's sequences were last synced to the target (Unix time; 0: not yet).")
	seqDesc        = desc("sequences", "Sequences of the last sync, by result: synced (total), moved (set forward), missing (not on the target), unreadable (the source role may not read them), unchanged (already at the publisher's), ahead (beyond the publisher's on the target, left alone), refused (the target role may not read or set them: left untouched), unused (never used on the publisher).", "result")
	seqFailDesc    = desc("sequence_sync_failing", "1 while the last sequence sync failed (the log says why).")
	reconnectsDesc = desc("reconnects_total", "Faults ridden out by starting a new run from what the target recorded, by cause: connection, server, slot_busy, lock_wait, target_wait (the runs of waits for the target).", "cause")
	activeDesc     = desc("workers_active", "Workers applying now (0: the stream reader applies); with workers = auto, it changes with the load.")
	switchesDesc   = desc("worker_switches_total", "Switches made by workers = auto between the stream reader and the workers.")
	readShareDesc  = desc("read_wait_share", "With workers = auto: of the samples in which an applying session was active on the target, the share waiting on data reads (last judged window).")
	wTxnsDesc      = desc("worker_transactions_total", "Source transactions applied by each worker.", "worker")
	wUnitsDesc     = desc("worker_target_transactions_total", "Target transactions committed by each worker.", "worker")
	wBatchDesc     = desc("worker_units_total", "Units (consecutive source transactions handed over together) applied by each worker; several share a target transaction when they are ready at once.", "worker")
	wRowsDesc      = desc("worker_rows_total", "Row changes committed by each worker.", "worker")
	wBusyDesc      = desc("worker_busy_seconds_total", "Time each worker spent applying and committing.", "worker")
	wDepDesc       = desc("worker_dependency_wait_seconds_total", "Time each worker was idle while transactions in flight could not start (they depended on others).", "worker")
	wOrderDesc     = desc("worker_commit_order_wait_seconds_total", "Time each worker waited for earlier transactions to commit first.", "worker")
	copyTablesDesc = desc("copy_tables", "Tables of the initial copy, by state (done, pending).", "state")
	copyRowsDesc   = desc("copy_rows_total", "Rows copied by the initial copy, by table.", "table")
	copyBytesDesc  = desc("copy_bytes_total", "Bytes copied by the initial copy, by table.", "table")
	copyEstDesc    = desc("copy_rows_estimated", "Rows the publisher's statistics estimate each table of the initial copy holds.", "table")
	copyPctDesc    = desc("copy_percent", "Share of the initial copy done, in percent of the rows the publisher's statistics estimate (below 100 until every table is done).")
	copyETADesc    = desc("copy_eta_seconds", "Time the initial copy has still to run, at its rate so far: the rows' and the index builds' after them.")
	copyIdxDesc    = desc("copy_indexes", "Indexes and constraints the initial copy builds after the rows (copy_defer_indexes), by state (built, pending).", "state")
	syncDesc       = desc("synchronous_standby", "1 while the publisher names parapply in synchronous_standby_names (target commits are then synchronous).")
	behindDesc     = desc("behind", "1 while the current run is behind the publisher (its changes arrive two seconds or more after their commit, by the publisher's clock; back to 0 under one second), reading ahead and weighing workers; 0 while it keeps up, and while no run streams.")
	foSlotDesc     = desc("slot_failover", "1 when the slot is a failover slot (PostgreSQL 17 and later, failover = on), which a standby with sync_replication_slots keeps a copy of; absent before 17.")
	foSyncSetDesc  = desc("synchronized_standby_slots_set", "1 when the publisher sets synchronized_standby_slots (no change reaches parapply before the standbys it names have it).")
	foSyncedDesc   = desc("slot_synchronized", "1 when the standby (a host the source names besides the primary) keeps a synchronized copy of the slot, 0 when it does not.", "standby")
	binaryDesc     = desc("binary_transfer", "1 while values travel in binary from the publisher to the target (binary = on, and every published column can take them), 0 while they travel in text.")
)

var states = []string{subscriber.StateStarting, subscriber.StateCopying, subscriber.StateStreaming, subscriber.StateReconnecting, subscriber.StateWaiting, subscriber.StateStopped, subscriber.StateFailed}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{infoDesc, stateDesc, waitingDesc, waitStartDesc, startDesc, lsnDesc, lagBytesDesc, lagSecondsDesc, delayDesc,
		srcTxnsDesc, tgtTxnsDesc, rowsDesc, truncDesc, conflictsDesc, stmtsDesc, collapsedDesc, replaysDesc, prefetchDesc, pfDroppedDesc, pfConnsDesc, pfWaitDesc, queueDesc,
		streamDesc, retriesDesc, reconnectsDesc, seqAtDesc, seqDesc, seqFailDesc, wTxnsDesc, wUnitsDesc, wBatchDesc, wRowsDesc, wBusyDesc, wDepDesc, wOrderDesc,
		copyTablesDesc, copyRowsDesc, copyBytesDesc, copyEstDesc, copyPctDesc, copyETADesc, copyIdxDesc, syncDesc, binaryDesc, foSlotDesc, foSyncSetDesc, foSyncedDesc, behindDesc, spillDesc, inflightDesc, streamedDesc, ddlDesc, skippedDesc, tombDesc, activeDesc, switchesDesc, readShareDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	e := emitter(ch)
	e.gauge(infoDesc, 1, c.info.Version, c.info.Slot, c.info.ApplicationName)
	collectState(e, st)
	collectPositions(e, st)
	collectApplied(e, st)
	collectPipeline(e, st)
	collectWorkers(e, st)
	collectSequences(e, st)
	if c.failover != nil {
		if f := c.failover(); f != nil {
			e.gauge(foSlotDesc, b2f(f.Slot))
			e.gauge(foSyncSetDesc, b2f(f.SyncStandbySlots))
			for host, synced := range f.Synced {
				e.gauge(foSyncedDesc, b2f(synced), host)
			}
		}
	}
	if p := st.Copy; p != nil {
		collectCopy(e, *p)
	}
}

// emitter sends the metrics Collect makes, each a constant read from the
// status.
type emitter chan<- prometheus.Metric

func (e emitter) gauge(d *prometheus.Desc, v float64, labels ...string) {
	e <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func (e emitter) counter(d *prometheus.Desc, v float64, labels ...string) {
	e <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

// collectState emits the run's state, what it waits for and since when,
// when it started, and its modes (synchronous standby, binary, behind).
func collectState(e emitter, st subscriber.Status) {
	for _, s := range states {
		v := 0.0
		if s == st.State {
			v = 1
		}
		e.gauge(stateDesc, v, s)
	}
	waitStart, reason := 0.0, ""
	if w := st.Waiting; w != nil {
		waitStart, reason = float64(w.Since.UnixNano())/1e9, w.Reason
	}
	for _, r := range subscriber.WaitReasons {
		e.gauge(waitingDesc, b2f(r == reason), r)
	}
	e.gauge(waitStartDesc, waitStart)
	if !st.Started.IsZero() {
		e.gauge(startDesc, float64(st.Started.UnixNano())/1e9)
	}
	e.gauge(syncDesc, b2f(st.SyncStandby))
	e.gauge(binaryDesc, b2f(st.Binary))
	e.gauge(behindDesc, b2f(st.Behind))
}

// collectPositions emits the stream's positions, the lag, and the commit
// delay's histogram.
func collectPositions(e emitter, st subscriber.Status) {
	e.gauge(lsnDesc, float64(st.Received), "received")
	e.gauge(lsnDesc, float64(st.Applied), "applied")
	e.gauge(lsnDesc, float64(st.Durable), "flushed")
	e.gauge(lsnDesc, float64(st.SourceWALEnd), "source_wal_end")
	e.gauge(lagBytesDesc, float64(st.LagBytes()))
	e.gauge(lagSecondsDesc, st.Lag.Seconds())
	h := st.CommitDelay
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b] = h.Counts[i]
	}
	e <- prometheus.MustNewConstHistogram(delayDesc, h.Count, h.Sum, buckets)
}

// collectApplied emits what was applied: transactions, and each table's
// rows, truncates and conflicts.
func collectApplied(e emitter, st subscriber.Status) {
	e.counter(srcTxnsDesc, float64(st.Txns))
	e.counter(tgtTxnsDesc, float64(st.Groups))
	for _, t := range st.Tables {
		e.counter(rowsDesc, float64(t.Inserts), t.Name, "insert")
		e.counter(rowsDesc, float64(t.Updates), t.Name, "update")
		e.counter(rowsDesc, float64(t.Deletes), t.Name, "delete")
		e.counter(truncDesc, float64(t.Truncates), t.Name)
		e.counter(conflictsDesc, float64(t.UpdateMissing), t.Name, "update_missing")
		e.counter(conflictsDesc, float64(t.DeleteMissing), t.Name, "delete_missing")
		for _, ty := range conflict.Types {
			if n, ok := t.Conflicts[ty]; ok && ty != conflict.UpdateMissing && ty != conflict.DeleteMissing {
				e.counter(conflictsDesc, float64(n), t.Name, string(ty))
			}
		}
	}
}

// collectPipeline emits how the changes went through: statements, the
// prefetch, the queue, streamed transactions and their spill, skipped
// transactions, DDL, delete records, and the appliers at work.
func collectPipeline(e emitter, st subscriber.Status) {
	e.counter(stmtsDesc, float64(st.Statements))
	e.counter(collapsedDesc, float64(st.Collapsed))
	e.counter(replaysDesc, float64(st.Replays))
	e.counter(prefetchDesc, float64(st.Prefetched))
	e.counter(pfDroppedDesc, float64(st.PrefetchDropped))
	e.gauge(pfConnsDesc, float64(st.PrefetchConns))
	e.counter(pfWaitDesc, st.PrefetchWait.Seconds())
	e.gauge(queueDesc, float64(st.QueueBytes))
	e.gauge(streamDesc, float64(st.StreamBytes))
	e.counter(spillDesc, float64(st.SpillBytes))
	e.gauge(inflightDesc, float64(st.StreamsInFlight))
	e.counter(streamedDesc, float64(st.StreamedInFlight), "in_flight")
	e.counter(streamedDesc, float64(st.StreamedAtCommit), "at_commit")
	e.counter(skippedDesc, float64(st.Skipped))
	e.counter(ddlDesc, float64(st.DDL))
	e.counter(tombDesc, float64(st.TombstonesPruned), "pruned")
	e.counter(tombDesc, float64(st.TombstonesExpired), "expired")
	e.gauge(activeDesc, float64(st.ActiveWorkers))
	if st.AutoWorkers {
		e.counter(switchesDesc, float64(st.WorkerSwitches))
		e.gauge(readShareDesc, st.ReadWaitShare)
	}
}

// collectWorkers emits each worker's work and waits, the retries by
// cause summed over them, and the reconnects by cause.
func collectWorkers(e emitter, st subscriber.Status) {
	var retries [len(subscriber.RetryCauses)]int64
	for _, w := range st.Workers {
		n := strconv.Itoa(w.Worker)
		e.counter(wTxnsDesc, float64(w.Txns), n)
		e.counter(wUnitsDesc, float64(w.Units), n)
		e.counter(wBatchDesc, float64(w.UnitsApplied), n)
		e.counter(wRowsDesc, float64(w.Rows), n)
		e.counter(wBusyDesc, w.Busy.Seconds(), n)
		e.counter(wDepDesc, w.DependencyWait.Seconds(), n)
		e.counter(wOrderDesc, w.CommitWait.Seconds(), n)
		for i, r := range w.RetriesBy {
			retries[i] += r
		}
	}
	for i, cause := range subscriber.RetryCauses {
		e.counter(retriesDesc, float64(retries[i]), cause)
	}
	for i, cause := range subscriber.FaultCauses {
		e.counter(reconnectsDesc, float64(st.Reconnects[i]), cause)
	}
}

// collectSequences emits the last sequence sync's outcome by kind, and
// whether the last one failed.
func collectSequences(e emitter, st subscriber.Status) {
	if sq := st.Sequences; !sq.At.IsZero() {
		e.gauge(seqAtDesc, float64(sq.At.UnixNano())/1e9)
		e.gauge(seqDesc, float64(sq.Sequences), "synced")
		e.gauge(seqDesc, float64(sq.Moved), "moved")
		e.gauge(seqDesc, float64(sq.Missing), "missing")
		e.gauge(seqDesc, float64(sq.Unread), "unreadable")
		e.gauge(seqDesc, float64(sq.Unchanged), "unchanged")
		e.gauge(seqDesc, float64(sq.Ahead), "ahead")
		e.gauge(seqDesc, float64(sq.Refused), "refused")
		e.gauge(seqDesc, float64(sq.Unused), "unused")
	}
	e.gauge(seqFailDesc, b2f(st.SequenceError != ""))
}

// collectCopy emits the initial copy's progress: tables and deferred
// indexes done and pending, the share done and time left, and each
// table's rows and bytes.
func collectCopy(e emitter, p tablesync.Progress) {
	e.gauge(copyTablesDesc, float64(p.TablesDone), "done")
	e.gauge(copyTablesDesc, float64(p.Tables-p.TablesDone), "pending")
	e.gauge(copyIdxDesc, float64(p.IndexesBuilt), "built")
	e.gauge(copyIdxDesc, float64(p.Indexes-p.IndexesBuilt), "pending")
	if pct, left, ok := subscriber.CopyEstimate(p); ok {
		e.gauge(copyPctDesc, pct)
		e.gauge(copyETADesc, left.Seconds())
	}
	for _, t := range p.PerTable {
		e.counter(copyRowsDesc, float64(t.Rows), t.Name)
		e.counter(copyBytesDesc, float64(t.Bytes), t.Name)
		e.gauge(copyEstDesc, float64(t.EstRows), t.Name)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Registry returns a registry with the collector and the Go runtime and
// process collectors.
func Registry(c *Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(c, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves the registry at /metrics.
func Handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "parapply: metrics at /metrics")
	})
	return mux
}

// Listen binds addr (host:port) for the metrics endpoint; an error names
// the setting, so a port in use is clear at startup, not later.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics_addr %q: %w (choose another address, or leave metrics_addr empty to turn metrics off)", addr, err)
	}
	return ln, nil
}

// Serve serves h on ln until ctx ends.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	})
	defer stop()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("metrics endpoint: %w", err)
	}
	return nil
}
