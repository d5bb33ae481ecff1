package subscriber

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/subscriber/flow"
)

// stream applies the slot's stream from where the target's record says,
// until ctx ends (nil) or the first error; everything it starts has ended
// when it returns.
func (s *Subscriber) stream(ctx context.Context, su setUp) error {
	app, src := su.app, su.src
	tracker := s.track(su)
	s.tuner.activeWorkers.Store(0)
	oneByOne := parapply.LSN(s.runs.oneByOne.Load())
	workers, err := s.openWorkers(ctx, app, tracker, oneByOne)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if workers != nil {
		defer workers.stop()
	}
	spillDir, err := s.spillDir(src.SourceID(), app)
	if err != nil {
		return err
	}
	defer os.RemoveAll(spillDir)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	frames := make(chan []source.Frame, 4)
	streamErr := make(chan error, 1)
	go func() { streamErr <- onPublisher(src.Stream(sctx, su.opened.Position.EndLSN, frames, tracker)) }()
	go s.watchSyncStandby(sctx)
	go s.keepSequences(sctx, su.published)
	if su.tombs {
		go s.keepTombstones(sctx, tracker, su.commitTS)
	}
	s.runs.caughtUp.Store(false) // a run starts behind (see backlog.go)
	s.runs.state.Store(StateStreaming)
	s.runs.streamedSince.Store(time.Now().UnixNano())
	s.runs.everStreamed.Store(true)
	s.readyOnce.Do(func() { close(s.ready) })

	l := s.newLoop(su, tracker, oneByOne, workers, spillDir)
	defer l.closeStreams()
	if s.autoWorkers() || s.cfg.Target.Prefetch {
		defer s.startTuner(ctx, sctx, cancel, l)()
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	defer func() {
		cancel()
		if app.InGroup() {
			app.Abort(context.Background())
		}
		<-streamErr
	}()
	return l.follow(ctx, tick.C, frames, streamErr)
}

// track starts the run's tracker at the position the target recorded, and
// shows it (and the reader's applier) to Status.
func (s *Subscriber) track(su setUp) *progress.Tracker {
	pos := su.opened.Position
	tracker := progress.NewTracker(pos.EndLSN)
	tracker.Observe = func(commitTime time.Time) {
		s.stats.delays.Observe(time.Since(commitTime).Seconds())
		if s.runs.wait.Load() != nil {
			s.endWait("the target took a commit")
		}
	}
	s.mu.Lock()
	s.tracker, s.applier = tracker, su.app
	s.mu.Unlock()
	s.stats.received.Store(uint64(pos.EndLSN))
	if su.opened.Resumed {
		s.log.Info("resuming", "slot", s.cfg.Source.Slot, "applied_commit_lsn", pos.CommitLSN.String(), "end_lsn", pos.EndLSN.String())
	} else {
		s.log.Info("starting", "slot", s.cfg.Source.Slot, "publications", s.cfg.Source.Publications, "protocol", su.src.Proto)
	}
	return tracker
}

// openWorkers opens and starts the pool of workers = N (nil for workers =
// 0, for auto, whose tuner opens one when it wants it, and while applying
// one transaction at a time); the caller stops it.
func (s *Subscriber) openWorkers(ctx context.Context, app *apply.Applier, tracker *progress.Tracker, oneByOne parapply.LSN) (*pool, error) {
	if s.cfg.Workers == 0 || s.cfg.AutoWorkers || oneByOne != 0 {
		return nil, nil
	}
	tcfg := s.cfg.Target
	tcfg.AppName = s.targetName()
	tcfg.AheadOfOrder = s.cfg.CommitOrder == CommitDependency
	p, err := openPool(ctx, s.openTarget, tcfg, s.cfg.Workers, s.cfg.Group, tracker, s.log)
	if err != nil {
		return nil, err
	}
	for _, w := range p.workers {
		w.app.SetSynced(app.Synced())
		w.app.Warn = app.Warn
	}
	p.start(ctx)
	s.mu.Lock()
	s.pool = p
	s.mu.Unlock()
	s.tuner.activeWorkers.Store(int32(s.cfg.Workers))
	return p, nil
}

// newLoop makes the loop that takes the stream's messages, skipping what
// the target recorded as applied or to be skipped, and handing the rest to
// the reader's applier or to workers.
func (s *Subscriber) newLoop(su setUp, tracker *progress.Tracker, oneByOne parapply.LSN, workers *pool, spillDir string) *loop {
	o := su.opened
	start := flow.Start{SkipBelow: o.Position.CommitLSN, OneByOne: oneByOne, Limits: flow.Limits(s.cfg.Group)}
	for _, r := range o.Ahead {
		start.Ahead = append(start.Ahead, flow.Range(r))
	}
	for _, r := range o.Skips {
		start.Skips = append(start.Skips, flow.SkipRequest(r))
	}
	l := &loop{s: s, app: su.app, tracker: tracker, core: flow.New(start), streams: map[parapply.XID]*stream{},
		rels: map[uint32]*parapply.Relation{}, spillDir: spillDir}
	l.dec.ProtoVersion = su.src.Proto
	l.reader = &readerSink{app: su.app, tracker: tracker}
	l.sink = l.reader
	if workers != nil {
		l.sink = &poolSink{p: workers, keys: su.app}
	}
	return l
}

// startTuner starts the tuner of workers = auto and of the prefetch, and
// returns what ends it and then the pool it opened (cancel ends the
// stream's context first: the tuner may be opening the pool).
func (s *Subscriber) startTuner(ctx, sctx context.Context, cancel context.CancelFunc, l *loop) (stop func()) {
	// One prefetch connection until the tuner sees them wait on a
	// disk (before the loop starts, so that none opens more first).
	s.prefetchWaits(l, false)
	tuned := make(chan struct{})
	cc, pid := l.app.Conn().Config(), l.app.Conn().PgConn().PID()
	go func() {
		defer close(tuned)
		s.tune(ctx, sctx, l, cc, pid)
	}()
	return func() {
		cancel()
		<-tuned
		if p := l.aupoolSink.Load(); p != nil {
			p.stop()
		}
	}
}

// follow takes the stream's batches of frames until ctx ends (nil), the
// stream or a worker fails, or a frame cannot be applied; every tick it
// confirms flushed positions and commits a group open past MaxDelay.
func (l *loop) follow(ctx context.Context, tick <-chan time.Time, frames chan []source.Frame, streamErr chan error) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-streamErr:
			streamErr <- err
			if ctx.Err() != nil {
				return nil
			}
			return err
		case <-l.sink.failed():
			if ctx.Err() != nil {
				return nil
			}
			return l.sink.err()
		case now := <-tick:
			l.s.steadyNow()
			err := l.refresh(ctx, now)
			if err == nil {
				err = l.checkFlush(ctx)
			}
			if open, inTxn, _, _, age := l.group(); err == nil && open && !inTxn && age >= l.core.Limits().MaxDelay {
				err = l.commitGroup(ctx)
			}
			if err != nil {
				return err
			}
		case batch := <-frames:
			if err := l.batch(ctx, batch, frames); err != nil {
				if ctx.Err() != nil && errors.Is(err, context.Canceled) {
					return nil
				}
				return err
			}
			source.Recycle(batch)
		}
	}
}

// lag is how long after its commit the walsender sent the last change of
// batch (both by the publisher's clock; see backlog.go): 0 for a batch
// that ends in a keepalive with everything applied, and no sample (ok
// false) for one that ends in a keepalive with changes in hand.
func (l *loop) lag(batch []source.Frame) (lag time.Duration, ok bool) {
	last := batch[len(batch)-1]
	if last.Data == nil {
		quiet, _ := l.quiet()
		return 0, quiet
	}
	if l.lastBegin.IsZero() || last.ServerTime.IsZero() {
		return 0, false
	}
	return max(last.ServerTime.Sub(l.lastBegin), 0), true
}

// batch applies one batch of frames; frames holds those waiting after it.
func (l *loop) batch(ctx context.Context, batch []source.Frame, frames chan []source.Frame) error {
	for _, f := range batch {
		if err := l.frame(ctx, f); err != nil {
			return err
		}
		if l.app.HasJoined() {
			if err := l.refresh(ctx, time.Now()); err != nil {
				return err
			}
		}
		// A batch may hold thousands of transactions, seconds
		// of applying: the tuner's move is taken between any two.
		if err := l.retune(ctx); err != nil {
			return err
		}
	}
	if lag, ok := l.lag(batch); ok {
		if behind, changed := l.backlog.note(lag, time.Now()); changed {
			l.s.runs.caughtUp.Store(!behind)
			l.s.readAheadWanted(l, behind)
			l.s.log.Debug("reading ahead", "on", behind, "lag", lag.Round(time.Millisecond),
				"why", map[bool]string{true: "the run is behind the publisher", false: "the run keeps up with the publisher"}[behind])
		}
	}
	// Nothing more waiting: commit what the group holds now
	// rather than wait for more.
	// (With workers all busy, the group may as well grow.)
	if open, inTxn, _, _, _ := l.group(); len(frames) == 0 && open && !inTxn && !l.sink.busy() {
		return l.commitGroup(ctx)
	}
	return nil
}
