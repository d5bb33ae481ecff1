package subscriber

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/parapply/parapply/apply"
)

// TestTransient: on_error skips a transaction only for an error of the
// transaction itself, never for one a retry may not meet again.
func TestTransient(t *testing.T) {
	wrap := func(code string) error {
		return &apply.TxnError{Err: fmt.Errorf("applying: %w", &pgconn.PgError{Code: code})}
	}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{wrap("22P02"), false}, // invalid input: the transaction's own
		{wrap("23505"), false}, // unique violation
		{wrap("PC002"), false}, // conflict whose policy is error
		{wrap("40P01"), true},  // deadlock
		{wrap("40001"), true},  // serialization failure
		{wrap("55P03"), true},  // lock_timeout
		{wrap("53100"), true},  // disk full
		{wrap("57014"), true},  // query canceled
		{wrap("XX000"), true},  // internal error
		{errors.New("connection reset"), true},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
