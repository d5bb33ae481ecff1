package subscriber

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

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
