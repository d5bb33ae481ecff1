// Package subscriber wires the stream reader, the decoder and the applier
// into the loop that keeps a target in step with a publisher, and owns their
// goroutines and shutdown.
//
// A run (Subscriber.run) reads the slot's stream from the position the
// target recorded, decodes each frame (loop.frame, loop.dispatch) and hands
// every source transaction to a sink: readerSink, the reader's own
// apply.Applier (workers = 0, and workers = auto until the tuner moves), or
// poolSink, which cuts the stream into units for the worker pool (pool.go).
// Subscriber.Run starts a new run after each fault it can ride out
// (fault.go) and after a group that failed as one (below).
//
// The loop is an I/O shell around its core (package flow, flow.Core): the
// core decides, without a connection, a clock or a log, what is applied or
// skipped (by the progress row, parapply.applied and skip requests), what
// a held BEGIN begins, where a group ends, and the state of prepared,
// streamed and DDL-holding transactions; the loop feeds it each message
// and what its I/O found, and does what it answers.
//
// # Invariants
//
//  1. Exactly once. A target transaction that applies source transactions
//     also moves the slot's progress row to the last of them, in the same
//     transaction, in the same round trip as its COMMIT
//     (apply.Applier.Commit, CommitAsync; progress.Update). With
//     commit_order = dependency it records its range of source commits in
//     parapply.applied instead (progress.RecordApplied), and pool.advance
//     moves the progress row past the ranges every earlier one of which has
//     committed. A run starts from what the target says (progress.Open,
//     progress.ReadApplied) and flow.Core.Applied skips every transaction the
//     progress row or a parapply.applied range covers; so a crash at any
//     point neither loses a transaction nor applies one twice.
//
//  2. Commit order. Source transactions arrive in commit order and are
//     committed on the target in that order: on one connection (readerSink)
//     trivially; in the pool a worker commits a batch only once every
//     earlier unit has committed (pool.try waits in pool.waitOldest, the
//     scheduler's commit gate), unless commit_order = dependency, where a
//     batch commits as soon as it is applied: the scheduler started it
//     only once every unit it depends on had committed.
//
//  3. Keys and dependencies. With workers, each change's scheduling keys
//     (apply.Applier.RowKeys: table and replica identity value of the old
//     and new rows, the values taken in unique indexes beyond the key, the
//     whole table where rows cannot be told apart, a barrier for TRUNCATE
//     and for tables with triggers on the target) go with its unit
//     (poolSink.change). The scheduler (package schedule) makes a unit wait
//     for the last earlier unit that touched one of its keys and is not yet
//     committed, and for nothing else. A freed unique value carries no key:
//     a unit that meets a unique violation while earlier units are in
//     flight is rolled back and tried again once it is the oldest
//     (pool.execute, retryCause).
//
//  4. Groups. Consecutive source transactions share one target transaction
//     (a group) until it holds group_max_changes changes or group_max_bytes
//     of values, or has been open group_max_delay (flow.Core.Full,
//     loop.commitTxn), and
//     whenever the stream has nothing more waiting (Subscriber.run commits
//     the group when no frame is queued). With workers, the same rule cuts
//     units (at most unitMaxChanges changes, poolSink.maxChanges), and a
//     worker puts consecutive ready units into one target transaction, a
//     batch (pool.take, pool.budget; schedule.Scheduler.Extend), so a
//     batch is always a run of consecutive source transactions.
//
//  5. What the publisher is told. A commit reaches the progress.Tracker in
//     source order (record; with workers pool.report, through
//     schedule.InOrder), paired with the target's WAL position after it.
//     The tracker releases a position as durable only once the target has
//     flushed that commit (Tracker.Flushed, or at once for a synchronous
//     commit; between groups, loop.checkFlush asks the target every 200 ms
//     while a flush is due), and the stream reader reports only durable
//     positions as flushed (source.Stream). A keepalive, or a transaction
//     skipped, moves the position through Tracker.Reached only once
//     everything taken from the stream before it is committed (loop.frame,
//     loop.commitTxn), so the slot never moves past a transaction the
//     target could still lose.
//
//  6. Relations. A relation message applies to every later change of its
//     table: the reader's applier loads it at once; the pool logs them in
//     stream order (relLog) and a worker loads, before each unit, those
//     logged since its last (pool.catchUp), and those inside a unit where
//     they occur (worker.apply).
//
// # Streamed transactions
//
// A transaction the publisher streams before its commit (streaming = on) is
// written, change by change as received, to a spill file (loop.spillChange,
// package spill) and, when a connection is free (loop.inflightAllowed: at
// most stream_workers, none after a run that stalled on a lock, none while
// a table's initial copy could already hold it), applied as it arrives on
// a target connection of its own (inflight.go): every 256 kB of a stream
// block and at each stream stop, loop.handOver passes what arrived to the
// transaction's inflight applier, after committing everything before the
// block (loop.commitTaken), so that its locks are taken in the publisher's
// order. A subtransaction's first change takes a savepoint, and its abort
// rolls back to it (inflight.subAbort). At the stream commit
// (loop.streamCommit) the loop settles what it holds, then the inflight
// applier commits with the progress row; a transaction already applied, or
// one to be skipped, is rolled back instead. If anything failed in flight
// (a lock wait past inflightLockTimeout, an error, a lost connection) the
// inflight transaction is rolled back and the transaction is applied from
// its spill file at its commit, on the main path (loop.replay), like one
// never applied in flight. A commit whose connection died is looked up
// after its backend has ended (loop.committedAnyway, awaitGone): the
// progress row tells whether it reached the target.
//
// # Two-phase transactions
//
// With two_phase = on, a BEGIN PREPARE settles everything before it
// (loop.beginPrepare) and the prepared transaction goes to the reader's own
// applier, with workers or not (the sink in use is held aside until its
// PREPARE, loop.prepare). It ends with PREPARE TRANSACTION under
// parapply's own gid (loop.preparedGID) and a row of parapply.prepared; the
// progress row is left alone, since its lock would be held until COMMIT
// PREPARED. COMMIT PREPARED moves the progress row and forgets the
// parapply.prepared row in one transaction (loop.finishPrepared,
// apply.Applier.FinishPrepared); a gid found in pg_prepared_xacts after a
// restart marks a PREPARE sent again. A streamed transaction that is
// prepared is applied from its spill file at its STREAM PREPARE
// (loop.streamPrepare), what was applied in flight rolled back.
//
// # Lock stalls
//
// Applying sessions run with the lock_timeout setting
// (apply.Config.LockTimeout). A worker whose unit waits
// on a lock past it while earlier units are in flight (one of them may
// hold the lock) rolls back and tries again once the unit is the oldest
// (pool.execute). The oldest unit in flight, or the reader's own
// connection, waiting past lock_timeout means the lock is held by a
// streamed transaction applied in flight or by a session outside parapply:
// the run ends with errLockStall (fault cause lock_wait), and the next run
// applies streamed transactions at their commit only (atCommitOnly), so
// that nothing of parapply's holds a lock the main path waits for. A
// streamed transaction's own lock waits are bounded by inflightLockTimeout,
// shorter than PostgreSQL's default deadlock_timeout, so it is the side
// that gives way.
//
// # A group applied again one transaction at a time
//
// An error met by a target transaction that applied several source
// transactions (a group, or a worker's batch) is an apply.GroupError: which
// of them caused it is not known. Unless the error is a fault, Subscriber.Run
// records the group's last commit LSN (oneByOne) and starts a new run,
// which commits each source transaction alone until it passes that LSN
// (flow.Core.Full; no workers meanwhile, see Subscriber.autoWorkers), so
// that an error names exactly one transaction (apply.TxnError), which
// on_error = skip_transaction or parapply skip can then skip
// (Subscriber.skippable, flow.Core.SkipAsked). If every transaction applies
// (the error was another session's, gone now), loop.commit ends the run with
// errOneByOneDone once past the group, and the next run groups again.
package subscriber
