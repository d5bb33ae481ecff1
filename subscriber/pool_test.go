package subscriber

import (
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
