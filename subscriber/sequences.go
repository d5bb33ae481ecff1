package subscriber

import (
	"context"
	"time"

	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/source"
)

// syncSequences brings the publisher's sequences of the published tables
// (or all, per the sequences setting; the publications' own when they
// publish sequences, PostgreSQL 19's FOR ALL SEQUENCES) to the target, on connections of
// its own. A failure is logged and shown in Status, never fatal: the rows
// keep flowing, and the next sync tries again.
func (s *Subscriber) syncSequences(ctx context.Context, published []source.PublishedTable) {
	mode := s.cfg.Sequences
	if mode == "" || mode == sequences.None {
		return
	}
	s.seq.mu.Lock()
	defer s.seq.mu.Unlock()
	tables := make([]sequences.Table, len(published))
	for i, t := range published {
		tables[i] = sequences.Table{Schema: t.Schema, Name: t.Name}
	}
	err := func() error {
		ctx, cancel := context.WithTimeout(ctx, sequenceSyncTimeout)
		defer cancel()
		src, err := sequences.Connect(ctx, s.cfg.Source.DSN, s.targetName()+" sequences")
		if err != nil {
			return err
		}
		defer src.Close(context.Background())
		dst, err := sequences.Connect(ctx, s.cfg.Target.DSN, s.targetName()+" sequences")
		if err != nil {
			return err
		}
		defer dst.Close(context.Background())
		res, _, err := sequences.Sync(ctx, src, dst, mode, s.cfg.Source.Publications, tables)
		if err != nil {
			return err
		}
		sum := sequences.Summarize(res)
		s.seq.summary.Store(&sum)
		s.kept.seqResults.Store(&res)
		for _, r := range res {
			name := r.QualifiedName()
			switch {
			case r.Missing && !s.seq.warned[name]:
				s.seq.warned[name] = true
				s.log.Warn("a publisher sequence does not exist on the target; create it there to have it synced", "sequence", name)
			case !r.Readable && !s.seq.warned[name]:
				s.seq.warned[name] = true
				s.log.Warn("the source role may not read a sequence: it is not synced until it may", "sequence", name, "role", r.Role, "fix", r.SourceGrant())
			case r.Refused() && !s.seq.warned[name]:
				s.seq.warned[name] = true
				s.log.Warn("the target role may not read a sequence, so it is left untouched rather than set blind; grant it to have it synced", "sequence", name, "grant", r.Grant)
			case r.Ahead && !s.seq.warned[name]:
				s.seq.warned[name] = true
				s.log.Info("a target sequence is ahead of the publisher's; left where it is", "sequence", name, "publisher", r.Last, "target", r.Before)
			case r.Moved:
				s.log.Debug("sequence synced", "sequence", name, "value", r.Last, "target_was", r.Before, "target_was_used", r.Called)
			}
		}
		return nil
	}()
	if err != nil {
		msg := err.Error()
		s.seq.err.Store(&msg)
		if ctx.Err() == nil {
			s.log.Warn("syncing sequences failed; trying again at the next interval", "error", err)
		}
		return
	}
	s.seq.err.Store(nil)
}

// sequenceSyncTimeout bounds one sequence sync.
const sequenceSyncTimeout = 30 * time.Second

// keepSequences syncs sequences every SequenceSyncInterval until ctx ends.
func (s *Subscriber) keepSequences(ctx context.Context, published []source.PublishedTable) {
	if s.cfg.SequenceSyncInterval <= 0 || s.cfg.Sequences == "" || s.cfg.Sequences == sequences.None {
		return
	}
	every(ctx, s.cfg.SequenceSyncInterval, func() { s.syncSequences(ctx, published) })
}

// every calls f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
