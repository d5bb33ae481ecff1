package progress_test

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/schedule"
)

// step is one call on a Tracker and what must hold after it.
type step struct {
	op   string       // "commit" (remote, local, at), "reach" (remote), "flush" (local), "all"
	a, b parapply.LSN // remote and local for commit; remote for reach; local for flush
	at   int          // source commit time, seconds after base (0: none)

	applied, durable parapply.LSN
	pending          bool  // NeedsFlush
	moved            bool  // Moved is signalled
	observed         []int // what Observe is told by this step, seconds after base
	last             int   // Positions' last commit time, seconds after base (0: none)
}

var base = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func at(s int) time.Time {
	if s == 0 {
		return time.Time{}
	}
	return base.Add(time.Duration(s) * time.Second)
}

// TestTracker: the publisher is told a position as durable only once the
// target has flushed the commit that applied it (or everything before a
// keepalive or an empty transaction, once the commit before it is), never
// an older one than it was told; Moved is signalled exactly when applied
// or durable moves; Observe is told the source commit time of each commit
// that moves the applied position, and of nothing else.
func TestTracker(t *testing.T) {
	tests := []struct {
		name  string
		start parapply.LSN
		steps []step
	}{
		{"a commit is durable once flushed past it", 100, []step{
			{op: "commit", a: 200, b: 1000, at: 1, applied: 200, durable: 100, pending: true, moved: true, observed: []int{1}, last: 1},
			{op: "flush", b: 999, applied: 200, durable: 100, pending: true, last: 1},
			{op: "flush", b: 1000, applied: 200, durable: 200, moved: true, last: 1},
			{op: "flush", b: 5000, applied: 200, durable: 200, last: 1},
		}},
		{"several commits, flushed a few at a time", 100, []step{
			{op: "commit", a: 200, b: 1000, at: 1, applied: 200, durable: 100, pending: true, moved: true, observed: []int{1}, last: 1},
			{op: "commit", a: 300, b: 1100, at: 2, applied: 300, durable: 100, pending: true, moved: true, observed: []int{2}, last: 2},
			{op: "commit", a: 400, b: 1200, at: 3, applied: 400, durable: 100, pending: true, moved: true, observed: []int{3}, last: 3},
			{op: "flush", b: 1150, applied: 400, durable: 300, pending: true, moved: true, last: 3},
			{op: "flush", b: 1100, applied: 400, durable: 300, pending: true, last: 3},
			{op: "flush", b: 1200, applied: 400, durable: 400, moved: true, last: 3},
		}},
		{"a keepalive is durable with the commit before it", 100, []step{
			{op: "commit", a: 200, b: 1000, at: 1, applied: 200, durable: 100, pending: true, moved: true, observed: []int{1}, last: 1},
			{op: "reach", a: 350, applied: 350, durable: 100, pending: true, moved: true, last: 1},
			{op: "flush", b: 999, applied: 350, durable: 100, pending: true, last: 1},
			{op: "flush", b: 1000, applied: 350, durable: 350, moved: true, last: 1},
		}},
		{"a keepalive with nothing committed is durable at the next flush", 100, []step{
			{op: "reach", a: 150, applied: 150, durable: 100, pending: true, moved: true},
			{op: "flush", b: 1, applied: 150, durable: 150, moved: true},
		}},
		{"an older position moves nothing", 100, []step{
			{op: "commit", a: 300, b: 1100, at: 2, applied: 300, durable: 100, pending: true, moved: true, observed: []int{2}, last: 2},
			{op: "commit", a: 200, b: 1200, at: 1, applied: 300, durable: 100, pending: true, last: 2},
			{op: "commit", a: 300, b: 1300, at: 3, applied: 300, durable: 100, pending: true, last: 2},
			{op: "reach", a: 250, applied: 300, durable: 100, pending: true, last: 2},
			{op: "commit", a: 90, b: 1, at: 4, applied: 300, durable: 100, pending: true, last: 2},
			{op: "flush", b: 1100, applied: 300, durable: 300, moved: true, last: 2},
		}},
		{"the start is durable already", 500, []step{
			{op: "commit", a: 500, b: 10, at: 1, applied: 500, durable: 500},
			{op: "reach", a: 400, applied: 500, durable: 500},
			{op: "flush", b: 10, applied: 500, durable: 500},
			{op: "all", applied: 500, durable: 500},
		}},
		{"a target position lower than one before waits for that one", 100, []step{
			// A later target commit at a lower WAL position (another
			// session's insert position, read earlier) is durable only
			// with the highest one before it.
			{op: "commit", a: 200, b: 2000, at: 1, applied: 200, durable: 100, pending: true, moved: true, observed: []int{1}, last: 1},
			{op: "commit", a: 300, b: 1500, at: 2, applied: 300, durable: 100, pending: true, moved: true, observed: []int{2}, last: 2},
			{op: "flush", b: 1500, applied: 300, durable: 100, pending: true, last: 2},
			{op: "flush", b: 2000, applied: 300, durable: 300, moved: true, last: 2},
		}},
		{"no commit time: nothing observed, the last one kept", 100, []step{
			{op: "commit", a: 200, b: 1000, at: 7, applied: 200, durable: 100, pending: true, moved: true, observed: []int{7}, last: 7},
			{op: "commit", a: 300, b: 1100, applied: 300, durable: 100, pending: true, moved: true, last: 7},
		}},
		{"a synchronous target: all durable at once", 100, []step{
			{op: "commit", a: 200, b: 1000, at: 1, applied: 200, durable: 100, pending: true, moved: true, observed: []int{1}, last: 1},
			{op: "reach", a: 250, applied: 250, durable: 100, pending: true, moved: true, last: 1},
			{op: "all", applied: 250, durable: 250, moved: true, last: 1},
			{op: "all", applied: 250, durable: 250, last: 1},
			{op: "flush", b: 5000, applied: 250, durable: 250, last: 1},
			{op: "commit", a: 300, b: 900, at: 2, applied: 300, durable: 250, pending: true, moved: true, observed: []int{2}, last: 2},
			{op: "flush", b: 1000, applied: 300, durable: 300, moved: true, last: 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := progress.NewTracker(tt.start)
			var observed []int
			tr.Observe = func(ct time.Time) { observed = append(observed, int(ct.Sub(base)/time.Second)) }
			if a, d, _ := tr.Positions(); a != tt.start || d != tt.start || tr.NeedsFlush() {
				t.Fatalf("a new tracker at %v: applied %v, durable %v, pending %v", tt.start, a, d, tr.NeedsFlush())
			}
			for i, s := range tt.steps {
				observed = nil
				switch s.op {
				case "commit":
					tr.Committed(s.a, s.b, at(s.at))
				case "reach":
					tr.Reached(s.a)
				case "flush":
					tr.Flushed(s.b)
				case "all":
					tr.AllDurable()
				default:
					t.Fatalf("step %d: no op %q", i, s.op)
				}
				moved := false
				select {
				case <-tr.Moved():
					moved = true
				default:
				}
				applied, durable, last := tr.Positions()
				if applied != s.applied || durable != s.durable || tr.NeedsFlush() != s.pending || moved != s.moved || !last.Equal(at(s.last)) {
					t.Errorf("step %d (%s %v %v): applied %v durable %v pending %v moved %v last %v; want %v %v %v %v %v",
						i, s.op, s.a, s.b, applied, durable, tr.NeedsFlush(), moved, last, s.applied, s.durable, s.pending, s.moved, at(s.last))
				}
				if !slices.Equal(observed, s.observed) {
					t.Errorf("step %d (%s %v %v): Observe told %v, want %v", i, s.op, s.a, s.b, observed, s.observed)
				}
			}
		})
	}
}

// TestTrackerWorkers: workers commit units in any order (commit_order =
// dependency), their reports reach the tracker in source order through
// schedule.InOrder, as the pool feeds it, and the target's flush position
// trails the commits; the publisher is never told a position as durable
// before every target commit up to it is flushed, nor one older than
// before, and in the end every position is. A reader polls the positions
// meanwhile, as the stream reader does. Seeded; the seed is logged.
func TestTrackerWorkers(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))
	const units = 400
	// Unit i (from 1) is source position 100*i; the n-th commit on the
	// target, whichever unit it is, is at WAL position 1000+10n.
	order := rng.Perm(units)
	local := make([]parapply.LSN, units+1) // by unit
	for n, i := range order {
		local[i+1] = parapply.LSN(1000 + 10*n)
	}
	tr := progress.NewTracker(0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var told parapply.LSN
		for {
			select {
			case <-stop:
				return
			case <-tr.Moved():
			}
			applied, durable, _ := tr.Positions()
			if durable < told || durable > applied {
				t.Errorf("reader: durable %v after %v, applied %v", durable, told, applied)
				return
			}
			told = durable
		}
	}()
	in := schedule.NewInOrder[schedule.ID]()
	var flushed, told parapply.LSN
	for n, i := range order {
		for _, r := range in.Put(schedule.ID(i+1), schedule.ID(i+1), nil) {
			tr.Committed(parapply.LSN(100*r), local[r], base.Add(time.Duration(r)*time.Millisecond))
		}
		// The target has flushed up to a commit a few commits back.
		flushed = max(flushed, parapply.LSN(1000+10*max(0, n-rng.IntN(4))))
		tr.Flushed(flushed)
		_, durable, _ := tr.Positions()
		if durable < told {
			t.Fatalf("after commit %d: durable moved back from %v to %v", n, told, durable)
		}
		told = durable
		for u := 1; u <= int(durable/100); u++ {
			if local[u] > flushed {
				t.Fatalf("after commit %d: position %v told durable with the target flushed to %v, but unit %d committed at %v", n, durable, flushed, u, local[u])
			}
		}
	}
	tr.Flushed(parapply.LSN(1000 + 10*units))
	close(stop)
	wg.Wait()
	if a, d, last := tr.Positions(); a != 100*units || d != 100*units || tr.NeedsFlush() || in.Waiting() != 0 || !last.Equal(base.Add(units*time.Millisecond)) {
		t.Fatalf("at the end: applied %v, durable %v, pending %v, %d held back, last commit %v; want %v, %v, none, none, %v",
			a, d, tr.NeedsFlush(), in.Waiting(), last, parapply.LSN(100*units), parapply.LSN(100*units), base.Add(units*time.Millisecond))
	}
}
