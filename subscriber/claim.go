package subscriber

import (
	"context"

	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/target"
)

// claimed is what the claim phase returns: the connection, with the slot's
// lock on the target held by the reader's session, so that no session of
// an earlier run of the slot writes any more.
type claimed struct{ *connected }

// claim brings parapply's schema on the target up to date (target.Migrate:
// the run's only call; what follows reads and writes that schema), then
// takes the slot on the target (progress.Claim), waiting up to
// claimTimeout for the target sessions of an earlier run of the slot to
// end; those of this process's previous run are ended at once.
func (s *Subscriber) claim(ctx context.Context, c *connected) (claimed, error) {
	if err := target.Migrate(ctx, c.app.Conn()); err != nil {
		return claimed{}, err
	}
	err := progress.Claim(ctx, c.app.Conn(), s.cfg.Source.Slot, s.earlierSessions(), claimTimeout, func(pids []int32) {
		s.log.Warn("waiting for target sessions of an earlier run of this slot to end (they finish the work already sent to them; pg_terminate_backend ends them at once)", "slot", s.cfg.Source.Slot, "pids", pids)
	})
	if err != nil {
		return claimed{}, err
	}
	return claimed{c}, nil
}
