// Package apply writes decoded changes to the target database. Consecutive
// changes of the same kind and shape on the same table form a run that becomes
// one set-based statement (INSERT ... SELECT FROM unnest, UPDATE ... FROM
// unnest, DELETE ... USING unnest); statements are queued and sent pipelined,
// so a small source transaction costs one round trip, BEGIN to COMMIT.
//
// Order within a source transaction is kept: a run is closed before a change
// whose key (old or new replica identity value) the run already touches, so
// a statement never sees two changes of one row.
//
// An Applier owns one target session (Open) and is driven by one goroutine:
// the stream reader's, a worker's of the subscriber's pool, or a streamed
// transaction's. Begin and End bracket each source transaction; Commit,
// CommitAsync or PrepareTransaction end the target transaction that holds
// them.
//
// # Invariants
//
//  1. The session is the built-in apply worker's: session_replication_role
//     = replica, so triggers and foreign keys act as they do for replicated
//     changes (Open), the lock_timeout of Config.LockTimeout, and, once
//     SetupOrigin has run, every commit is one of parapply's replication
//     origin, carrying its last source transaction's end LSN and commit
//     time (queueEnd: pg_replication_origin_xact_setup).
//
//  2. A group is one target transaction holding one or more consecutive
//     source transactions (Txn): Begin opens it when none is open, and
//     nothing is sent until the first statement is due. Its end is one
//     round trip (queueEnd): the last statements, the origin's position,
//     the marks of skipped transactions (progress.SkipDone), the slot's
//     progress row naming the group's last source transaction
//     (progress.Update; with Config.AheadOfOrder its range in
//     parapply.applied, progress.RecordApplied), COMMIT, and the target's
//     WAL positions, which the subscriber's tracker pairs with the source
//     position (Committed). The progress row therefore commits with the
//     changes it records, or not at all.
//
//  3. Runs. The batcher (batch.go, no I/O) puts each row change in the open
//     run of its table when the kind and the set of columns match and the
//     run does not touch the change's key yet (batcher.start), else closes
//     that run and opens another. Runs of different tables stay open side
//     by side, which reorders statements across tables only, and only
//     where no trigger fires on the target (a run of a table with one is
//     only ever open alone). An update of a row whose earlier update is in
//     the open run, with the same columns and no key change, is folded into
//     it (batcher.collapse). A closed run becomes one statement
//     (queueStatement): COPY for most insert runs of copyMinRows rows or more,
//     else a set-based statement prepared once per session (pipeline.go);
//     an update run on a table with unique indexes beyond its key runs
//     under a savepoint and, on a unique violation that row order would
//     have avoided, row by row (withFallback).
//
//  4. Statements are sent pipelined, several runs to a round trip, and
//     CommitAsync returns once the commit is sent: the next group is built
//     while the target commits the last. A round trip's failure is returned
//     by the next call that uses the session.
//
//  5. Errors name source transactions: one met by a target transaction
//     that held a single source transaction is a TxnError, by one that
//     held several a GroupError (txns.wrap), which the subscriber applies
//     again one transaction at a time.
//
//  6. Scheduling keys (RowKeys, keys.go) say what a change touches: its
//     table and replica identity values, old and new; the values its new
//     row takes in unique indexes beyond the key; the whole table where
//     rows cannot be told apart; a barrier where a trigger fires on the
//     target. The subscriber's scheduler orders transactions by them.
//
//  7. Read ahead (prefetch.go) is best effort on connections of its own: it
//     reads the pages coming statements will touch, never changes what is
//     applied, and an error stops it, never the apply. While its reads wait
//     on a disk, a round trip waits for its rows to be read ahead, at most
//     readAheadWaitMax (awaitReadAhead).
//
// # Conflicts
//
// With conflict detection (Config.Detection; resolve.go, detect.go) an
// update or delete run's statement fails with SQLSTATE PC001 when it
// changed fewer rows than it holds, or, with track_commit_timestamp on, a
// row another origin changed last; an insert run's fails on a unique
// violation. exec then rolls the target
// transaction back and sends it again from its start, every run's statement
// replaced by its resolving one, which examines, resolves and logs each
// conflict in parapply.conflicts within the same statement; for that the
// session keeps what it sent of the open target transaction (keptGroup, up
// to keptGroupBytes: a larger transaction's conflict stops with an error
// that says so), and replays at most maxReplays times. A worker running
// ahead of earlier transactions (MayResolve false) returns the error
// instead (ConflictFound), for the subscriber's pool to try the unit again
// once it is the oldest. A transaction marked Txn.Failed has its changes
// written to parapply.conflicts in place of being applied.
//
// # Streamed transactions
//
// A streamed transaction is applied before its commit LSN and time are
// known: Retitle names it once they are, so that the progress row, the
// tracker and the conflict log get them. Its subtransactions are bracketed
// by Savepoint and RollbackTo, queued in order with its statements.
//
// # Two-phase transactions
//
// PrepareTransaction ends a group that holds one prepared source
// transaction with a row of parapply.prepared and PREPARE TRANSACTION
// (progress.RecordPrepared); the progress row is left alone, since its row
// lock would be held until COMMIT PREPARED and stall every later commit.
// FinishPrepared runs COMMIT PREPARED or ROLLBACK PREPARED; a commit then
// moves the progress row and forgets the parapply.prepared row in one
// transaction. A gid the target no longer has was finished before a
// restart: a commit is checked against parapply.prepared
// (progress.PreparedDone), and a prepared transaction neither there nor
// committed is reported lost.
//
// # Lock waits and lost connections
//
// A statement that waits on a lock past lock_timeout fails with SQLSTATE
// 55P03, which aborts the target transaction; the caller decides whether
// to try again (a worker behind earlier transactions in flight) or to end
// the run. If the round trip carrying COMMIT fails, the group may have
// committed all the same (the connection died after COMMIT reached the
// target): end rolls back what it can and returns the error, and the
// progress row tells, once read again, whether the group is there (the
// next run's start; for a streamed transaction, progress.Applied once its
// backend has ended).
package apply
