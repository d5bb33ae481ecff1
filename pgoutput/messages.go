package pgoutput

import (
	"time"

	"github.com/parapply/parapply"
)

// Message is any decoded pgoutput message; Decode returns one of the pointer
// types below (*Begin, *Insert, ...), so callers dispatch with a type switch.
type Message interface{ msg() }

// Begin opens a transaction that the publisher sends whole, after it
// committed (tag 'B').
type Begin struct {
	FinalLSN   parapply.LSN // LSN of the transaction's commit record
	CommitTime time.Time
	XID        parapply.XID
}

// Commit closes the transaction opened by the last Begin (tag 'C').
type Commit struct {
	Flags      uint8 // unused by PostgreSQL so far, always 0
	CommitLSN  parapply.LSN
	EndLSN     parapply.LSN // end of the commit record: the position to confirm
	CommitTime time.Time
}

// Origin names the replication origin a transaction came from, so loops
// between nodes can be broken (tag 'O').
type Origin struct {
	CommitLSN parapply.LSN // commit LSN on the origin server
	Name      string
}

// RelationMessage describes a published table before the first change to it
// and again whenever its definition changes (tag 'R').
type RelationMessage struct {
	XID      parapply.XID // 0 unless sent inside a stream
	Relation parapply.Relation
}

// TypeMessage names a non-built-in data type used by a following relation
// (tag 'Y').
type TypeMessage struct {
	XID       parapply.XID // 0 unless sent inside a stream
	OID       uint32
	Namespace string // "pg_catalog" when the publisher sent an empty name
	Name      string
}

// Insert carries a new row (tag 'I').
type Insert struct {
	XID        parapply.XID // 0 unless sent inside a stream
	RelationID uint32
	New        parapply.Tuple
}

// Update carries the new row and, when the key changed or the table has
// REPLICA IDENTITY FULL, the old key or row (tag 'U').
type Update struct {
	XID        parapply.XID // 0 unless sent inside a stream
	RelationID uint32
	// OldKind is 0 when no old tuple was sent, 'K' when Old holds only the
	// replica identity key columns (others are null), 'O' for the whole row.
	OldKind byte
	Old     parapply.Tuple // nil when OldKind == 0
	New     parapply.Tuple
}

// Delete carries the key ('K') or whole row ('O') of a deleted row (tag 'D').
type Delete struct {
	XID        parapply.XID // 0 unless sent inside a stream
	RelationID uint32
	OldKind    byte // 'K' or 'O'
	Old        parapply.Tuple
}

// Truncate lists the relations truncated by one TRUNCATE command (tag 'T').
type Truncate struct {
	XID             parapply.XID // 0 unless sent inside a stream
	Cascade         bool
	RestartIdentity bool
	RelationIDs     []uint32
}

// LogicalMessage is a message written with pg_logical_emit_message and sent
// because the subscriber asked for messages (tag 'M').
type LogicalMessage struct {
	XID           parapply.XID // 0 unless sent inside a stream
	Transactional bool
	LSN           parapply.LSN
	Prefix        string
	Content       []byte // aliases the buffer given to Decode
}

// StreamStart opens a chunk of a large in-progress transaction (tag 'S').
type StreamStart struct {
	XID   parapply.XID
	First bool // first chunk of this transaction
}

// StreamStop closes the chunk opened by the last StreamStart (tag 'E').
type StreamStop struct{}

// StreamCommit commits a streamed transaction (tag 'c').
type StreamCommit struct {
	XID        parapply.XID
	Flags      uint8 // unused by PostgreSQL so far, always 0
	CommitLSN  parapply.LSN
	EndLSN     parapply.LSN
	CommitTime time.Time
}

// StreamAbort aborts a streamed transaction, or only one of its
// subtransactions when SubXID differs from XID (tag 'A').
type StreamAbort struct {
	XID    parapply.XID
	SubXID parapply.XID
	// AbortLSN and AbortTime are set, and HasAbortLSN is true, only with
	// protocol version 4 and streaming = parallel.
	AbortLSN    parapply.LSN
	AbortTime   time.Time
	HasAbortLSN bool
}

// BeginPrepare opens a transaction that will be prepared for two-phase
// commit (tag 'b').
type BeginPrepare struct {
	PrepareLSN  parapply.LSN
	EndLSN      parapply.LSN
	PrepareTime time.Time
	XID         parapply.XID
	GID         string
}

// Prepare ends a transaction opened by BeginPrepare with PREPARE
// TRANSACTION (tag 'P').
type Prepare struct {
	Flags       uint8 // unused by PostgreSQL so far, always 0
	PrepareLSN  parapply.LSN
	EndLSN      parapply.LSN
	PrepareTime time.Time
	XID         parapply.XID
	GID         string
}

// CommitPrepared commits a previously prepared transaction (tag 'K').
type CommitPrepared struct {
	Flags      uint8 // unused by PostgreSQL so far, always 0
	CommitLSN  parapply.LSN
	EndLSN     parapply.LSN
	CommitTime time.Time
	XID        parapply.XID
	GID        string
}

// RollbackPrepared rolls back a previously prepared transaction (tag 'r').
type RollbackPrepared struct {
	Flags          uint8 // unused by PostgreSQL so far, always 0
	PrepareEndLSN  parapply.LSN
	RollbackEndLSN parapply.LSN
	PrepareTime    time.Time
	RollbackTime   time.Time
	XID            parapply.XID
	GID            string
}

// StreamPrepare prepares a streamed transaction for two-phase commit
// (tag 'p'); its fields are those of Prepare.
type StreamPrepare Prepare

func (*Begin) msg()            {}
func (*Commit) msg()           {}
func (*Origin) msg()           {}
func (*RelationMessage) msg()  {}
func (*TypeMessage) msg()      {}
func (*Insert) msg()           {}
func (*Update) msg()           {}
func (*Delete) msg()           {}
func (*Truncate) msg()         {}
func (*LogicalMessage) msg()   {}
func (*StreamStart) msg()      {}
func (*StreamStop) msg()       {}
func (*StreamCommit) msg()     {}
func (*StreamAbort) msg()      {}
func (*BeginPrepare) msg()     {}
func (*Prepare) msg()          {}
func (*CommitPrepared) msg()   {}
func (*RollbackPrepared) msg() {}
func (*StreamPrepare) msg()    {}
