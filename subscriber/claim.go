package subscriber

import (
	"context"
	"errors"

	"github.com/parapply/parapply/target"
)

// claimed is what the claim phase returns: the connection, with the slot's
// lock on the target held by the reader's session, so that no session of
// an earlier run of the slot writes any more.
type claimed struct{ *connected }

// claim takes the slot on the target (target.Claim), waiting up to
// claimTimeout for the target sessions of an earlier run of the slot to
// end; those of this process's previous run are ended at once.
func (s *Subscriber) claim(ctx context.Context, c *connected) (claimed, error) {
	err := target.Claim(ctx, c.app.Conn(), s.cfg.Source.Slot, s.earlierSessions(), claimTimeout, func(pids []int32, first bool) error {
		// Another live parapply on this host holding the slot (it reached
		// the publisher's slot free, between its creation and the
		// holder's START_REPLICATION, say) is named at once, as when the
		// publisher finds the slot busy, not waited for.
		if holder, alive := s.slotHolder(ctx); alive {
			return errSlotHeld(s.cfg.Source.Slot, holder, errors.New("its target session holds the slot's lock"))
		}
		if !first {
			s.log.Warn("waiting for target sessions of an earlier run of this slot to end (they finish the work already sent to them; pg_terminate_backend ends them at once)", "slot", s.cfg.Source.Slot, "pids", pids)
		}
		return nil
	})
	if errors.Is(err, target.ErrClaimWait) {
		if holder, _ := s.slotHolder(ctx); holder != "" {
			err = errHolderRecorded(s.cfg.Source.Slot, holder, err)
		}
	}
	if err != nil {
		return claimed{}, err
	}
	return claimed{c}, nil
}
