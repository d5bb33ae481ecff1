package apply

// The tuner (package subscriber: workers = auto, and the growth of the
// prefetch connections) samples the target's view of the appliers'
// sessions and judges, window by window, whether their reads wait on a
// disk. It reaches an applier through Tune alone: what it reads and what it
// sets meet in one call.

// TuneSignals is what the tuner reads of an applier.
type TuneSignals struct {
	// PID is the backend of the applier's target session, whose waits
	// the tuner samples.
	PID uint32
	// Executed is Stats.Executed: the rows its statements changed,
	// committed or not (its pace, smooth where commits come in lumps).
	Executed int64
	// PrefetchConns counts its own prefetch connections open (0 for an
	// applier sharing another's): a window in which they grew is not
	// judged.
	PrefetchConns int
	// PrefetchPIDs is the slice given to Tune with the backends of its own
	// prefetch connections appended: their waits say whether reads wait
	// on a disk.
	PrefetchPIDs []uint32
}

// DiskWaits is the tuner's verdict on the prefetch sessions' reads, for
// Tune to pass on to the applier's own prefetcher.
type DiskWaits int8

// Verdicts of DiskWaits.
const (
	// DiskUnjudged leaves the prefetcher as it was last told: the tuner
	// only reads.
	DiskUnjudged DiskWaits = iota
	// DiskWaiting: the reads wait on a disk; more prefetch connections
	// may open, and statements wait for their rows to be read ahead.
	DiskWaiting
	// DiskFast: they do not; the prefetcher goes back to one connection.
	DiskFast
)

// Tune is the tuner's one way into the applier: it tells the applier's own
// prefetcher (open, or opened later) the verdict, unless DiskUnjudged
// (never told, it keeps one connection), and returns the signals, the
// prefetch connections' backends appended to pids. Safe to call from the
// tuner's goroutine while the applier works.
func (a *Applier) Tune(verdict DiskWaits, pids []uint32) TuneSignals {
	if verdict != DiskUnjudged {
		a.readAhead.setWaits(verdict == DiskWaiting)
	}
	s := TuneSignals{Executed: a.Stats.Executed.Load(), PrefetchConns: a.readAhead.conns(), PrefetchPIDs: a.readAhead.pids(pids)}
	if a.conn != nil {
		s.PID = a.conn.PgConn().PID()
	}
	return s
}
