// Package source is the publisher side: the replication connection
// (conn.go), the checks that make a bad setup fail fast with a clear error,
// worded by package preflight's judgements (checks.go), the logical slot
// (slot.go), the tables the publications send (published.go), and the
// stream of pgoutput messages with its standby status updates (stream.go;
// paced.go paces its reads).
package source

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/enum"
)

// Config says where to read from and what to ask the publisher for.
type Config struct {
	DSN          string
	Slot         string
	Publications []string
	// ProtoVersion is the pgoutput protocol version; 0 picks the highest
	// the publisher supports (3 on 15, 4 on 16 and later; 14, whose 2 parapply could speak, is refused as untested).
	ProtoVersion int
	// Streaming asks the publisher to stream large in-progress transactions.
	Streaming bool
	// Binary asks for binary tuple data (see SetBinary).
	Binary bool
	// TwoPhase asks for prepared transactions as they are prepared
	// (protocol 3 and later), not only once they commit.
	TwoPhase bool
	// Origin is OriginNone to receive only the changes made on the
	// publisher itself, not those replicated to it (pgoutput's origin
	// option, PostgreSQL 16 and later); "" or OriginAny for all.
	Origin Origin
	// AppName is shown in the publisher's pg_stat_replication.
	AppName string
	// DecodingWorkMem, if set, is the publisher session's
	// logical_decoding_work_mem: how much of an in-progress transaction
	// the publisher holds before it streams it (with Streaming).
	DecodingWorkMem string
	// StatusInterval bounds the time between standby status updates.
	StatusInterval time.Duration
	// Prompt, when set and true, asks for every read to be made as soon as
	// data arrives (a synchronous publisher waits on the replies); reads
	// inside large transactions may still be paced.
	Prompt *atomic.Bool
	// Failover makes the slot a failover slot on PostgreSQL 17 and later
	// (created so, or an existing one altered): a standby with
	// sync_replication_slots keeps a copy of it, from which parapply goes
	// on once that standby is promoted. Ignored before 17.
	Failover bool
	// ExportSnapshot, when the slot is created, exports its snapshot for
	// the initial copy (Source.Snapshot); the connection must then stay
	// idle until the copy is done.
	ExportSnapshot bool
	// Unpaced keeps the replication socket in Go's poller, read as data
	// comes, instead of paced reads (see pacedConn): for diagnosis and
	// measurement (the commands set it from PARAPPLY_PACED=off).
	Unpaced bool
	// NoTrickle makes paced reads pause before every read, even while the
	// receive window is closed (see paced): for measurement (the commands
	// set it from PARAPPLY_TRICKLE=off).
	NoTrickle bool
}

// Origin says which changes the publisher sends, as CREATE SUBSCRIPTION's
// origin option (the origin setting).
type Origin string

// Values of Config.Origin, as CREATE SUBSCRIPTION's origin option.
const (
	OriginAny  Origin = "any"
	OriginNone Origin = "none"
)

// Origins lists the origin setting's values, for ParseOrigin and the help
// text.
var Origins = []Origin{OriginAny, OriginNone}

// ParseOrigin reads the origin setting, naming it and its values when s is
// none of them.
func ParseOrigin(s string) (Origin, error) { return enum.Parse("origin", s, Origins) }

// Source is an open replication connection to the publisher.
type Source struct {
	cfg           Config
	conn          *pgconn.PgConn
	ServerVersion int    // e.g. 180006
	SystemID      string // the publisher's system identifier
	Database      string
	Proto         int // negotiated pgoutput protocol version
	// Missing is true when Connect found no slot of the name: CreateSlot
	// creates it, once every check that can refuse the start has passed
	// (a slot left behind by a refused start holds WAL for nobody). Connect
	// changes nothing on the publisher: an existing slot is made a
	// failover slot by MakeFailover, after those checks too.
	Missing bool
	// Created is true once CreateSlot created the slot.
	Created bool
	// Snapshot and ConsistentPoint are set when CreateSlot created the slot
	// with an exported snapshot.
	Snapshot        string
	ConsistentPoint parapply.LSN
	// Confirmed is the slot's confirmed flush position when Connect found
	// or CreateSlot created it: what the publisher is told as flushed until a
	// position of parapply's own is durable.
	Confirmed parapply.LSN
	// WALAtConnect is the publisher's flushed WAL end when the run
	// connected (IDENTIFY_SYSTEM): every change it ever sent lies before.
	WALAtConnect parapply.LSN
	// FailoverSlot is true when the slot is a failover slot (PostgreSQL
	// 17 and later: pg_replication_slots.failover).
	FailoverSlot bool
	// Published lists what the publications send, read before the slot
	// was created.
	Published []PublishedTable

	walEnd atomic.Uint64
	// largeTxn is set inside a transaction or stream block with over
	// coalesceAfter row changes: reads may be paced there.
	largeTxn atomic.Bool
	// tap is what the connection's frontend reads through (see receive).
	tap *handover
}

// WALEnd is the publisher's WAL end as of its last message: how far behind
// everything received is, in bytes, for the lag figures. Safe to call from
// any goroutine.
func (s *Source) WALEnd() parapply.LSN { return parapply.LSN(s.walEnd.Load()) }

func (s *Source) sawWALEnd(l uint64) {
	if l > s.walEnd.Load() {
		s.walEnd.Store(l)
	}
}

// SourceID names the publisher database, for the progress row.
func (s *Source) SourceID() string { return s.SystemID + "/" + s.Database }

// Close ends the replication connection; the publisher can then stop
// without waiting for wal_sender_timeout.
func (s *Source) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.conn.Close(ctx)
}
