package subscriber

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/pgerr"
)

// A target that is out of a resource (disk, memory, connections, a
// configured limit) or takes no writes (a standby in recovery, a database
// made read-only, a server starting up) will take them again once a DBA
// fixes it, as the built-in's apply worker, restarted by its launcher,
// finds. Such an error ends the run as a fault does, and Run starts new runs
// from what the target recorded for as long as it lasts, reconnect_timeout
// or not, saying what it waits for and the fix (the log, Status.Waiting,
// the status row, the metrics); the wait ends at the first target commit,
// or once a run has streamed for steadyRun without meeting it again.

// Reasons a run waits for the target, as Status.Waiting, the status row and
// the metrics name them.
const (
	WaitDiskFull              = "disk_full"              // 53100: no space left on a disk of the target
	WaitOutOfMemory           = "out_of_memory"          // 53200: out of memory, or of shared memory
	WaitConnections           = "too_many_connections"   // 53300: no connection slot free (server, database or role)
	WaitConfigurationLimit    = "configuration_limit"    // 53400: a configured limit reached (temp_file_limit, max_prepared_transactions, ...)
	WaitInsufficientResources = "insufficient_resources" // the rest of class 53
	WaitReadOnly              = "read_only"              // 25006: a standby in recovery, or default_transaction_read_only
	WaitRecovery              = "recovery"               // 57P03: starting up, in crash recovery, or a standby taking no connections
)

// WaitReasons lists the reasons, in the order the metrics report them.
var WaitReasons = [...]string{WaitDiskFull, WaitOutOfMemory, WaitConnections, WaitConfigurationLimit, WaitInsufficientResources, WaitReadOnly, WaitRecovery}

// errPublisher marks an error met on the publisher: the same SQLSTATEs
// there (a walsender slot still held by a dying walsender is 53300, a
// publisher restarting 57P03) are faults of their own, never a wait for the
// target.
type errPublisher struct{ err error }

func (e errPublisher) Error() string { return e.err.Error() }
func (e errPublisher) Unwrap() error { return e.err }

// onPublisher marks err as met on the publisher (nil stays nil).
func onPublisher(err error) error {
	if err == nil || errors.As(err, new(errPublisher)) {
		return err
	}
	return errPublisher{err}
}

// targetWait names what err says the target lacks for now (one of
// WaitReasons), or returns "" for an error that is no such fault: class 53
// (insufficient resources), 25006 (read_only_sql_transaction: a hot standby
// or a read-only database refuses the write) and 57P03 (cannot_connect_now:
// starting up, in recovery), from the target, by SQLSTATE alone, wherever
// the error is wrapped (a lost connection's too: a PANIC on a full disk
// ends the session).
func targetWait(err error) string {
	var pe *pgconn.PgError
	if err == nil || errors.As(err, new(errPublisher)) || !errors.As(err, &pe) || len(pe.Code) != 5 {
		return ""
	}
	switch pe.Code {
	case pgerrcode.DiskFull:
		return WaitDiskFull
	case pgerrcode.OutOfMemory:
		return WaitOutOfMemory
	case pgerrcode.TooManyConnections:
		return WaitConnections
	case pgerrcode.ConfigurationLimitExceeded:
		return WaitConfigurationLimit
	case pgerrcode.ReadOnlySQLTransaction:
		return WaitReadOnly
	case pgerrcode.CannotConnectNow:
		return WaitRecovery
	}
	if pe.Code[:2] == pgerrcode.InsufficientResources[:2] {
		return WaitInsufficientResources
	}
	return ""
}

// waitAdvice is what a wait's log line and status say: what the target
// lacks, what parapply waits for, and what fixes it.
type waitAdvice struct{ what, until, fix string }

// adviceFor returns the advice for reason (one of WaitReasons) on the
// target database db ("" if not known).
func adviceFor(reason, db string) waitAdvice {
	if db == "" {
		db = "<database>"
	}
	const writes = "waiting for it to take writes again"
	switch reason {
	case WaitDiskFull:
		return waitAdvice{"the target's disk is full", writes, "free space on the target (or grow its disk)"}
	case WaitOutOfMemory:
		return waitAdvice{"the target is out of memory", writes,
			"free memory on the target's host or lower work_mem there; out of shared memory: raise the setting the HINT names (max_locks_per_transaction) and restart the target"}
	case WaitConnections:
		return waitAdvice{"the target has no connection slot free", "waiting for one to free up",
			"end idle sessions on the target, or raise max_connections (or the CONNECTION LIMIT of the role or database the error names)"}
	case WaitConfigurationLimit:
		return waitAdvice{"the target reached a configured limit", writes, "raise the setting the error names on the target"}
	case WaitReadOnly:
		return waitAdvice{"the target takes no writes (read-only)", writes,
			"a standby: promote it (SELECT pg_promote()); else turn default_transaction_read_only off where it was set (ALTER DATABASE " + db + " RESET default_transaction_read_only, or ALTER SYSTEM RESET default_transaction_read_only; SELECT pg_reload_conf())"}
	case WaitRecovery:
		return waitAdvice{"the target is starting up or in recovery", "waiting for it to accept connections",
			"none while it replays WAL; if it stays so, read the target's log (a standby with hot_standby = off takes connections only once promoted)"}
	}
	return waitAdvice{"the target lacks a resource", writes, "give the target what the error names"}
}

// Wait is what a run waits for on the target, as Status reports it: the
// reason (one of WaitReasons), since when, the text of the last error, what
// the target lacks and what parapply waits for, and the fix.
type Wait struct {
	Reason           string
	Since            time.Time
	Error, What, Fix string
}

// waitMaxDelay caps the delay between the runs of a wait: a target fixed
// is taken up again within it.
const waitMaxDelay = 30 * time.Second

// waiting is a wait in progress: its reason, when it began, the attempts
// so far, the delay before the last, and the last error's text.
type waiting struct {
	reason string
	since  time.Time
	tries  int
	delay  time.Duration
	err    string
}

// noteWait records that a run ended with err, a wait for reason: the wait
// in progress goes on (a reason of its own starts a new one). It returns
// the wait.
func (s *Subscriber) noteWait(reason string, err error) *waiting {
	w := &waiting{reason: reason, since: time.Now(), tries: 1, err: pgerr.Text(err)}
	if old := s.runs.wait.Load(); old != nil && old.reason == reason {
		w.since, w.tries, w.delay = old.since, old.tries+1, old.delay
	}
	s.runs.wait.Store(w)
	return w
}

// logWait says, before the next run after delay, what the wait w waits for:
// a warning when it begins and each time the delay grows, then one line per
// attempt at the longest delay.
func (s *Subscriber) logWait(w *waiting, delay time.Duration) {
	a := adviceFor(w.reason, s.targetDB)
	msg := fmt.Sprintf("%s (%s): %s; %s", a.what, w.err, a.until, a.fix)
	attrs := []any{"reason", w.reason, "waiting_for", time.Since(w.since).Round(time.Second).String(), "attempt", w.tries, "retry_in", delay.String()}
	if delay > w.delay {
		s.log.Warn(msg, attrs...)
	} else {
		s.log.Info(msg, attrs...)
	}
	w.delay = delay
}

// endWait ends the wait in progress, if any, saying why (a target commit,
// a run that streamed steadyRun without meeting it again).
func (s *Subscriber) endWait(why string) {
	w := s.runs.wait.Load()
	if w == nil || !s.runs.wait.CompareAndSwap(w, nil) {
		return
	}
	s.log.Info("the target's wait is over: "+why, "reason", w.reason, "waited", time.Since(w.since).Round(time.Millisecond).String(), "attempts", w.tries)
}

// steadyNow ends the wait in progress once the current run has streamed
// for steadyRun without meeting it again (no change came to write).
func (s *Subscriber) steadyNow() {
	if s.runs.wait.Load() == nil {
		return
	}
	if since := s.runs.streamedSince.Load(); since != 0 && time.Since(time.Unix(0, since)) >= steadyRun {
		s.endWait(fmt.Sprintf("a run streamed for %s without meeting it again", steadyRun))
	}
}

// targetDatabase is the target database's name, quoted for SQL ("" if the
// target's connection string does not parse), for the fix of a wait.
func targetDatabase(dsn string) string {
	cc, err := pgconn.ParseConfig(dsn)
	if err != nil || cc.Database == "" {
		return ""
	}
	return parapply.QuoteIdent(cc.Database)
}

// status is the wait as Status reports it.
func (w *waiting) status(db string) *Wait {
	a := adviceFor(w.reason, db)
	return &Wait{Reason: w.reason, Since: w.since, Error: w.err, What: a.what + ": " + a.until, Fix: a.fix}
}
