package subscriber

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/ddl"
	"github.com/parapply/parapply/pgoutput"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/targetdb"
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

// TestDDLStopNamesTxn: a DDL message parapply cannot run (one sent from
// inside a procedure) stops naming its source transaction by the xid of
// its BEGIN, not the 0 pgoutput sends in a message outside a streamed
// transaction, and the skip command with the slot.
func TestDDLStopNamesTxn(t *testing.T) {
	l := &loop{s: &Subscriber{cfg: Config{Target: apply.Config{Slot: "app"}}}}
	m := &pgoutput.LogicalMessage{Transactional: true, Prefix: ddl.Prefix, Content: []byte(`{"sql":"CALL migrate()","search_path":["public"],"role":"u","tag":"CALL"}`)}
	_, _, err := l.ddlStatements(m, apply.Txn{XID: 71242, CommitLSN: 0x1369D610})
	if err == nil {
		t.Fatal("a CALL was taken as DDL to run")
	}
	for _, want := range []string{"source transaction 71242 (commit 0/1369D610): ", "; run the DDL on the target by hand, then have parapply pass over it with parapply skip --slot app --lsn 0/1369D610 --ddl"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the stop lacks %q: %v", want, err)
		}
	}
}

// TestCompleteSkipHint: the skip command in the hint of a conflict stop
// (written on the target, knowing only the slot) becomes the run's own,
// with its connection flags; other errors are left as they are.
func TestCompleteSkipHint(t *testing.T) {
	s := &Subscriber{cfg: Config{Source: source.Config{Slot: "app"}, Target: apply.Config{Slot: "app", SkipCommand: "parapply skip --target 'host=sub' --slot app"}}}
	hint := "choose another policy for insert_exists in conflict_resolution, change the local row, or skip the transaction: parapply skip --slot app --lsn 0/16B3748"
	for _, tt := range []struct {
		code, want string
	}{
		{targetdb.SQLStateConflictError, "choose another policy for insert_exists in conflict_resolution, change the local row, or skip the transaction: parapply skip --target 'host=sub' --slot app --lsn 0/16B3748"},
		{"23505", hint},
	} {
		pe := &pgconn.PgError{Code: tt.code, Hint: hint}
		s.completeSkipHint(&apply.TxnError{Err: fmt.Errorf("applying: %w", pe)})
		if pe.Hint != tt.want {
			t.Errorf("%s: hint %q, want %q", tt.code, pe.Hint, tt.want)
		}
	}
}
