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
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/target"
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
		{"starting up", fmt.Errorf("connecting: %w", pg("57P03")), FaultServer},
		{"slot active", pg("55006"), FaultSlotBusy},
		{"slot busy at start", fmt.Errorf("slot s is in use: %w", source.ErrSlotBusy), FaultSlotBusy},
		{"origin still held", fmt.Errorf("worker 2: %w", target.OriginError("parapply_s_w2", pg("55006"))), FaultSlotBusy},
		{"no free origin state", target.OriginError("parapply_s_w9", pg("53400")), ""},
		{"origins not granted", target.OriginError("parapply_s", pg("42501")), ""},
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
