package subscriber

import (
	"slices"
	"sync"
	"testing"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/schedule"
)

// TestRelationLogTrimmed checks that adding a unit folds the pool's
// relation log once it is long, up to the start of the oldest unit still to
// apply, and not while that start is near the log's head.
func TestRelationLogTrimmed(t *testing.T) {
	tests := []struct {
		name   string
		logged int
		starts []int // relSeq of the units added, in order
		base   int   // entries folded after the last add
	}{
		{"short log", relTrimAt - 1, []int{relTrimAt - 1}, 0},
		{"held unit mid-log", 3 * relTrimAt, []int{relTrimAt}, relTrimAt},
		{"oldest unit of several", 3 * relTrimAt, []int{relTrimAt + 7, 2 * relTrimAt, 3 * relTrimAt}, relTrimAt + 7},
		{"oldest unit near the head", 3 * relTrimAt, []int{relTrimAt/2 - 1, 3 * relTrimAt}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &pool{sched: schedule.New(), units: map[schedule.ID]*unit{}, maxBytes: 1 << 30}
			p.cond = sync.NewCond(&p.mu)
			p.work = sync.NewCond(&p.mu)
			for i := 0; i < tt.logged; i++ {
				p.relation(&parapply.Relation{ID: uint32(1 + i%4)})
			}
			for _, s := range tt.starts {
				if err := p.add(&unit{relSeq: s, txns: []unitTxn{{}}}); err != nil {
					t.Fatal(err)
				}
			}
			if p.rels.base != tt.base || p.relSeq() != tt.logged {
				t.Fatalf("log folded up to %d of %d, want %d of %d", p.rels.base, p.relSeq(), tt.base, tt.logged)
			}
		})
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
