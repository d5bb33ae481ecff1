package flow

import (
	"testing"

	"github.com/parapply/parapply"
)

// TestAppliedBeforeRestart: a transaction is skipped when the progress row
// covers it or it falls within a group committed ahead of order; queries
// come in commit order.
func TestAppliedBeforeRestart(t *testing.T) {
	c := New(Start{SkipBelow: 100, Ahead: []Range{{First: 120, Last: 140}, {First: 150, Last: 150}, {First: 300, Last: 320}}})
	tests := []struct {
		lsn  parapply.LSN
		want bool
	}{
		{90, true}, {100, true}, {110, false}, {120, true}, {130, true}, {140, true},
		{145, false}, {150, true}, {151, false}, {299, false}, {310, true}, {320, true}, {321, false}, {500, false},
	}
	for _, tt := range tests {
		if got := c.Applied(tt.lsn); got != tt.want {
			t.Errorf("Applied(%d) = %v, want %v", tt.lsn, got, tt.want)
		}
	}
	if len(c.Ahead()) != 0 {
		t.Errorf("%d ranges kept after the stream passed them all", len(c.Ahead()))
	}
}
