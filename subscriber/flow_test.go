package subscriber

import (
	"testing"

	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/subscriber/flow"
)

// TestSkipDDLReason: the loop's core knows a skip --ddl request by the
// reason progress stores for it.
func TestSkipDDLReason(t *testing.T) {
	if progress.SkipDDL != flow.SkipDDLReason {
		t.Errorf("flow.SkipDDLReason = %q, progress.SkipDDL = %q", flow.SkipDDLReason, progress.SkipDDL)
	}
}
