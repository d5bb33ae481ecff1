package apply

import (
	"strings"
	"testing"
	"time"
)

// TestRunTxns: the source transaction of each row of a run, as resolving
// statements are given it (the last row of each transaction), through
// noteTxn, retitle (a streamed transaction learns its commit) and row (a
// replay row by row).
func TestRunTxns(t *testing.T) {
	at := time.Date(2026, 11, 25, 21, 0, 0, 123456000, time.UTC)
	t1 := Txn{XID: 10, CommitLSN: 0x100, CommitTime: at}
	t2 := Txn{XID: 11} // streamed: commit not known yet
	tests := []struct {
		name  string
		rows  []Txn // the transaction of each row, in order
		title *Txn  // retitle with this, if set
		want  string
		row   int    // row(row) of the run...
		want1 string // ...holds this
	}{
		{name: "one transaction", rows: []Txn{t1, t1, t1}, want: "3/10/0/100/2026-11-25 21:00:00.123456+00", row: 2, want1: "1/10/0/100/2026-11-25 21:00:00.123456+00"},
		{name: "two transactions", rows: []Txn{t1, t2, t2}, want: "1/10/0/100/2026-11-25 21:00:00.123456+00;3/11/-/-", row: 1, want1: "1/11/-/-"},
		{name: "retitled", rows: []Txn{t1, t2}, title: &Txn{XID: 11, CommitLSN: 0x200, CommitTime: at},
			want: "1/10/0/100/2026-11-25 21:00:00.123456+00;2/11/0/200/2026-11-25 21:00:00.123456+00", row: 0, want1: "1/10/0/100/2026-11-25 21:00:00.123456+00"},
	}
	for _, tc := range tests {
		r := &run{params: make([][][]byte, 1)}
		for i, txn := range tc.rows {
			r.params[0] = append(r.params[0], []byte{byte('a' + i)})
			r.rows++
			r.noteTxn(txn)
		}
		if tc.title != nil {
			r.retitle(*tc.title)
		}
		if got := txnText(r); got != tc.want {
			t.Errorf("%s: txnColumns = %s, want %s", tc.name, got, tc.want)
		}
		one := r.row(tc.row)
		if got := txnText(one); got != tc.want1 || one.rows != 1 || string(one.params[0][0]) != string(rune('a'+tc.row)) {
			t.Errorf("%s: row(%d) = %s (%d rows, %q), want %s", tc.name, tc.row, got, one.rows, one.params[0][0], tc.want1)
		}
	}
}

func txnText(r *run) string {
	u, x, l, at, _ := r.txnColumns()
	var parts []string
	for i := range u {
		f := []string{string(u[i]), string(x[i]), orDash(l[i]), orDash(at[i])}
		parts = append(parts, strings.Join(f, "/"))
	}
	return strings.Join(parts, ";")
}

func orDash(b []byte) string {
	if b == nil {
		return "-"
	}
	return string(b)
}
