package subscriber

import "time"

// Reading ahead pays only while the run is behind the publisher: then a
// page read on another connection is a page the appliers do not wait for,
// and the rows to read are known well before their statement runs. Where
// parapply keeps up (a live load applied as it comes), the prefetch
// sessions only repeat the appliers' index lookups, at the same moment, on
// a machine whose CPU the publisher may need (tpcb at 2 cores: the target
// spent a fifth less CPU per change without them; a point-update catch-up
// ran 10% slower with prefetch = off; docs/history/2026-11-27-behind.md).
// The same holds for the tuner's frequent samples: a run that keeps up
// gains nothing from more workers.
//
// The measure is the publisher's own clock, so that no clock skew between
// the hosts enters it: the time the walsender sent the last change the loop
// took (XLogData's send time) minus the commit time of its transaction. A
// walsender that decodes old WAL (a backlog, held back by a reader that
// cannot take more) sends it long after its commit; one that keeps up,
// moments after. Judged once per backlogWindow on the last such lag seen:
// backlogOn or more marks the run behind, under backlogOff caught up; in
// between it stays as it was. (A run on a machine whose CPU is full swings
// around half a second to a second behind while it keeps up: tpcb live at
// 2 cores, the built-in as much as parapply.) A run starts behind (a
// catch-up reads ahead from its first statement).
const (
	backlogWindow = 500 * time.Millisecond
	backlogOn     = 2 * time.Second
	backlogOff    = time.Second
)

// backlogJudge turns the loop's lag samples into whether the run is behind
// the publisher. It is pure: the loop feeds it and acts on what it returns.
type backlogJudge struct {
	caughtUp  bool // the verdict (the zero value: behind)
	windowEnd time.Time
	lag       time.Duration
}

// note takes a lag seen at now; it returns the verdict, and whether the
// window that ended changed it.
func (b *backlogJudge) note(lag time.Duration, now time.Time) (behind, changed bool) {
	if b.windowEnd.IsZero() {
		b.windowEnd = now.Add(backlogWindow)
	}
	b.lag = lag
	if now.Before(b.windowEnd) {
		return !b.caughtUp, false
	}
	b.windowEnd = now.Add(backlogWindow)
	switch {
	case b.caughtUp && b.lag >= backlogOn:
		b.caughtUp = false
		return true, true
	case !b.caughtUp && b.lag < backlogOff:
		b.caughtUp = true
		return false, true
	}
	return !b.caughtUp, false
}
