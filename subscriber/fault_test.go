package subscriber

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/internal/pgerr"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/targetdb"
)

func TestFaultCause(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"target crashed mid-statement", fmt.Errorf("applying insert: %w", io.ErrUnexpectedEOF), FaultConnection},
		{"connection refused", fmt.Errorf("connecting: %w", syscall.ECONNREFUSED), FaultConnection},
		{"reset", syscall.ECONNRESET, FaultConnection},
		{"closed connection", fmt.Errorf("x: %w", pgconn.ErrConnClosed), FaultConnection},
		{"marked lost", lostConnection(errors.New("worker 1: something")), FaultConnection},
		{"marked lost, with a server error", lostConnection(pg("42P01")), FaultConnection},
		{"admin shutdown", pg("57P01"), FaultServer},
		{"crash shutdown", pg("57P02"), FaultServer},
		{"target starting up", fmt.Errorf("connecting: %w", pg("57P03")), FaultTargetWait},
		{"publisher starting up", onPublisher(fmt.Errorf("connecting: %w", pg("57P03"))), FaultServer},
		{"target disk full", fmt.Errorf("applying insert: %w", pg("53100")), FaultTargetWait},
		{"target disk full, connection lost", lostConnection(pg("53100")), FaultTargetWait},
		{"target read-only", pg("25006"), FaultTargetWait},
		{"target too many connections", fmt.Errorf("connecting: %w", pg("53300")), FaultTargetWait},
		{"publisher walsenders taken", onPublisher(pg("53300")), FaultSlotBusy},
		{"publisher out of memory", onPublisher(pg("53200")), ""},
		{"slot active", pg("55006"), FaultSlotBusy},
		{"slot busy at start", fmt.Errorf("slot s is in use: %w", source.ErrSlotBusy), FaultSlotBusy},
		{"origin still held", fmt.Errorf("worker 2: %w", targetdb.OriginError("parapply_s_w2", pg("55006"))), FaultSlotBusy},
		{"no free origin state", targetdb.OriginError("parapply_s_w9", pg("53400")), ""},
		{"origins not granted", targetdb.OriginError("parapply_s", pg("42501")), ""},
		{"lock stall", errLockStall{pg("55P03")}, FaultLockWait},
		{"wrong password", pg("28P01"), ""},
		{"missing table", pg("42P01"), ""},
		{"unique violation", pg("23505"), ""},
		{"plain error", errors.New("target schema does not match"), ""},
		{"cancelled", context.Canceled, ""},
		{"nil", nil, ""},
	} {
		if got := faultCause(c.err); got != c.want {
			t.Errorf("%s: faultCause(%v) = %q, want %q", c.name, c.err, got, c.want)
		}
	}
}

// TestRetryAfter: what Run does after an error of each cause faultCause
// names, at a first start and after streaming, early in the faults and
// once their allowance has passed: start again after a delay that doubles
// per attempt up to reconnectMaxDelay, stop marked ErrPermanent (a cause
// that is no fault, a slot another live parapply holds), or stop with the
// fault (exit status 1).
func TestRetryAfter(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }
	const timeout = time.Minute
	errs := map[string]error{
		FaultConnection: fmt.Errorf("applying insert: %w", io.ErrUnexpectedEOF),
		FaultServer:     pg("57P01"),
		FaultSlotBusy:   pg("55006"),
		FaultLockWait:   errLockStall{pg("55P03")},
		FaultTargetWait: pg("53100"),
		"":              pg("42P01"),
	}
	slotBusy := fmt.Errorf("slot s is in use: %w", source.ErrSlotBusy)
	const here, there = "parapply pid 7 on host a", "parapply pid 7 on host b"
	type want struct {
		outcome     string // "retry", "permanent" or "fault"
		delay, left time.Duration
		suffix      string // of the error's text, when it stops
	}
	tests := []struct {
		name string
		err  error
		f    fault // cause is faultCause(err)
		want want
	}{
		// After streaming: every cause but "" is ridden out, for the whole
		// allowance, the delay doubling from the first attempt.
		{"connection, first attempt", errs[FaultConnection], fault{everStreamed: true, timeout: timeout, try: 1}, want{"retry", reconnectFirstDelay, timeout, ""}},
		{"server, second attempt", errs[FaultServer], fault{everStreamed: true, timeout: timeout, elapsed: time.Second, try: 2}, want{"retry", 2 * reconnectFirstDelay, timeout - time.Second, ""}},
		{"slot busy, fourth attempt", errs[FaultSlotBusy], fault{everStreamed: true, timeout: timeout, elapsed: 20 * time.Second, try: 4}, want{"retry", 8 * reconnectFirstDelay, 40 * time.Second, ""}},
		{"lock wait, sixth attempt", errs[FaultLockWait], fault{everStreamed: true, timeout: timeout, elapsed: 30 * time.Second, try: 6}, want{"retry", 32 * reconnectFirstDelay, 30 * time.Second, ""}},
		{"lock wait, seventh attempt: capped", errs[FaultLockWait], fault{everStreamed: true, timeout: timeout, elapsed: 30 * time.Second, try: 7}, want{"retry", reconnectMaxDelay, 30 * time.Second, ""}},
		{"connection, many attempts: capped", errs[FaultConnection], fault{everStreamed: true, timeout: timeout, elapsed: 59 * time.Second, try: 1000}, want{"retry", reconnectMaxDelay, time.Second, ""}},
		{"connection, allowance passed", errs[FaultConnection], fault{everStreamed: true, timeout: timeout, elapsed: timeout, try: 30}, want{"fault", 0, 0, "(gave up after reconnect_timeout 1m0s of faults)"}},
		{"lock wait, allowance passed", errs[FaultLockWait], fault{everStreamed: true, timeout: timeout, elapsed: 2 * timeout, try: 30}, want{"fault", 0, 0, "(gave up after reconnect_timeout 1m0s of faults)"}},
		{"no fault", errs[""], fault{everStreamed: true, timeout: timeout, try: 1}, want{"permanent", 0, 0, errs[""].Error()}},
		{"no fault, not ridden out", errs[""], fault{everStreamed: true, try: 1}, want{"permanent", 0, 0, errs[""].Error()}},
		{"faults not ridden out", errs[FaultServer], fault{everStreamed: true, try: 1}, want{"fault", 0, 0, errs[FaultServer].Error()}},

		// A first start: a server it cannot reach is a setup mistake;
		// only a slot still held is waited for, at most firstStartSlotWait.
		{"first start, connection", errs[FaultConnection], fault{timeout: timeout, try: 1}, want{"fault", 0, 0, errs[FaultConnection].Error()}},
		{"first start, server", errs[FaultServer], fault{timeout: timeout, try: 1}, want{"fault", 0, 0, errs[FaultServer].Error()}},
		{"first start, lock wait", errs[FaultLockWait], fault{timeout: timeout, try: 1}, want{"fault", 0, 0, errs[FaultLockWait].Error()}},
		{"first start, no fault", errs[""], fault{timeout: timeout, try: 1}, want{"permanent", 0, 0, errs[""].Error()}},
		{"first start, slot busy", slotBusy, fault{timeout: timeout, elapsed: time.Second, try: 3}, want{"retry", 4 * reconnectFirstDelay, firstStartSlotWait - time.Second, ""}},
		{"first start, slot busy past its wait", slotBusy, fault{timeout: timeout, elapsed: firstStartSlotWait, try: 9}, want{"fault", 0, 0, "(still so after 10s)"}},
		{"first start, slot busy, short allowance", errs[FaultSlotBusy], fault{timeout: 3 * time.Second, elapsed: 3 * time.Second, try: 9}, want{"fault", 0, 0, "(gave up after reconnect_timeout 3s of faults)"}},
		{"first start, slot busy, not ridden out", slotBusy, fault{try: 1}, want{"fault", 0, 0, slotBusy.Error()}},

		// A wait for the target: no allowance, at a first start too, the
		// delay doubling up to waitMaxDelay; only reconnect_timeout = 0
		// stops it.
		{"target wait, first attempt", errs[FaultTargetWait], fault{everStreamed: true, timeout: timeout, try: 1}, want{"retry", reconnectFirstDelay, 0, ""}},
		{"target wait, first start", errs[FaultTargetWait], fault{timeout: timeout, try: 3}, want{"retry", 4 * reconnectFirstDelay, 0, ""}},
		{"target wait, past the allowance", errs[FaultTargetWait], fault{everStreamed: true, timeout: timeout, elapsed: 10 * timeout, try: 10}, want{"retry", waitMaxDelay, 0, ""}},
		{"target wait, many attempts", errs[FaultTargetWait], fault{everStreamed: true, timeout: timeout, try: 100000}, want{"retry", waitMaxDelay, 0, ""}},
		{"target wait, not ridden out", errs[FaultTargetWait], fault{everStreamed: true, try: 1}, want{"fault", 0, 0, errs[FaultTargetWait].Error()}},

		// A slot held by another live parapply: refused at once.
		{"slot held by another", slotBusy, fault{holder: here, holderAlive: true, everStreamed: true, timeout: timeout, try: 1}, want{"permanent", 0, 0, "start this one with another --slot (" + slotBusy.Error() + ")"}},
		{"slot held by another, first start", slotBusy, fault{holder: here, holderAlive: true, timeout: timeout, try: 1}, want{"permanent", 0, 0, "start this one with another --slot (" + slotBusy.Error() + ")"}},
		{"slot held by another, not ridden out", slotBusy, fault{holder: here, holderAlive: true, everStreamed: true, try: 1}, want{"fault", 0, 0, slotBusy.Error()}},
		{"holder named, the slot not busy", errs[FaultSlotBusy], fault{holder: here, holderAlive: true, everStreamed: true, timeout: timeout, try: 1}, want{"retry", reconnectFirstDelay, timeout, ""}},

		// A holder on another host, which cannot be seen alive: waited
		// for as any busy slot, and named when the wait ends.
		{"held from another host", slotBusy, fault{holder: there, timeout: timeout, elapsed: time.Second, try: 3}, want{"retry", 4 * reconnectFirstDelay, firstStartSlotWait - time.Second, ""}},
		{"held from another host past the wait", slotBusy, fault{holder: there, timeout: timeout, elapsed: firstStartSlotWait, try: 9}, want{"fault", 0, 0, "if it is gone, end that session with pg_terminate_backend on the target (" + slotBusy.Error() + ") (still so after 10s)"}},
		{"held from another host past the allowance", slotBusy, fault{holder: there, everStreamed: true, timeout: timeout, elapsed: timeout, try: 30}, want{"fault", 0, 0, "on the target (" + slotBusy.Error() + ") (gave up after reconnect_timeout 1m0s of faults)"}},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.f.cause = faultCause(tt.err)
			seen[tt.f.cause] = true
			r := retryAfter(tt.err, "s", tt.f)
			got := want{outcome: "retry", delay: r.delay, left: r.left}
			switch {
			case r.err != nil && errors.Is(r.err, ErrPermanent):
				got = want{outcome: "permanent"}
			case r.err != nil:
				got = want{outcome: "fault"}
			}
			if r.err != nil {
				if !errors.Is(r.err, tt.err) {
					t.Errorf("the error %v does not wrap the run's %v", r.err, tt.err)
				}
				if got.suffix = tt.want.suffix; !strings.HasSuffix(r.err.Error(), tt.want.suffix) {
					got.suffix = r.err.Error()
				}
			}
			if got != tt.want {
				t.Errorf("retryAfter(%v, %+v) = %+v, want %+v", tt.err, tt.f, got, tt.want)
			}
		})
	}
	for _, c := range append(FaultCauses[:], "") {
		if !seen[c] {
			t.Errorf("no case of cause %q", c)
		}
	}
}

// TestTargetWait: which errors are a wait for the target, by SQLSTATE and
// by the shape of the error (wrapped, on a lost connection, at connect,
// from the publisher), and that every reason has advice of its own.
func TestTargetWait(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Code: code, Message: "m"} }
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"disk full", pg("53100"), WaitDiskFull},
		{"out of memory", pg("53200"), WaitOutOfMemory},
		{"too many connections", pg("53300"), WaitConnections},
		{"configuration limit", pg("53400"), WaitConfigurationLimit},
		{"insufficient resources", pg("53000"), WaitInsufficientResources},
		{"another code of class 53", pg("53999"), WaitInsufficientResources},
		{"read-only transaction", pg("25006"), WaitReadOnly},
		{"cannot connect now", pg("57P03"), WaitRecovery},
		{"wrapped by a statement", fmt.Errorf("applying insert into public.items: %w", pg("53100")), WaitDiskFull},
		{"a transaction's error", fmt.Errorf("source transaction 7: %w", fmt.Errorf("x: %w", pg("25006"))), WaitReadOnly},
		{"on a lost connection", lostConnection(pg("53100")), WaitDiskFull},
		{"at connect", fmt.Errorf("connecting to the target (host h port 5432 database d user u): %w", pgerr.Short(pg("53300"))), WaitConnections},
		{"a connect error with no server error", &pgconn.ConnectError{}, ""},
		{"from the publisher", onPublisher(pg("53100")), ""},
		{"from the publisher, wrapped again", fmt.Errorf("stream: %w", onPublisher(pg("57P03"))), ""},
		{"admin shutdown", pg("57P01"), ""},
		{"other class 25", pg("25001"), ""},
		{"lock not available", pg("55P03"), ""},
		{"disk full in text only", errors.New("could not extend file: No space left on device"), ""},
		{"short code", pg("53"), ""},
		{"nil", nil, ""},
	} {
		if got := targetWait(c.err); got != c.want {
			t.Errorf("%s: targetWait(%v) = %q, want %q", c.name, c.err, got, c.want)
		}
	}
	seen := map[waitAdvice]string{}
	for _, r := range WaitReasons {
		a := adviceFor(r, "db")
		if a.what == "" || a.until == "" || a.fix == "" {
			t.Errorf("reason %s: incomplete advice %+v", r, a)
		}
		if other, ok := seen[a]; ok {
			t.Errorf("reasons %s and %s have the same advice", other, r)
		}
		seen[a] = r
	}
	if a := adviceFor("unknown", ""); a.fix == "" {
		t.Errorf("an unknown reason gets no fix: %+v", a)
	}
}
