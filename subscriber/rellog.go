package subscriber

import (
	"slices"

	"github.com/parapply/parapply"
)

// relLog is the pool's log of relation messages, and of the DDLs run on the
// target, that its workers load before they apply a unit.
//
// Invariant: entry n (counting from 0, in stream order, over the whole run)
// is the n-th relation message the reader met. A worker that has loaded the
// entries before from, and is to apply a unit whose first message follows
// the upto-th entry, gets from catchUp a list whose last description of each
// relation is the latest of those before upto: the entries from..upto when
// they are all still held, else every folded relation and every entry held
// before upto. Entries before base, which no unit still to apply starts
// before, are folded into the latest description of each relation
// (folded): the log does not grow for ever, and no worker ever needs one of
// them on its own.
//
// ddlSeq counts the DDLs run on the target: it only grows, and each one
// marks every description logged so far as described before a DDL
// (beforeDDL) and, when the DDL gave one, replaces synced (the tables whose
// copy ended, with the position each is applied from).
//
// relLog is not safe for concurrent use: the pool's mutex guards it.
type relLog struct {
	rels   []*parapply.Relation // entries base.. in stream order
	base   int
	folded map[uint32]*parapply.Relation
	ddlSeq int
	synced map[string]parapply.LSN
	// beforeDDL holds the descriptions logged before the last DDL: one the
	// target no longer matches is passed over (a change to its table comes
	// after a newer description: the publisher sends one after every
	// change of a table's definition).
	beforeDDL map[*parapply.Relation]bool
}

// relTrimAt is how many relation messages the log holds before those no
// unit needs any more are folded.
const relTrimAt = 1024

// relCatchUp is what a worker loads before a unit: the relation messages
// logged since its last, and the DDL state it must match.
type relCatchUp struct {
	rels      []*parapply.Relation
	ddlSeq    int
	synced    map[string]parapply.LSN
	beforeDDL map[*parapply.Relation]bool
}

// append logs a relation message and returns the number of messages logged.
func (l *relLog) append(rel *parapply.Relation) int {
	l.rels = append(l.rels, rel)
	return l.base + len(l.rels)
}

// seq returns the number of relation messages logged.
func (l *relLog) seq() int { return l.base + len(l.rels) }

// long reports whether the log holds enough entries to be worth folding
// (see fold): the caller then finds the oldest unit's start.
func (l *relLog) long() bool { return len(l.rels) >= relTrimAt }

// fold folds the entries before upto, the start of the oldest unit still
// to apply, when there are at least relTrimAt/2 of them.
func (l *relLog) fold(upto int) {
	if upto-l.base < relTrimAt/2 {
		return
	}
	if l.folded == nil {
		l.folded = map[uint32]*parapply.Relation{}
	}
	for _, r := range l.rels[:upto-l.base] {
		l.folded[r.ID] = r
	}
	l.rels = slices.Clone(l.rels[upto-l.base:])
	l.base = upto
}

// upTo returns the relation messages a worker that has loaded the first
// from must load before it applies a unit starting at upto: those in
// between, or, when some of them were folded (or the worker applied a later
// unit, commit_order = dependency), the folded ones and every one logged
// before upto.
func (l *relLog) upTo(from, upto int) []*parapply.Relation {
	if from > upto || from < l.base {
		out := make([]*parapply.Relation, 0, len(l.folded)+upto-l.base)
		for _, r := range l.folded {
			out = append(out, r)
		}
		return append(out, l.rels[:upto-l.base]...)
	}
	return l.rels[from-l.base : upto-l.base]
}

// catchUp returns what a worker that has loaded the first from entries
// loads before a unit starting at upto (see upTo), with the DDL state.
func (l *relLog) catchUp(from, upto int) relCatchUp {
	return relCatchUp{rels: l.upTo(from, upto), ddlSeq: l.ddlSeq, synced: l.synced, beforeDDL: l.beforeDDL}
}

// targetChanged notes a DDL run on the target; synced, when set, is the
// new list of synced tables.
func (l *relLog) targetChanged(synced map[string]parapply.LSN) {
	l.ddlSeq++
	l.beforeDDL = map[*parapply.Relation]bool{}
	for _, r := range l.rels {
		l.beforeDDL[r] = true
	}
	for _, r := range l.folded {
		l.beforeDDL[r] = true
	}
	if synced != nil {
		l.synced = synced
	}
}
