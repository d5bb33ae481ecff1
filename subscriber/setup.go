package subscriber

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/citus"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/targetdb"
)

// setUp is what the setup phase returns: the claimed connection, what the
// target recorded of the slot, and whether the run keeps tombstones (and,
// for their pruning, whether the target tracks commit timestamps).
type setUp struct {
	claimed
	opened          progress.Opened
	tombs, commitTS bool
}

// setup readies the target and the slot for streaming, one package at a
// time, in the order that keeps a refused start cheap (every refusal comes
// before the slot's creation, the one step that costs the publisher
// something): the target (prepareTarget: origins, parapply's schema, the
// table claims, what detection reads), the published tables' definitions
// with schema = copy (copySchema), the tombstone triggers, the slot's
// progress record (progress.Open), an existing slot made a failover slot
// if asked (makeFailover), the tables (tablesync.Sync: its checks, the
// slot's creation, the copy; then what a schema copy left for after it),
// and the sequences. A start refused after it
// recorded the slot undoes that (see abandonSlot).
func (s *Subscriber) setup(ctx context.Context, c claimed) (setUp, error) {
	su := setUp{claimed: c}
	conn := c.app.Conn()
	td, err := s.prepareTarget(ctx, c)
	if err != nil {
		return su, err
	}
	if made, err := s.copySchema(ctx, conn, c.src, c.published); err != nil || made {
		if err == nil {
			err = s.checkTarget(ctx, c.connected) // the tables it made
		}
		if err != nil {
			return su, err
		}
	}
	if su.tombs, err = s.setupTombstones(ctx, conn, c.published); err != nil {
		return su, err
	}
	s.runs.det.Store(nil)
	if s.cfg.DetectConflicts {
		det, err := s.detection(td, c.src.SourceID(), c.published)
		if err != nil {
			return su, err
		}
		det.Tombstones, su.commitTS = su.tombs, det.CommitTimestamps
		s.runs.det.Store(det)
		c.app.SetDetection(det)
	}
	su.opened, err = progress.Open(ctx, conn, s.cfg.Source.Slot, c.src.SourceID(), c.src.Missing)
	s.runs.createdRecord = s.runs.createdRecord || su.opened.Created
	// Noted before the error is looked at: what Open read before it
	// failed (a zero position changes nothing) shows in Status.
	pos := su.opened.Position
	s.kept.note(pos.EndLSN, pos.EndLSN, pos.CommitTime)
	if err != nil {
		return su, err
	}
	if end := c.src.WALAtConnect; end != 0 && pos.EndLSN > end {
		return su, errDiverged(s.cfg.Source.Slot, pos.EndLSN, end)
	}
	s.logSkips(su.opened)
	if err := s.makeFailover(ctx, c.src); err != nil {
		return su, err
	}
	if err := s.sync(ctx, c.src, c.app, c.published); err != nil {
		return su, err
	}
	s.syncSequences(ctx, c.published)
	return su, nil
}

// makeFailover makes the existing slot a failover slot if the run asks for
// one (source.MakeFailover): after the target's checks, so that a start
// they refuse leaves the slot as it was.
func (s *Subscriber) makeFailover(ctx context.Context, src *source.Source) error {
	was := src.FailoverSlot
	if err := src.MakeFailover(ctx); err != nil {
		return onPublisher(err)
	}
	if src.FailoverSlot && !was {
		s.log.Info("made the slot a failover slot", "slot", s.cfg.Source.Slot)
	}
	return nil
}

// prepareTarget is setup's step on the target: its replication origins
// fitted to the run and the reader's set up (before the slot is created: a
// target that refuses origins is a setup error), parapply's schema brought
// up to date (once for the run: everything after reads and writes it), the
// slot's tables claimed, and what conflict detection reads of the target.
func (s *Subscriber) prepareTarget(ctx context.Context, c claimed) (targetdb.Detection, error) {
	conn := c.app.Conn()
	migrated, err := s.prepareOrigins(ctx, conn)
	if err != nil {
		return targetdb.Detection{}, err
	}
	if err := c.app.SetupOrigin(ctx, targetdb.OriginName(s.cfg.Source.Slot, "")); err != nil {
		return targetdb.Detection{}, err
	}
	// After the origins: a role refused those is told so first, the fix
	// it needs whatever else (their retirement migrated already, when it
	// had origins to retire).
	if !migrated {
		if err := targetdb.Migrate(ctx, conn); err != nil {
			return targetdb.Detection{}, err
		}
	}
	if err := s.claimTables(ctx, conn, claimedTables(c.published)); err != nil {
		return targetdb.Detection{}, err
	}
	if err := s.refuseOnCitus(ctx, conn, c.published); err != nil {
		return targetdb.Detection{}, err
	}
	if !s.cfg.DetectConflicts {
		return targetdb.Detection{}, nil
	}
	return targetdb.ReadDetection(ctx, conn)
}

// errDiverged is the stop of a start whose target records changes past
// everything the publisher has: the target applied changes this server
// never had, as after a failover to a standby that had not received them
// (synchronized_standby_slots on the primary prevents it), or a publisher
// restored from an older backup. Streaming on would skip the new
// publisher's changes up to the target's position.
func errDiverged(slot string, recorded, walEnd parapply.LSN) error {
	return permanent{fmt.Errorf("the target records changes of slot %s up to %s, past the publisher's WAL end %s: the target applied changes this publisher never had (a failover to a standby that had not received them, or a publisher restored from an older backup), and streaming on would skip the publisher's own changes up to %s; compare both sides (parapply verify) and start over with a copy (parapply drop --slot %s, then run with existing_data = truncate)",
		slot, recorded, walEnd, recorded, slot)}
}

// refuseOnCitus stops a start on a Citus coordinator that distributes
// published tables when it asks for what Citus does not run
// (citus.Refusals: conflict detection set by the user, two_phase); with
// detect_conflicts at its default, detection is off for those tables (see
// detection), which it says once.
func (s *Subscriber) refuseOnCitus(ctx context.Context, conn *pgx.Conn, published []source.PublishedTable) error {
	refusals := citus.Refusals(s.cfg.DetectConflicts && s.cfg.DetectConflictsAsked, s.cfg.Source.TwoPhase)
	defaulted := s.cfg.DetectConflicts && !s.cfg.DetectConflictsAsked && !s.runs.toldCitus.Load()
	if len(refusals) == 0 && !defaulted {
		return nil
	}
	var schemas, names []string
	for _, pt := range published {
		schemas, names = append(schemas, pt.Schema), append(names, pt.Name)
	}
	managed, err := citus.Managed(ctx, conn, schemas, names)
	if err != nil || len(managed) == 0 {
		return err
	}
	if len(refusals) == 0 {
		s.runs.toldCitus.Store(true)
		s.log.Info(citus.DetectionOff(managed))
		return nil
	}
	r := refusals[0]
	return Permanent(fmt.Errorf("the target is a Citus coordinator that distributes %s, and %s: %s", strings.Join(managed, ", "), r.What, r.Fix))
}
