package subscriber

import (
	"testing"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/schedule"
)

// TestReportInSourceOrder: commits made ahead of order reach the tracker
// only once every earlier unit's has, so the applied position never passes
// a unit that has not committed, and the progress mark follows.
func TestReportInSourceOrder(t *testing.T) {
	tr := progress.NewTracker(0)
	p := &pool{tracker: tr, reports: map[schedule.ID]pendingReport{}, nextReport: 1}
	unitEnding := func(end parapply.LSN) *unit {
		return &unit{txns: []unitTxn{{txn: apply.Txn{CommitLSN: end - 1}, end: end}}}
	}
	steps := []struct {
		id      schedule.ID
		end     parapply.LSN
		applied parapply.LSN
	}{
		{3, 30, 0},  // ahead of 1 and 2
		{2, 20, 0},  // still behind 1
		{1, 10, 30}, // 1, 2 and 3 are in
		{5, 50, 30}, // 4 is missing
		{4, 40, 50},
		{6, 60, 60},
	}
	for _, s := range steps {
		p.report(s.id, unitEnding(s.end), apply.Committed{End: s.end, Local: s.end * 100})
		if applied, _, _ := tr.Positions(); applied != s.applied {
			t.Fatalf("after unit %d: applied %d, want %d", s.id, applied, s.applied)
		}
		if s.applied != 0 && p.mark.end != s.applied {
			t.Fatalf("after unit %d: mark at %d, want %d", s.id, p.mark.end, s.applied)
		}
	}
	if len(p.reports) != 0 {
		t.Errorf("%d reports left behind", len(p.reports))
	}
}
