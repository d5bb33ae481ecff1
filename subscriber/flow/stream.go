package flow

import "github.com/parapply/parapply"

// Stream is what the loop decides of a transaction the publisher streams
// before it commits; the loop keeps its spill file and inflight applier
// beside it.
type Stream struct {
	// First is the spill file offset of each subtransaction's first
	// change.
	First map[parapply.XID]int64
	// FirstLSN is the position of its first change.
	FirstLSN parapply.LSN
	// AtCommit is set once the stream is to be applied at its commit only.
	AtCommit bool
	// Settled is set once what the loop held before the current stream
	// block is committed.
	Settled bool
	// DDL is set once a DDL message came: applied at its commit, its
	// relation messages loaded then.
	DDL bool
	// Origin names where the publisher got the transaction ("" when made
	// there).
	Origin string
}

// NewStream is a stream whose first block starts.
func NewStream() *Stream { return &Stream{First: map[parapply.XID]int64{}} }

// Spilled notes a change of subtransaction xid stored at offset off of the
// spill file, received at walStart.
func (s *Stream) Spilled(xid parapply.XID, off int64, walStart parapply.LSN) {
	if _, ok := s.First[xid]; !ok {
		s.First[xid] = off
	}
	if s.FirstLSN == 0 {
		s.FirstLSN = walStart
	}
}

// MarkDDL notes a DDL message in the stream: it is applied at its commit.
func (s *Stream) MarkDDL() { s.DDL, s.AtCommit = true, true }

// Cut forgets the aborted subtransaction sub and every one that began
// after it: the spill file is cut at the offset returned (ok false: sub
// stored nothing, nothing to cut).
func (s *Stream) Cut(sub parapply.XID) (int64, bool) {
	cut, ok := s.First[sub]
	if !ok {
		return 0, false
	}
	for x, off := range s.First {
		if off >= cut {
			delete(s.First, x)
		}
	}
	return cut, true
}
