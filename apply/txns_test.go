package apply

import (
	"errors"
	"strings"
	"testing"

	"github.com/parapply/parapply"
)

// TestTxnsNamesGroups: an error of a round trip that applied one source
// transaction names it; one of a group names the group and is a GroupError
// carrying its first and last transactions, for the subscriber to apply
// them again one at a time.
func TestTxnsNamesGroups(t *testing.T) {
	a := Txn{XID: 10, CommitLSN: parapply.LSN(0x100)}
	b := Txn{XID: 12, CommitLSN: parapply.LSN(0x300)}
	base := errors.New("duplicate key")
	tests := []struct {
		d     txns
		text  string
		group bool
	}{
		{txns{first: b, last: b, n: 1}, "source transaction 12 (commit 0/300)", false},
		{txns{first: a, last: b, n: 3}, "source transactions 10 to 12 (commits 0/100 to 0/300, applied as one group of 3)", true},
	}
	for _, tc := range tests {
		if got := tc.d.String(); got != tc.text {
			t.Errorf("String() = %q, want %q", got, tc.text)
		}
		err := tc.d.wrap(base)
		var ge *GroupError
		if errors.As(err, &ge) != tc.group {
			t.Errorf("%s: GroupError %v, want %v", tc.text, !tc.group, tc.group)
		}
		if !errors.Is(err, base) || !strings.Contains(err.Error(), "duplicate key") {
			t.Errorf("%s: wrapped error %v lost the cause", tc.text, err)
		}
		if tc.group && (ge.First != a || ge.Last != b || ge.Txns != 3) {
			t.Errorf("GroupError %+v, want first %v last %v of 3", ge, a, b)
		}
	}
	// The group just closed (its end is being sent) is still described
	// whole.
	ap := &Applier{}
	ap.Begin(a)
	ap.End(parapply.LSN(0x110))
	ap.Begin(b)
	ap.End(parapply.LSN(0x310))
	ap.grp.open = false
	if d := ap.describe(); d.n != 2 || d.first != a || d.last != b {
		t.Errorf("describe() of a closed group of two = %+v", d)
	}
}

// TestConfigSkip: the skip command errors print is the run's own (with its
// connection flags) or, without one, names the slot, so that it runs as
// printed.
func TestConfigSkip(t *testing.T) {
	lsn := parapply.LSN(0x1369D610)
	for _, tt := range []struct {
		cfg     Config
		ddlOnly bool
		want    string
	}{
		{Config{Slot: "app"}, true, "parapply skip --slot app --lsn 0/1369D610 --ddl"},
		{Config{Slot: "app"}, false, "parapply skip --slot app --lsn 0/1369D610"},
		{Config{Slot: "app", SkipCommand: "parapply skip --target 'host=sub' --slot app"}, true, "parapply skip --target 'host=sub' --slot app --lsn 0/1369D610 --ddl"},
	} {
		if got := tt.cfg.Skip(lsn, tt.ddlOnly); got != tt.want {
			t.Errorf("Skip(%+v, %v) = %q, want %q", tt.cfg, tt.ddlOnly, got, tt.want)
		}
	}
}
