package subscriber

import (
	"slices"
	"sync"
	"testing"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/schedule"
)

// TestRelationLogTrimmed checks that the pool's relation log is folded once
// no unit needs its head, and that a worker still gets, for any unit, the
// latest description of every relation described before it.
func TestRelationLogTrimmed(t *testing.T) {
	p := &pool{sched: schedule.New(), units: map[schedule.ID]*unit{}, maxBytes: 1 << 30}
	p.cond = sync.NewCond(&p.mu)
	p.work = sync.NewCond(&p.mu)
	// Descriptions of relations 1..4, each described again and again.
	for i := 0; i < 3*relTrimAt; i++ {
		p.relation(&parapply.Relation{ID: uint32(1 + i%4), Name: "v" + string(rune('a'+i%26))})
	}
	held := &unit{relSeq: relTrimAt, txns: []unitTxn{{}}} // a unit still to apply, starting mid-log
	if err := p.add(held); err != nil {
		t.Fatal(err)
	}
	if p.relBase != relTrimAt {
		t.Fatalf("log folded up to %d, want %d (the held unit's start)", p.relBase, relTrimAt)
	}
	if len(p.rels) != 2*relTrimAt {
		t.Fatalf("log holds %d entries, want %d", len(p.rels), 2*relTrimAt)
	}
	latest := func(upto int) map[uint32]string {
		m := map[uint32]string{}
		for i := 0; i < upto; i++ {
			m[uint32(1+i%4)] = "v" + string(rune('a'+i%26))
		}
		return m
	}
	for _, c := range []struct{ from, upto int }{
		{0, relTrimAt},                 // from before the fold: folded + nothing
		{relTrimAt - 3, relTrimAt + 5}, // straddles the fold
		{relTrimAt + 2, relTrimAt + 9}, // after it: just the entries between
		{2 * relTrimAt, relTrimAt + 1}, // a worker that applied a later unit
	} {
		got := map[uint32]string{}
		for _, r := range p.relationsUpTo(c.from, c.upto) {
			got[r.ID] = r.Name
		}
		want := latest(c.upto)
		if c.from >= p.relBase && c.from <= c.upto {
			want = map[uint32]string{}
			for i := c.from; i < c.upto; i++ {
				want[uint32(1+i%4)] = "v" + string(rune('a'+i%26))
			}
		}
		if len(got) != len(want) {
			t.Fatalf("from %d upto %d: got %v, want %v", c.from, c.upto, got, want)
		}
		for id, name := range want {
			if got[id] != name {
				t.Fatalf("from %d upto %d: relation %d described as %q, want %q", c.from, c.upto, id, got[id], name)
			}
		}
	}
}

// TestTakeBatches checks how a worker fills its batch: consecutive units,
// up to its share of the changes waiting (at least batchMin, at most
// batchMax), never past a unit that waits for another worker's batch or a
// barrier.
func TestTakeBatches(t *testing.T) {
	key := func(s string) []schedule.Key { return []schedule.Key{schedule.MakeKey("t", []byte(s))} }
	type add struct {
		keys    []schedule.Key
		changes int
		barrier bool
	}
	tests := []struct {
		name    string
		workers int
		max     int // batchMax
		chain   int // chainMax (group_max_changes)
		adds    []add
		want    [][]schedule.ID // batches taken one after another, none committed
	}{
		{"independent units share out the backlog", 2, 512, 20000,
			[]add{{key("a"), 32, false}, {key("b"), 32, false}, {key("c"), 32, false}, {key("d"), 32, false}, {key("e"), 32, false}, {key("f"), 32, false}},
			[][]schedule.ID{{1, 2, 3}, {4, 5}, {6}}}, // 192/2 = 96, then 96/2 = 48 < batchMin
		{"a unit waiting for another batch ends this one", 4, 512, 20000,
			[]add{{key("a"), 100, false}, {key("b"), 10, false}, {key("a"), 10, false}, {key("c"), 10, false}},
			[][]schedule.ID{{1}, {2}, {4}}},
		{"units waiting for their own batch join it past batchMax", 1, 15, 30,
			[]add{{key("a"), 10, false}, {key("a"), 10, false}, {key("a"), 10, false}, {key("a"), 10, false}},
			[][]schedule.ID{{1, 2, 3}}},
		{"a ready unit after a chain joins within the share only", 1, 15, 100,
			[]add{{key("a"), 10, false}, {key("a"), 10, false}, {key("b"), 10, false}},
			[][]schedule.ID{{1, 2}, {3}}},
		{"batchMax bounds a batch", 1, 40, 20000,
			[]add{{key("a"), 20, false}, {key("b"), 20, false}, {key("c"), 20, false}},
			[][]schedule.ID{{1, 2}, {3}}},
		{"a barrier goes alone", 1, 512, 20000,
			[]add{{key("a"), 10, false}, {nil, 1, true}, {key("b"), 10, false}},
			[][]schedule.ID{{1}}},
		{"group_max_changes = 1: one unit per batch", 1, 1, 1,
			[]add{{key("a"), 1, false}, {key("b"), 1, false}},
			[][]schedule.ID{{1}, {2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &pool{sched: schedule.New(), units: map[schedule.ID]*unit{}, maxBytes: 1 << 30, batchMax: tt.max, chainMax: tt.chain, batchBytes: 1 << 30}
			p.cond = sync.NewCond(&p.mu)
			p.work = sync.NewCond(&p.mu)
			p.workers = make([]*worker, tt.workers)
			for _, a := range tt.adds {
				if err := p.add(&unit{keys: a.keys, changes: a.changes, barrier: a.barrier, txns: []unitTxn{{}}}); err != nil {
					t.Fatal(err)
				}
			}
			var got [][]schedule.ID
			for {
				id, ok := p.sched.Next()
				if !ok {
					break
				}
				got = append(got, p.take(id).ids)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("batches %v, want %v", got, tt.want)
			}
			for i := range got {
				if !slices.Equal(got[i], tt.want[i]) {
					t.Fatalf("batches %v, want %v", got, tt.want)
				}
			}
		})
	}
}
