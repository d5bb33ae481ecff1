package schedule

import (
	"math/rand/v2"
	"testing"
)

// TestInOrderRandom reports units in random orders and checks the
// property: every report comes out exactly once, in unit order, and as
// soon as every earlier report is in (never later).
func TestInOrderRandom(t *testing.T) {
	for seed := uint64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		n := 1 + r.IntN(60)
		order := r.Perm(n)
		o := NewInOrder[int]()
		in := make([]bool, n+1)
		released := 0
		for _, k := range order {
			id := k + 1
			in[id] = true
			out := o.Put(ID(id), id, nil)
			// Everything up to the first unit not reported yet is out now.
			want := released
			for want < n && in[want+1] {
				want++
			}
			if len(out) != want-released {
				t.Fatalf("seed %d: after unit %d, %d reports released, want %d", seed, id, len(out), want-released)
			}
			for i, v := range out {
				if v != released+i+1 {
					t.Fatalf("seed %d: released %d in place of %d", seed, v, released+i+1)
				}
			}
			released = want
			if o.Waiting() != countTrue(in)-released {
				t.Fatalf("seed %d: %d held back, want %d", seed, o.Waiting(), countTrue(in)-released)
			}
		}
		if released != n || o.Waiting() != 0 {
			t.Fatalf("seed %d: %d of %d released, %d held back at the end", seed, released, n, o.Waiting())
		}
	}
}

// TestInOrderTwice checks that a unit reported twice is refused, whether
// its first report is still held back or already released.
func TestInOrderTwice(t *testing.T) {
	o := NewInOrder[string]()
	mustPanic := func(id ID) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("a second report of unit %d was taken", id)
			}
		}()
		o.Put(id, "again", nil)
	}
	o.Put(2, "b", nil)
	mustPanic(2) // held back
	if out := o.Put(1, "a", nil); len(out) != 2 || out[0] != "a" || out[1] != "b" {
		t.Fatalf("released %q, want [a b]", out)
	}
	mustPanic(1) // released
}

func countTrue(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}
