package schedule

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestWaits(t *testing.T) {
	a, b, c := MakeKey("t", []byte("1")), MakeKey("t", []byte("2")), MakeKey("u", []byte("1"))
	type add struct {
		keys    []Key
		barrier bool
		want    []ID
	}
	tests := []struct {
		name string
		adds []add
	}{
		{"disjoint units wait for nothing", []add{{[]Key{a}, false, nil}, {[]Key{b}, false, nil}, {[]Key{c}, false, nil}}},
		{"a shared key waits for its last toucher only", []add{{[]Key{a}, false, nil}, {[]Key{a}, false, []ID{1}}, {[]Key{a, b}, false, []ID{2}}}},
		{"two keys, two owners", []add{{[]Key{a}, false, nil}, {[]Key{b}, false, nil}, {[]Key{a, b, a}, false, []ID{1, 2}}}},
		{"a barrier waits for all and all wait for it", []add{{[]Key{a}, false, nil}, {[]Key{b}, false, nil}, {nil, true, []ID{1, 2}}, {[]Key{c}, false, []ID{3}}}},
		{"a unit without keys waits for nothing", []add{{[]Key{a}, false, nil}, {nil, false, nil}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New()
			for i, ad := range tt.adds {
				id, deps := s.Add(ad.keys, ad.barrier)
				if id != ID(i+1) {
					t.Fatalf("unit %d got ID %d", i+1, id)
				}
				if !slices.Equal(deps, ad.want) {
					t.Errorf("unit %d waits for %v, want %v", id, deps, ad.want)
				}
			}
		})
	}
}

func TestDoneReleasesInOrder(t *testing.T) {
	s := New()
	k := MakeKey("k")
	s.Add([]Key{k}, false)
	s.Add([]Key{k}, false)
	s.Add(nil, false)
	if got := s.Ready(); !slices.Equal(got, []ID{1, 3}) {
		t.Fatalf("ready %v, want [1 3]", got)
	}
	if s.MayCommit(3) || !s.MayCommit(1) {
		t.Fatal("only the oldest unit may commit")
	}
	if err := s.Done(2); err == nil {
		t.Fatal("Done of a unit not started must fail")
	}
	if err := s.Done(3); err != nil {
		t.Fatal(err)
	}
	if s.Oldest() != 1 {
		t.Fatalf("oldest %d, want 1", s.Oldest())
	}
	if err := s.Done(1); err != nil {
		t.Fatal(err)
	}
	if id, ok := s.Next(); !ok || id != 2 {
		t.Fatalf("next %d %v, want 2", id, ok)
	}
	if !s.MayCommit(2) {
		t.Fatal("unit 2 is the oldest now")
	}
	if err := s.Done(2); err != nil {
		t.Fatal(err)
	}
	if s.InFlight() != 0 || s.Keys() != 0 || s.Oldest() != 0 {
		t.Fatalf("after all done: %d in flight, %d keys, oldest %d", s.InFlight(), s.Keys(), s.Oldest())
	}
}

// TestRandomSchedules drives the scheduler with random units over a small key
// space (so they overlap often) and random completion order, as a pool of
// workers would, and checks every promise: a unit starts only after every
// earlier unit it shares a key with (or any earlier unit, around a barrier)
// is done; a unit that conflicts with nothing in flight is ready at once;
// with commit order preserved only the oldest commits; the run never gets
// stuck; memory holds only what is in flight.
func TestRandomSchedules(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			units := 50 + r.IntN(300)
			keySpace := 1 + r.IntN(40)
			workers := 1 + r.IntN(8)
			preserve := r.IntN(2) == 0
			extend := seed > 100 // the first 100 seeds take one unit at a time
			t.Logf("seed %d: %d units, %d keys, %d workers, preserve %v, extend %v", seed, units, keySpace, workers, preserve, extend)
			runSchedule(t, r, units, keySpace, workers, preserve, extend)
		})
	}
}

type simUnit struct {
	keys    []Key
	barrier bool
	done    bool
	started bool
}

// runSchedule simulates workers that each take the oldest ready unit and,
// with extend, the next ones Extend allows, apply them in one transaction
// and commit them together (in preserve mode once every earlier unit has
// committed). It checks that no unit is applied while an earlier one it
// conflicts with is neither done nor applied before it in the same
// transaction, that the schedule never gets stuck, and that keys are
// forgotten.
func runSchedule(t *testing.T, r *rand.Rand, n, keySpace, workers int, preserve, extend bool) {
	t.Helper()
	s := New()
	all := map[ID]*simUnit{}
	var running [][]ID  // started batches, being applied
	var finished [][]ID // applied batches, waiting to commit
	added := 0
	conflicts := func(a, b *simUnit) bool {
		if a.barrier || b.barrier {
			return true
		}
		for _, k := range a.keys {
			if slices.Contains(b.keys, k) {
				return true
			}
		}
		return false
	}
	start := func(batch []ID, id ID) {
		u := all[id]
		for e, eu := range all {
			if e < id && !eu.done && conflicts(eu, u) && !slices.Contains(batch, e) {
				t.Fatalf("unit %d started (batch %v) while earlier unit %d, which it conflicts with, is not done", id, batch, e)
			}
		}
		if u.started {
			t.Fatalf("unit %d started twice", id)
		}
		u.started = true
	}
	oldestIn := func(batches [][]ID) int {
		for i, b := range batches {
			if b[0] == s.Oldest() {
				return i
			}
		}
		return -1
	}
	for steps := 0; ; steps++ {
		if steps > 100*n {
			t.Fatalf("stuck: %d in flight, %d running, %d waiting to commit", s.InFlight(), len(running), len(finished))
		}
		switch {
		case added < n && (r.IntN(3) > 0 || len(running)+len(finished) == 0):
			u := &simUnit{barrier: r.IntN(40) == 0}
			for range r.IntN(4) {
				u.keys = append(u.keys, MakeKey(string(rune('a'+r.IntN(keySpace)))))
			}
			id, deps := s.Add(u.keys, u.barrier)
			all[id] = u
			added++
			if len(deps) == 0 {
				for e, eu := range all {
					if e < id && !eu.done && conflicts(eu, u) {
						t.Fatalf("unit %d waits for nothing though it conflicts with unit %d in flight", id, e)
					}
				}
			}
		case len(finished) > 0 && (!preserve || oldestIn(finished) >= 0):
			// Commit: in preserve mode only the batch holding the oldest
			// unit; otherwise any.
			i := r.IntN(len(finished))
			if preserve {
				i = oldestIn(finished)
			}
			batch := finished[i]
			if preserve && !s.MayCommit(batch[0]) {
				t.Fatalf("batch %v may not commit yet", batch)
			}
			finished = slices.Delete(finished, i, i+1)
			for _, id := range batch {
				all[id].done = true
				if err := s.Done(id); err != nil {
					t.Fatal(err)
				}
			}
		case len(running) > 0:
			i := r.IntN(len(running))
			finished = append(finished, running[i])
			running = slices.Delete(running, i, i+1)
		default:
			if added == n && len(finished) == 0 && s.InFlight() == 0 {
				if s.Keys() != 0 {
					t.Fatalf("%d keys remembered after every unit is done", s.Keys())
				}
				return
			}
		}
		// Hand ready units to free workers, oldest first; a running batch
		// may grow while it is applied.
		for len(running)+len(finished) < workers {
			id, ok := s.Next()
			if !ok {
				break
			}
			batch := []ID{id}
			start(batch, id)
			running = append(running, batch)
		}
		if extend {
			for i, b := range running {
				for r.IntN(3) > 0 {
					id, ok := s.Extend(b[0], b[len(b)-1])
					if !ok {
						break
					}
					if id != b[len(b)-1]+1 {
						t.Fatalf("Extend of %v gave %d", b, id)
					}
					start(b, id)
					b = append(b, id)
				}
				running[i] = b
			}
		}
		held := 0
		for _, u := range all {
			if !u.done {
				held += len(u.keys)
			}
		}
		if s.Keys() > held {
			t.Fatalf("%d keys remembered, only %d held by units in flight", s.Keys(), held)
		}
	}
}

func TestExtend(t *testing.T) {
	a, b := MakeKey("t", []byte("a")), MakeKey("t", []byte("b"))
	s := New()
	s.Add([]Key{a}, false) // 1
	s.Add([]Key{a}, false) // 2 waits for 1
	s.Add([]Key{b}, false) // 3
	s.Add(nil, true)       // 4 barrier
	s.Add([]Key{b}, false) // 5 waits for 4
	if id, ok := s.Next(); !ok || id != 1 {
		t.Fatalf("next %d %v, want 1", id, ok)
	}
	if id, chained, ok := s.Joinable(1, 1); !ok || id != 2 || !chained {
		t.Fatalf("Joinable(1, 1) = %d %v %v, want 2, chained", id, chained, ok)
	}
	if id, ok := s.Extend(1, 1); !ok || id != 2 {
		t.Fatalf("unit 2 waits only for unit 1, held by the same worker: Extend gave %d %v", id, ok)
	}
	if id, chained, ok := s.Joinable(1, 2); !ok || id != 3 || chained {
		t.Fatalf("Joinable(1, 2) = %d %v %v, want 3, ready", id, chained, ok)
	}
	if id, ok := s.Extend(1, 2); !ok || id != 3 {
		t.Fatalf("unit 3 is ready: Extend gave %d %v", id, ok)
	}
	if got := s.Ready(); len(got) != 0 {
		t.Fatalf("unit 3 was taken by Extend, yet ready lists %v", got)
	}
	if _, ok := s.Extend(1, 3); ok {
		t.Fatal("a barrier must not join a batch")
	}
	for id := ID(1); id <= 3; id++ {
		if err := s.Done(id); err != nil {
			t.Fatal(err)
		}
	}
	if got := s.Ready(); !slices.Equal(got, []ID{4}) {
		t.Fatalf("ready %v, want [4]", got)
	}
	if _, ok := s.Extend(4, 4); ok {
		t.Fatal("a barrier's batch must not grow")
	}
	s2 := New()
	s2.Add([]Key{a}, false) // 1
	s2.Add([]Key{b}, false) // 2
	s2.Add([]Key{a}, false) // 3 waits for 1
	s2.Next()
	if id, ok := s2.Next(); !ok || id != 2 {
		t.Fatalf("next %d %v, want 2", id, ok)
	}
	if _, ok := s2.Extend(2, 2); ok {
		t.Fatal("unit 3 waits for unit 1, held by another worker: it must not join unit 2's batch")
	}
	if _, ok := s2.Extend(5, 5); ok {
		t.Fatal("Extend of units never added must fail")
	}
}

func TestDeterministic(t *testing.T) {
	trace := func() []ID {
		s := New()
		r := rand.New(rand.NewPCG(42, 42))
		var out []ID
		for range 500 {
			keys := []Key{MakeKey(string(rune('a' + r.IntN(10)))), MakeKey(string(rune('a' + r.IntN(10))))}
			_, deps := s.Add(keys, r.IntN(50) == 0)
			out = append(out, deps...)
			out = append(out, 0)
			for _, id := range s.Ready() {
				out = append(out, id)
				if err := s.Done(id); err != nil {
					t.Fatal(err)
				}
			}
		}
		return out
	}
	if a, b := trace(), trace(); !slices.Equal(a, b) {
		t.Fatal("the same inputs gave different schedules")
	}
}

func BenchmarkAddDone(b *testing.B) {
	s := New()
	keys := make([][]Key, 1024)
	for i := range keys {
		keys[i] = []Key{MakeKey("t", []byte(fmt.Sprint(i))), MakeKey("t", []byte(fmt.Sprint(i*7)))}
	}
	for i := 0; b.Loop(); i++ {
		s.Add(keys[i%len(keys)], false)
		if id, ok := s.Next(); ok {
			_ = s.Done(id)
		}
	}
}
