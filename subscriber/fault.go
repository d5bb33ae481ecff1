package subscriber

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/targetdb"
)

// A run ends at the first fault; Run decides whether the fault is one to
// ride out by starting again from what the target recorded. Nothing a run
// believed about the target survives into the next: a target that crashed
// may have lost commits that returned (synchronous_commit = off), and only
// the progress row, read again after the crash, tells what it kept.

// errLost marks an error met on a connection that is gone.
type errLost struct{ err error }

func (e errLost) Error() string { return e.err.Error() }
func (e errLost) Unwrap() error { return e.err }

// lostConnection marks err as met on a lost connection (nil stays nil).
func lostConnection(err error) error {
	if err == nil || errors.As(err, new(errLost)) {
		return err
	}
	return errLost{err}
}

// ErrPermanent marks an error Run stopped at that another start would
// only meet again: a setting, a permission, the schema, the data. A
// supervisor should not restart parapply until what the error names is
// fixed (the command exits with status 3 for it, 1 for faults it gave up
// riding out, which a later start may get past).
var ErrPermanent = errors.New("stopped for a reason a restart does not change")

// Permanent marks err as ErrPermanent, keeping its text (nil stays nil):
// for the command's own refusals of its settings, which a restart would
// meet again as well.
func Permanent(err error) error {
	if err == nil || errors.Is(err, ErrPermanent) {
		return err
	}
	return permanent{err}
}

// permanent marks err as ErrPermanent, keeping its text.
type permanent struct{ error }

func (p permanent) Unwrap() error   { return p.error }
func (permanent) Is(err error) bool { return err == ErrPermanent }

// errLockStall marks a lock wait on the target that passed lock_timeout
// where no retry in place can help: the transaction was the oldest in
// flight, so the lock is held by a streamed transaction applied in flight
// or by a session outside parapply.
type errLockStall struct{ err error }

func (e errLockStall) Error() string { return e.err.Error() }
func (e errLockStall) Unwrap() error { return e.err }

// Fault causes, as counted in Status.Reconnects and the metrics.
const (
	FaultConnection = "connection" // a connection to the publisher or target was lost or refused
	FaultServer     = "server"     // a server shut down, crashed or is starting up, or ended the session
	FaultSlotBusy   = "slot_busy"  // the slot was still held by an earlier walsender
	FaultLockWait   = "lock_wait"  // a lock wait on the target passed lock_timeout
	// FaultTargetWait: the target lacks a resource or takes no writes for
	// now (see targetWait), waited out whatever reconnect_timeout says.
	FaultTargetWait = "target_wait"
)

// FaultCauses lists the fault causes in the order of Status.ReconnectsBy.
var FaultCauses = [5]string{FaultConnection, FaultServer, FaultSlotBusy, FaultLockWait, FaultTargetWait}

// faultCause names a fault that a new run may ride out, or returns "" for
// an error that another try would only repeat (a setting, a permission, the
// schema, the data).
func faultCause(err error) string {
	if err == nil || errors.Is(err, context.Canceled) {
		return ""
	}
	if errors.As(err, new(errLockStall)) {
		return FaultLockWait
	}
	if targetWait(err) != "" {
		return FaultTargetWait
	}
	if errors.Is(err, source.ErrSlotBusy) || errors.Is(err, targetdb.ErrOriginInUse) {
		// An origin still held: by a backend of ours that is ending.
		return FaultSlotBusy
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == pgerrcode.AdminShutdown || pe.Code == pgerrcode.CrashShutdown || pe.Code == pgerrcode.CannotConnectNow:
			// admin_shutdown, crash_shutdown, cannot_connect_now
			return FaultServer
		case pe.Code[:2] == pgerrcode.ConnectionException[:2]:
			return FaultConnection
		case pe.Code == pgerrcode.ObjectInUse || pe.Code == pgerrcode.TooManyConnections:
			// object_in_use (a slot still active), too_many_connections
			// (on the publisher: the walsender slot of one that is ending)
			return FaultSlotBusy
		}
		if !errors.As(err, new(errLost)) {
			return ""
		}
	}
	if errors.As(err, new(errLost)) || errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) ||
		pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return FaultConnection
	}
	var ne net.Error
	var ce *pgconn.ConnectError
	if errors.As(err, &ne) || errors.As(err, &ce) {
		return FaultConnection
	}
	return ""
}

// fault is what Run's decision after an error of a run depends on: the
// error's cause, what the process has done so far, and how long the faults
// have lasted. Run gathers it; retryAfter decides, without I/O or a clock.
type fault struct {
	cause        string        // faultCause of the error ("" for none)
	holder       string        // the process the target records as holding the slot, for source.ErrSlotBusy ("" for none, or not asked)
	holderAlive  bool          // holder was seen alive on this host (one on another host cannot be seen)
	everStreamed bool          // some run of this process streamed
	timeout      time.Duration // reconnect_timeout (0: faults are not ridden out)
	elapsed      time.Duration // since the first run of these faults began
	try          int           // the attempt within these faults, from 1
}

// retry is Run's decision after an error: stop with err, or start again
// after delay, with left of the faults' allowance remaining (for the log).
type retry struct {
	err         error
	delay, left time.Duration
}

// retryAfter decides what Run does after err: an error that is no fault
// stops at once, marked ErrPermanent, as does a slot held by another live
// parapply; a fault stops unmarked (exit status 1) when faults are not
// ridden out, at a first start that never streamed (only a slot still held
// by a dying walsender is waited for there, at most firstStartSlotWait), or
// once the faults have lasted the allowance; otherwise the run starts again
// after a delay that doubles with each attempt from reconnectFirstDelay up
// to reconnectMaxDelay. A wait for the target (FaultTargetWait) is no
// setup mistake and has no allowance: it goes on, at a first start too,
// for as long as it lasts, the delay doubling up to waitMaxDelay (left is
// then 0); only reconnect_timeout = 0 stops it.
func retryAfter(err error, slot string, f fault) retry {
	if f.cause == "" {
		return retry{err: permanent{err}}
	}
	if f.timeout <= 0 {
		return retry{err: err}
	}
	if f.cause == FaultTargetWait {
		return retry{delay: backoff(f.try, waitMaxDelay)}
	}
	if f.holderAlive && errors.Is(err, source.ErrSlotBusy) {
		return retry{err: errSlotHeld(slot, f.holder, err)}
	}
	limit := f.timeout
	if !f.everStreamed {
		// A first start that cannot reach a server is a setup mistake,
		// said at once; only a slot still held by the walsender of a
		// subscriber that just died is waited for.
		if f.cause != FaultSlotBusy {
			return retry{err: err}
		}
		limit = min(limit, firstStartSlotWait)
	}
	if f.elapsed >= limit {
		if f.holder != "" && errors.Is(err, source.ErrSlotBusy) {
			err = errHolderRecorded(slot, f.holder, err)
		}
		if limit < f.timeout {
			return retry{err: fmt.Errorf("%w (still so after %s)", err, limit)}
		}
		return retry{err: fmt.Errorf("%w (gave up after reconnect_timeout %s of faults)", err, limit)}
	}
	return retry{delay: backoff(f.try, reconnectMaxDelay), left: limit - f.elapsed}
}

// backoff is the delay before attempt try (from 1): reconnectFirstDelay,
// doubling with each attempt, up to most.
func backoff(try int, most time.Duration) time.Duration {
	return min(reconnectFirstDelay<<min(max(try, 1)-1, 16), most)
}
