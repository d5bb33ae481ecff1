package subscriber

import (
	"context"

	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/target"
)

// setUp is what the setup phase returns: the claimed connection, what the
// target recorded of the slot, and whether the run keeps tombstones (and,
// for their pruning, whether the target tracks commit timestamps).
type setUp struct {
	claimed
	opened          progress.Opened
	tombs, commitTS bool
}

// setup readies the target and the slot for streaming, in the order that
// keeps a refused start cheap: the replication origins (before the slot
// is created: a target that refuses origins is a setup error), the table
// claims, tombstones and conflict detection, then the slot (see
// createSlot; a start refused after it drops it again, see Run), the
// slot's progress record, the copy of tables not synced yet, and the
// sequences.
func (s *Subscriber) setup(ctx context.Context, c claimed) (setUp, error) {
	su := setUp{claimed: c}
	conn := c.app.Conn()
	if err := s.prepareOrigins(ctx, conn); err != nil {
		return su, err
	}
	if err := c.app.SetupOrigin(ctx, target.OriginName(s.cfg.Source.Slot, "")); err != nil {
		return su, err
	}
	// parapply's schema brought up to date, once for the run: everything
	// after reads and writes it (the origins' retirement above already
	// did, when it had origins to retire). After the origins: a role
	// refused those is told so first, the fix it needs whatever else.
	if err := target.Migrate(ctx, conn); err != nil {
		return su, err
	}
	if err := s.claimTables(ctx, conn, claimedTables(c.published)); err != nil {
		return su, err
	}
	s.runs.det.Store(nil)
	var err error
	if su.tombs, err = s.setupTombstones(ctx, conn, c.published); err != nil {
		return su, err
	}
	if s.cfg.DetectConflicts {
		det, err := s.detection(ctx, conn, c.src.SourceID(), c.published)
		if err != nil {
			return su, err
		}
		det.Tombstones, su.commitTS = su.tombs, det.CommitTimestamps
		s.runs.det.Store(det)
		c.app.SetDetection(det)
	}
	if err := s.createSlot(ctx, c.src, conn, c.published); err != nil {
		return su, err
	}
	su.opened, err = progress.Open(ctx, conn, s.cfg.Source.Slot, c.src.SourceID())
	// Noted before the error is looked at: what Open read before it
	// failed (a zero position changes nothing) shows in Status.
	pos := su.opened.Position
	s.kept.note(pos.EndLSN, pos.EndLSN, pos.CommitTime)
	if err != nil {
		return su, err
	}
	s.logSkips(su.opened)
	if err := s.sync(ctx, c.src, c.app, c.published); err != nil {
		return su, err
	}
	s.syncSequences(ctx, c.published)
	return su, nil
}
