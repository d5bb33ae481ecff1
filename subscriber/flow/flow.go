// Package flow holds the stream loop's exactly-once decisions, apart from
// its I/O: which source transactions the target has already (the progress
// row's commit LSN and the ranges of parapply.applied), which ones a skip
// request names, a BEGIN held until the next message shows its origin,
// where a group of source transactions ends, one-by-one mode after a group
// that failed, and the state of prepared, streamed and DDL-holding
// transactions. A Core reads no clock, opens no connection and logs
// nothing: the subscriber's loop feeds it the decoded messages and what
// its own I/O found (a group's size and age, a prepared transaction on the
// target), and does what it answers.
package flow

import (
	"fmt"
	"time"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/pgoutput"
)

// Txn is a source transaction as the loop applies it; its fields are
// apply.Txn's, in the same order, so that the loop converts one into the
// other at no cost.
type Txn struct {
	XID        parapply.XID
	CommitLSN  parapply.LSN
	CommitTime time.Time
	// Origin names where the publisher got the transaction ("" when made
	// there).
	Origin string
	// Failed is the error on_error met applying it in an earlier run: its
	// changes are logged instead of applied.
	Failed string
	// Skip: parapply skip named it; none of its changes is applied.
	Skip bool
	// SkipDDL: parapply skip --ddl named it; its DDL is passed over.
	SkipDDL bool
}

// Range is a run of source transactions, by commit LSN, that a group
// committed ahead of the progress row (parapply.applied).
type Range struct{ First, Last parapply.LSN }

// SkipRequest is a pending request of parapply.skip: the commit LSN it
// names and, when on_error made it, the error met.
type SkipRequest struct {
	LSN    parapply.LSN
	Reason string
}

// SkipDDLReason is the reason of a request made by parapply skip --ddl (as
// progress.SkipDDL): only the transaction's DDL is passed over.
const SkipDDLReason = "parapply skip --ddl: its DDL only"

// Hold says what BEGIN the core holds until the next message: a held
// transaction begins once that message shows whether an Origin names
// where the publisher got it.
type Hold uint8

// The BEGINs a core may hold.
const (
	HoldNone    Hold = iota // no BEGIN held
	HoldBegin               // a BEGIN
	HoldPrepare             // a BEGIN PREPARE (two-phase)
)

// Limits are the group limits (group_max_changes, group_max_bytes,
// group_max_delay).
type Limits struct {
	MaxChanges int
	MaxBytes   int
	MaxDelay   time.Duration
}

// Start is what a run knows when it starts: the target's record of what
// it applied and was asked to skip, and the one-by-one mark of the run
// before.
type Start struct {
	// SkipBelow is the commit LSN of the progress row: every transaction
	// committed at or before it is applied.
	SkipBelow parapply.LSN
	// Ahead are the groups committed past SkipBelow, in order.
	Ahead []Range
	// Skips are the pending skip requests, in commit order.
	Skips []SkipRequest
	// OneByOne, when not zero, is the last commit LSN of a group that
	// failed as one: until past it, each transaction is a group alone.
	OneByOne parapply.LSN
	Limits   Limits
}

// NoteKind says what a Note tells.
type NoteKind uint8

// The notes a Core leaves for the loop to log (and count).
const (
	// NoteSkipMissed: no transaction committed at a skip request's LSN
	// (Skip); the next one commits at Txn.CommitLSN.
	NoteSkipMissed NoteKind = iota + 1
	// NoteSkipDDL: the DDL of Txn is passed over, as skip --ddl asked.
	NoteSkipDDL
	// NoteSkipped: Txn is skipped as parapply skip asked (counted).
	NoteSkipped
	// NoteSkippedFailed: Txn is skipped as on_error asked, its changes
	// logged (counted); Txn.Failed is the error.
	NoteSkippedFailed
)

// Note is something a Core decided that the loop logs: a skip request met
// or passed by.
type Note struct {
	Kind NoteKind
	Skip parapply.LSN // NoteSkipMissed: the request's LSN
	Txn  Txn
}

// EndStep is what the loop does at the COMMIT of a source transaction.
type EndStep uint8

// The ends of a source transaction.
const (
	// EndSkipped: the transaction was skipped (the target has it): make
	// sure nothing taken is left uncommitted, then the tracker reaches
	// its end.
	EndSkipped EndStep = iota + 1
	// EndTaken: the sink ends it; then ask Full whether its group ends.
	EndTaken
	// EndCommitGroup: the sink ends it, and its group commits (it ran
	// DDL).
	EndCommitGroup
	// EndDDLBack: the sink ends it, its group commits on the reader and
	// the stream goes back to the workers (see MovedToReader).
	EndDDLBack
)

// DDLStep is what the loop does with a DDL message of the open transaction.
type DDLStep uint8

// The fates of a DDL message.
const (
	DDLDrop     DDLStep = iota + 1 // the transaction is skipped: nothing
	DDLPassOver                    // skip --ddl: warn and pass over
	DDLNotRun                      // on_error skips the transaction: warn, not run
	DDLRun                         // run it
)

// Core holds the loop's exactly-once state. Not goroutine safe; the zero
// value is not ready: use New.
type Core struct {
	skipBelow parapply.LSN
	ahead     []Range
	skips     []SkipRequest
	skipSeen  parapply.LSN
	oneByOne  parapply.LSN
	limits    Limits

	hold Hold
	held Txn

	txn      Txn
	inTxn    bool
	skipping bool

	inStream  bool
	streamXID parapply.XID

	ddlRan   bool
	ddlMoved bool

	notes []Note
}

// New makes the core of a run.
func New(s Start) *Core {
	return &Core{skipBelow: s.SkipBelow, ahead: s.Ahead, skips: s.Skips, oneByOne: s.OneByOne, limits: s.Limits}
}

// Applied reports whether the transaction committed at commitLSN was
// applied before this run started. Transactions arrive in commit order, so
// ranges behind it are dropped as it goes.
func (c *Core) Applied(commitLSN parapply.LSN) bool {
	if commitLSN <= c.skipBelow {
		return true
	}
	for len(c.ahead) > 0 && c.ahead[0].Last < commitLSN {
		c.ahead = c.ahead[1:]
	}
	return len(c.ahead) > 0 && c.ahead[0].First <= commitLSN
}

// Ahead is what is left of the ranges committed ahead of the progress row.
func (c *Core) Ahead() []Range { return c.ahead }

// Hold holds the BEGIN (h) of txn until the next message.
func (c *Core) Hold(h Hold, txn Txn) { c.held, c.hold = txn, h }

// Holding says what BEGIN is held.
func (c *Core) Holding() Hold { return c.hold }

// Held is the transaction whose BEGIN is held.
func (c *Core) Held() Txn { return c.held }

// Release ends the hold: the held transaction, with origin (from an Origin
// message; "" for none), is to begin now.
func (c *Core) Release(origin string) (Txn, Hold) {
	txn, h := c.held, c.hold
	c.hold = HoldNone
	if origin != "" {
		txn.Origin = origin
	}
	return txn, h
}

// Begin opens a source transaction: skipped when the target has it,
// otherwise taken (skip false), marked as a skip request asks. Notes says
// what to log of the requests it met.
func (c *Core) Begin(txn Txn) (Txn, bool, error) {
	if c.Applied(txn.CommitLSN) {
		return txn, true, c.start(txn, true)
	}
	c.SkipAsked(&txn)
	return txn, false, c.start(txn, false)
}

// BeginPrepared opens a transaction prepared for two-phase commit,
// skipped when the target has it (applied, or prepared by an earlier run:
// the loop asks the target when Applied says no).
func (c *Core) BeginPrepared(txn Txn, skip bool) error { return c.start(txn, skip) }

func (c *Core) start(txn Txn, skip bool) error {
	if c.inTxn {
		return fmt.Errorf("BEGIN of transaction %d inside transaction %d (protocol error)", txn.XID, c.txn.XID)
	}
	c.txn, c.inTxn, c.skipping = txn, true, skip
	return nil
}

// SkipAsked reports whether txn is a transaction parapply skip named, and
// marks it so (Txn.Skip): it is then taken by the sink as an empty
// transaction, none of its changes applied, and the target transaction
// that commits it marks the request done (a group that fails takes the
// mark with it, and the next try skips it again). A request that no
// transaction matched (the stream passed its LSN) is dropped with a note;
// the next start removes it from the target. It may be asked again about
// the same transaction: each request is noted once.
//
// A transaction on_error skips is marked Failed instead (and false
// returned): its changes are logged in place of being applied.
func (c *Core) SkipAsked(txn *Txn) bool {
	for len(c.skips) > 0 && c.skips[0].LSN < txn.CommitLSN {
		if c.skips[0].LSN != c.skipSeen {
			c.notes = append(c.notes, Note{Kind: NoteSkipMissed, Skip: c.skips[0].LSN, Txn: *txn})
		}
		c.skips = c.skips[1:]
	}
	if len(c.skips) == 0 || c.skips[0].LSN != txn.CommitLSN {
		return false
	}
	reason := c.skips[0].Reason
	if reason == SkipDDLReason {
		if c.skipSeen != txn.CommitLSN {
			c.skipSeen = txn.CommitLSN
			c.notes = append(c.notes, Note{Kind: NoteSkipDDL, Txn: *txn})
		}
		txn.SkipDDL = true
		return false
	}
	if c.skipSeen != txn.CommitLSN {
		c.skipSeen = txn.CommitLSN
		n := Note{Kind: NoteSkipped, Txn: *txn}
		if reason != "" {
			n.Kind, n.Txn.Failed = NoteSkippedFailed, reason
		}
		c.notes = append(c.notes, n)
	}
	if reason != "" {
		txn.Failed = reason
		return false
	}
	txn.Skip = true
	return true
}

// Notes returns what the core decided to log since the last call; the
// slice is the core's, valid until its next call.
func (c *Core) Notes() []Note {
	n := c.notes
	c.notes = c.notes[:0]
	return n
}

// Change reports whether a row change (or truncate) of the open
// transaction is taken (false: dropped, the transaction is skipped).
func (c *Core) Change() bool { return !c.skipping && !c.txn.Skip }

// Txn is the open (or last) source transaction.
func (c *Core) Txn() Txn { return c.txn }

// InTxn reports whether a source transaction is open.
func (c *Core) InTxn() bool { return c.inTxn }

// Skipping reports whether the open transaction is skipped (the target
// has it).
func (c *Core) Skipping() bool { return c.skipping }

// MayRunAlone reports whether the held BEGIN's transaction may run a DDL
// that refuses a transaction block on its own: the target does not have
// it and no skip request names it.
func (c *Core) MayRunAlone() bool {
	lsn := c.held.CommitLSN
	if c.Applied(lsn) {
		return false
	}
	for _, r := range c.skips {
		if r.LSN == lsn {
			return false
		}
	}
	return true
}

// DDL says what becomes of a DDL message of the open transaction.
func (c *Core) DDL() DDLStep {
	switch {
	case c.skipping || c.txn.Skip:
		return DDLDrop
	case c.txn.SkipDDL:
		return DDLPassOver
	case c.txn.Failed != "":
		return DDLNotRun
	}
	return DDLRun
}

// DDLRan notes that the open transaction ran DDL on the target: its group
// ends with it (what the DDL made may not be used in the transaction
// that made it).
func (c *Core) DDLRan() { c.ddlRan = true }

// MovedToReader notes that the open transaction, which holds DDL, moved
// from the workers to the reader: at its end the stream goes back.
func (c *Core) MovedToReader() { c.ddlMoved = true }

// Commit ends the open source transaction (at its COMMIT, a stream's
// commit, or a prepared transaction's end) and says how.
func (c *Core) Commit() EndStep {
	c.inTxn = false
	switch {
	case c.skipping:
		c.skipping = false
		return EndSkipped
	case c.ddlMoved:
		c.ddlMoved, c.ddlRan = false, false
		return EndDDLBack
	case c.ddlRan:
		c.ddlRan = false
		return EndCommitGroup
	}
	return EndTaken
}

// Full reports whether the group that the ended transaction is in commits
// now: given its changes, bytes, age, and the sink's bound on changes
// (maxChanges: group_max_changes as the sink takes it).
func (c *Core) Full(changes, bytes int, age time.Duration, maxChanges int) bool {
	return maxChanges <= 1 || c.oneByOne != 0 || changes >= maxChanges || bytes >= c.limits.MaxBytes || age >= c.limits.MaxDelay
}

// Limits are the group limits.
func (c *Core) Limits() Limits { return c.limits }

// PastOneByOne reports whether the transaction just committed passes the
// group that failed: the run ends, and the next one groups again.
func (c *Core) PastOneByOne() bool { return c.oneByOne != 0 && c.txn.CommitLSN >= c.oneByOne }

// Prepare ends the open prepared transaction at its PREPARE; skipped
// reports that the target has it (nothing to prepare).
func (c *Core) Prepare() (skipped bool) {
	c.inTxn = false
	skipped, c.skipping = c.skipping, false
	return skipped
}

// FinishPrepared reports whether COMMIT PREPARED (commit) or ROLLBACK
// PREPARED of the transaction committed at commitLSN runs on the target:
// not a commit the target has already.
func (c *Core) FinishPrepared(commit bool, commitLSN parapply.LSN) bool {
	return !commit || !c.Applied(commitLSN)
}

// StreamStart opens a block of the streamed transaction xid.
func (c *Core) StreamStart(xid parapply.XID) { c.inStream, c.streamXID = true, xid }

// StreamStop closes the stream block.
func (c *Core) StreamStop() { c.inStream = false }

// InStream reports whether a stream block is open.
func (c *Core) InStream() bool { return c.inStream }

// StreamXID is the transaction of the open (or last) stream block.
func (c *Core) StreamXID() parapply.XID { return c.streamXID }

// KeepInflight reports whether what was applied of the streamed
// transaction txn in flight is committed: not when the target has it or a
// skip request names it (txn is marked as SkipAsked marks it).
func (c *Core) KeepInflight(txn *Txn) bool {
	return !c.Applied(txn.CommitLSN) && !c.SkipAsked(txn) && txn.Failed == ""
}

// Between reports whether the loop is between source transactions: none
// open, no BEGIN held, no stream block open (the loop adds: no streamed
// transaction pending).
func (c *Core) Between() bool { return !c.inTxn && !c.inStream && c.hold == HoldNone }

// WholeAbort reports whether a stream abort ends the whole streamed
// transaction (not one of its subtransactions).
func WholeAbort(m *pgoutput.StreamAbort) bool { return m.SubXID == m.XID || m.SubXID == 0 }
