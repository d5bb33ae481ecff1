package subscriber

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/targetdb"
)

// claimed is what the claim phase returns: the connection, with the slot's
// lock on the target held by the reader's session, so that no session of
// an earlier run of the slot writes any more.
type claimed struct{ *connected }

// claim takes the slot on the target (targetdb.Claim), waiting up to
// claimTimeout for the target sessions of an earlier run of the slot to
// end; those of this process's previous run are ended at once.
func (s *Subscriber) claim(ctx context.Context, c *connected) (claimed, error) {
	err := targetdb.Claim(ctx, c.app.Conn(), s.cfg.Source.Slot, s.earlierSessions(), claimTimeout, func(pids []int32, first bool) error {
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
	if errors.Is(err, targetdb.ErrClaimWait) {
		if holder, _ := s.slotHolder(ctx); holder != "" {
			err = errHolderRecorded(s.cfg.Source.Slot, holder, err)
		}
	}
	if err != nil {
		return claimed{}, err
	}
	return claimed{c}, nil
}

// claimTables records that this run's slot applies tables (schema.name),
// and that this process holds the slot (targetdb.ClaimTables); with
// shared_tables on, it warns of tables other slots apply too.
func (s *Subscriber) claimTables(ctx context.Context, conn *pgx.Conn, tables []string) error {
	host, _ := os.Hostname()
	holder := targetdb.Holder{Host: host, PID: os.Getpid(), AppName: s.targetName()}
	others, err := targetdb.ClaimTables(ctx, conn, s.cfg.Source.Slot, tables, s.cfg.SharedTables, holder)
	if err != nil {
		return err
	}
	if len(others) > 0 {
		s.log.Warn("shared_tables = on: other slots apply to some of this slot's target tables too", "tables", targetdb.ClaimList(others))
	}
	return nil
}

// slotHolder names another parapply that holds the slot on this target,
// for a start that found the slot busy: the process the target's claim
// records, if the target session that claimed the slot still holds the
// slot's lock there and the process is not this one. alive reports that
// the process runs on this host and was seen alive: only then is the
// start refused at once. The target session of one just killed holds the
// lock until its backend notices, as its walsender holds the slot (Run
// waits for those); a holder on another host cannot be seen from here, so
// it is named when Run gives up waiting. "" when there is none, it is
// dead, or it cannot be told.
func (s *Subscriber) slotHolder(ctx context.Context) (holder string, alive bool) {
	ctx, cancel := context.WithTimeout(ctx, holderTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.cfg.Target.DSN)
	if err != nil {
		return "", false
	}
	defer conn.Close(context.Background())
	h, found, err := targetdb.SlotHolder(ctx, conn, s.cfg.Source.Slot)
	if err != nil || !found {
		return "", false
	}
	me, _ := os.Hostname()
	if h.Host == me && (h.PID == os.Getpid() || !processAlive(h.PID)) {
		return "", false
	}
	return fmt.Sprintf("parapply pid %d on host %s (application_name %s), applying to this target since %s", h.PID, h.Host, h.AppName, h.Since.UTC().Format("2006-01-02 15:04:05 UTC")), h.Host == me
}

// holderTimeout bounds the look at the target for another process
// holding the slot.
const holderTimeout = 10 * time.Second

// errSlotHeld is the error of a start that found its slot held by another
// parapply (see slotHolder): a restart does not change that.
func errSlotHeld(slot, holder string, err error) error {
	return permanent{fmt.Errorf("slot %s is held by another %s: stop that one first, or start this one with another --slot (%w)", slot, holder, err)}
}

// errHolderRecorded is the error of a start that waited for its slot in
// vain while the target recorded another parapply, one not seen alive
// from here, as its holder.
func errHolderRecorded(slot, holder string, err error) error {
	return fmt.Errorf("the target records %s as slot %s's holder, and its target session still holds the slot's lock: stop that one first, or, if it is gone, end that session with pg_terminate_backend on the target (%w)", holder, slot, err)
}

// claimedTables lists the target tables a run applies, as schema.name.
func claimedTables(published []source.PublishedTable) []string {
	tables := make([]string, 0, len(published))
	for _, pt := range published {
		tables = append(tables, pt.Schema+"."+pt.Name)
	}
	slices.Sort(tables)
	return slices.Compact(tables)
}
