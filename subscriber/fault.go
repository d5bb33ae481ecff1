package subscriber

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/target"
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

func (p permanent) Unwrap() error      { return p.error }
func (permanent) Is(target error) bool { return target == ErrPermanent }

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
)

// FaultCauses lists the fault causes in the order of Status.ReconnectsBy.
var FaultCauses = [4]string{FaultConnection, FaultServer, FaultSlotBusy, FaultLockWait}

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
	if errors.Is(err, source.ErrSlotBusy) || errors.Is(err, target.ErrOriginInUse) {
		// An origin still held: by a backend of ours that is ending.
		return FaultSlotBusy
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "57P01" || pe.Code == "57P02" || pe.Code == "57P03":
			// admin_shutdown, crash_shutdown, cannot_connect_now
			return FaultServer
		case pe.Code[:2] == "08":
			return FaultConnection
		case pe.Code == "55006" || pe.Code == "53300":
			// object_in_use (a slot still active), too_many_connections
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
