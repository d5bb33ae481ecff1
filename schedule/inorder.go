package schedule

// InOrder releases what units report in the order the units were added,
// whatever order the reports come in: a unit committed ahead of earlier ones
// (commit_order = dependency) is told to the progress tracker only once
// every earlier unit's report is in, so that positions only ever move to a
// point before which everything is applied. Not safe for concurrent use.
type InOrder[T any] struct {
	next    ID
	pending map[ID]T
}

// NewInOrder returns an InOrder expecting the report of unit 1 first.
func NewInOrder[T any]() *InOrder[T] {
	return &InOrder[T]{next: 1, pending: map[ID]T{}}
}

// Put takes unit id's report and appends to out, in unit order, every
// report that no earlier missing report holds back any more. A unit
// reports once; a second report of the same unit is an error of the
// caller's and panics.
func (o *InOrder[T]) Put(id ID, v T, out []T) []T {
	if _, dup := o.pending[id]; dup || id < o.next {
		panic("schedule: unit reported twice")
	}
	o.pending[id] = v
	for {
		r, ok := o.pending[o.next]
		if !ok {
			return out
		}
		delete(o.pending, o.next)
		o.next++
		out = append(out, r)
	}
}

// Waiting returns how many reports are held back.
func (o *InOrder[T]) Waiting() int { return len(o.pending) }
