package subscriber

import (
	"fmt"
	"maps"
	"testing"

	"github.com/parapply/parapply"
)

// relStep is one step of a relation log's history: n descriptions logged
// (of the model's ids relations from first on, in turn), a fold at a unit's
// start, or a DDL.
type relStep struct {
	log    int
	first  uint32
	fold   int // the oldest unit's start; -1: no fold
	ddl    bool
	synced map[string]parapply.LSN
}

func logRels(n int) relStep               { return relStep{log: n, first: 1, fold: -1} }
func logFrom(n int, first uint32) relStep { return relStep{log: n, first: first, fold: -1} }
func foldAt(upto int) relStep             { return relStep{fold: upto} }
func ddlRan(synced map[string]parapply.LSN) relStep {
	return relStep{fold: -1, ddl: true, synced: synced}
}

// relModel replays steps on a relLog and keeps the whole history beside it.
type relModel struct {
	l       relLog
	ids     uint32
	history []*parapply.Relation
	at      map[*parapply.Relation]int // each description's place in history
	lastDDL int                        // entries logged before the last DDL
}

func (m *relModel) run(t *testing.T, steps []relStep) {
	t.Helper()
	m.at = map[*parapply.Relation]int{}
	for _, s := range steps {
		for range s.log {
			n := len(m.history)
			r := &parapply.Relation{ID: s.first + uint32(n)%m.ids, Name: fmt.Sprintf("v%d", n)}
			m.history, m.at[r] = append(m.history, r), n
			if got := m.l.append(r); got != n+1 {
				t.Fatalf("append of entry %d returned %d, want %d", n, got, n+1)
			}
		}
		if s.fold >= 0 {
			m.l.fold(s.fold)
		}
		if s.ddl {
			m.l.targetChanged(s.synced)
			m.lastDDL = len(m.history)
		}
	}
	if m.l.seq() != len(m.history) {
		t.Fatalf("seq %d, want %d", m.l.seq(), len(m.history))
	}
}

// latest returns the last description of each relation in rels, by name.
func latest(rels []*parapply.Relation) map[uint32]string {
	out := map[uint32]string{}
	for _, r := range rels {
		out[r.ID] = r.Name
	}
	return out
}

// checkCatchUp checks the invariant for a worker that has loaded the first
// from entries and starts a unit at upto: what it then holds is the latest
// description of every relation logged before upto.
func (m *relModel) checkCatchUp(t *testing.T, from, upto int) {
	t.Helper()
	c := m.l.catchUp(from, upto)
	held := latest(m.history[:from])
	if from > upto {
		// It applied a later unit: what it holds is of no use.
		held = map[uint32]string{}
	}
	maps.Copy(held, latest(c.rels))
	if want := latest(m.history[:upto]); !maps.Equal(held, want) {
		t.Fatalf("from %d upto %d: worker holds %v, want %v", from, upto, held, want)
	}
	for _, r := range c.rels {
		if i := m.at[r]; c.beforeDDL[r] != (i < m.lastDDL) {
			t.Fatalf("from %d upto %d: entry %d marked before the DDL: %v, want %v", from, upto, i, c.beforeDDL[r], i < m.lastDDL)
		}
	}
}

// TestRelationLog checks the relation log's invariant (see relLog): whatever
// was folded, a worker starting a unit at any position gets the latest
// description of every relation logged before it; each DDL counts once,
// marks what was logged before it, and replaces the synced tables only
// when it gives them.
func TestRelationLog(t *testing.T) {
	s1 := map[string]parapply.LSN{`"public"."a"`: 100}
	s2 := map[string]parapply.LSN{`"public"."a"`: 100, `"public"."b"`: 200}
	tests := []struct {
		name     string
		ids      uint32
		steps    []relStep
		base     int // entries folded
		held     int // entries still in the log
		long     bool
		ddlSeq   int
		synced   map[string]parapply.LSN
		catchUps [][2]int // (from, upto) checked besides a spread over [0, seq] x [base, seq]
	}{
		{name: "empty", ids: 4},
		{name: "short log: nothing folded", ids: 4, steps: []relStep{logRels(10), foldAt(10)}, held: 10},
		{name: "fold below half of relTrimAt is put off", ids: 4,
			steps: []relStep{logRels(relTrimAt), foldAt(relTrimAt/2 - 1)}, held: relTrimAt, long: true},
		{name: "fold at the oldest unit's start", ids: 4,
			steps: []relStep{logRels(3 * relTrimAt), foldAt(relTrimAt)}, base: relTrimAt, held: 2 * relTrimAt, long: true},
		{name: "fold of everything", ids: 3,
			steps: []relStep{logRels(relTrimAt), foldAt(relTrimAt)}, base: relTrimAt},
		{name: "folded twice, relations met only before the first fold", ids: 7,
			steps: []relStep{logRels(relTrimAt), foldAt(relTrimAt - 2), logFrom(relTrimAt, 100), foldAt(2*relTrimAt - 5)},
			base:  2*relTrimAt - 5, held: 5, catchUps: [][2]int{{0, 2*relTrimAt - 5}, {relTrimAt, 2*relTrimAt - 1}}},
		{name: "a DDL without synced tables", ids: 4,
			steps: []relStep{logRels(20), ddlRan(nil), logRels(5)}, held: 25, ddlSeq: 1},
		{name: "a DDL sets synced, a later one without keeps it", ids: 4,
			steps: []relStep{logRels(20), ddlRan(s1), logRels(3), ddlRan(nil), logRels(2)}, held: 25, ddlSeq: 2, synced: s1},
		{name: "a later DDL with synced replaces them", ids: 4,
			steps: []relStep{ddlRan(s1), logRels(3), ddlRan(s2)}, held: 3, ddlSeq: 2, synced: s2},
		{name: "a DDL marks folded descriptions too", ids: 5,
			steps: []relStep{logRels(2 * relTrimAt), foldAt(relTrimAt + 3), ddlRan(s1), logRels(7)},
			base:  relTrimAt + 3, held: relTrimAt + 4, long: true, ddlSeq: 1, synced: s1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := &relModel{ids: tt.ids}
			m.run(t, tt.steps)
			if m.l.base != tt.base || len(m.l.rels) != tt.held || m.l.long() != tt.long {
				t.Fatalf("log folded up to %d holding %d (long %v), want %d holding %d (long %v)",
					m.l.base, len(m.l.rels), m.l.long(), tt.base, tt.held, tt.long)
			}
			if m.l.ddlSeq != tt.ddlSeq || !maps.Equal(m.l.synced, tt.synced) || (m.l.synced == nil) != (tt.synced == nil) {
				t.Fatalf("ddlSeq %d synced %v, want %d %v", m.l.ddlSeq, m.l.synced, tt.ddlSeq, tt.synced)
			}
			seq := m.l.seq()
			for from := 0; from <= seq; from += max(1, seq/47) {
				for upto := m.l.base; upto <= seq; upto += max(1, seq/43) {
					m.checkCatchUp(t, from, upto)
				}
				m.checkCatchUp(t, from, seq)
			}
			for _, c := range tt.catchUps {
				m.checkCatchUp(t, c[0], c[1])
			}
			if c := m.l.catchUp(seq, seq); len(c.rels) != 0 || c.ddlSeq != tt.ddlSeq {
				t.Fatalf("a worker up to date gets %d descriptions and ddlSeq %d, want none and %d", len(c.rels), c.ddlSeq, tt.ddlSeq)
			}
		})
	}
}
