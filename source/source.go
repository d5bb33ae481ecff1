// Package source is the publisher side: the replication connection, the
// checks that make a bad setup fail fast with a clear error, the logical slot,
// and the stream of pgoutput messages with its standby status updates.
package source

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/enum"
	"github.com/parapply/parapply/internal/nearest"
	"github.com/parapply/parapply/internal/pgerr"
)

// Config says where to read from and what to ask the publisher for.
type Config struct {
	DSN          string
	Slot         string
	Publications []string
	// ProtoVersion is the pgoutput protocol version; 0 picks the highest
	// the publisher supports (2 on 14, 3 on 15, 4 on 16 and later).
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

// Connect opens the replication connection and checks everything that would
// otherwise fail later: wal_level, the publications, the slot and whether
// another client holds it. It changes nothing on the publisher: the caller
// creates a missing slot (Missing) with CreateSlot, or makes an existing
// one a failover slot with MakeFailover, once its own checks have passed.
func Connect(ctx context.Context, cfg Config) (*Source, error) {
	pc, err := pgconn.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, pgerr.Parse("source", err)
	}
	pc.RuntimeParams["replication"] = "database"
	// Like the built-in subscriber: values come in a form any server parses back.
	pc.RuntimeParams["datestyle"] = "ISO"
	pc.RuntimeParams["intervalstyle"] = "postgres"
	pc.RuntimeParams["extra_float_digits"] = "3"
	// And as it sets a secure search_path: a value naming an object (a
	// regclass, which travels in text) comes schema-qualified, so that
	// the target reads the same object whatever its search_path.
	pc.RuntimeParams["search_path"] = ""
	if cfg.AppName != "" {
		pc.RuntimeParams["application_name"] = cfg.AppName
	}
	if cfg.DecodingWorkMem != "" {
		pc.RuntimeParams["logical_decoding_work_mem"] = cfg.DecodingWorkMem
	}
	src := &Source{}
	pc.DialFunc = src.coalescingDialer(pc.DialFunc)
	pc.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		src.tap = &handover{r: r}
		return pgproto3.NewFrontend(src.tap, w)
	}
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == pgerrcode.InsufficientPrivilege {
			return nil, fmt.Errorf("connecting to the source %s: %w; the source role needs the REPLICATION attribute (ALTER ROLE %s REPLICATION)", describe(pc), pgerr.Short(err), parapply.QuoteIdent(pc.User))
		}
		return nil, fmt.Errorf("connecting to the source %s: %w", describe(pc), pgerr.Short(err))
	}
	s := src
	s.cfg, s.conn, s.Database = cfg, conn, pc.Database
	if err := s.check(ctx); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return s, nil
}

func describe(pc *pgconn.Config) string {
	return fmt.Sprintf("(host %s port %d database %s user %s)", pc.Host, pc.Port, pc.Database, pc.User)
}

func (s *Source) query(ctx context.Context, sql string) ([][][]byte, error) {
	res, err := s.conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, nil
	}
	return res[len(res)-1].Rows, nil
}

func (s *Source) check(ctx context.Context) error {
	v, err := strconv.Atoi(s.conn.ParameterStatus("server_version_num"))
	if err != nil || v == 0 {
		rows, qerr := s.query(ctx, "SHOW server_version_num")
		if qerr != nil {
			// Wrapped: a lost connection here is a fault to ride out.
			return fmt.Errorf("reading the source's server version: %w", qerr)
		}
		if len(rows) != 1 {
			return fmt.Errorf("reading the source's server version: SHOW server_version_num returned %d rows", len(rows))
		}
		v, _ = strconv.Atoi(string(rows[0][0]))
	}
	s.ServerVersion = v
	if v < 140000 {
		return fmt.Errorf("source server is PostgreSQL %d; parapply needs 14 or newer", v/10000)
	}
	if s.cfg.Origin == OriginNone && v < 160000 {
		return fmt.Errorf("origin = none needs PostgreSQL 16 or later on the publisher (pgoutput's origin option); this one is %d: set origin = any", v/10000)
	}
	s.Proto = s.cfg.ProtoVersion
	if s.Proto == 0 {
		switch {
		case v >= 160000:
			s.Proto = 4
		case v >= 150000:
			s.Proto = 3
		default:
			s.Proto = 2
		}
	}
	sys, err := pglogrepl.IdentifySystem(ctx, s.conn)
	if err != nil {
		return fmt.Errorf("IDENTIFY_SYSTEM on the source: %w (the source role needs the REPLICATION attribute)", err)
	}
	s.SystemID = sys.SystemID
	s.WALAtConnect = parapply.LSN(sys.XLogPos)
	rows, err := s.query(ctx, "SHOW wal_level")
	if err != nil {
		return fmt.Errorf("reading wal_level on the source: %w", err)
	}
	if len(rows) == 1 && string(rows[0][0]) != "logical" {
		return fmt.Errorf("source wal_level is %s; set wal_level = logical in the publisher's postgresql.conf and restart it", rows[0][0])
	}
	if len(s.cfg.Publications) == 0 {
		return errors.New("no publication given; name one with --publication (CREATE PUBLICATION on the source first)")
	}
	if err := s.checkPublications(ctx); err != nil {
		return err
	}
	if s.Published, err = s.publishedTables(ctx); err != nil {
		return err
	}
	failover := "false"
	if s.ServerVersion >= failoverVersion {
		failover = "failover"
	}
	rows, err = s.query(ctx, "SELECT plugin, database, active_pid, slot_type, confirmed_flush_lsn, "+failover+" FROM pg_catalog.pg_replication_slots WHERE slot_name = "+parapply.QuoteLiteral(s.cfg.Slot))
	if err != nil {
		return fmt.Errorf("looking up slot %s: %w", s.cfg.Slot, err)
	}
	if len(rows) == 0 {
		s.Missing = true
		return nil
	}
	r := rows[0]
	if string(r[3]) != "logical" || string(r[0]) != "pgoutput" {
		return fmt.Errorf("slot %s exists but is a %s slot with plugin %s; parapply needs a logical pgoutput slot: choose another --slot", s.cfg.Slot, r[3], r[0])
	}
	if string(r[1]) != s.Database {
		return fmt.Errorf("slot %s belongs to database %s, not %s; choose another --slot", s.cfg.Slot, r[1], s.Database)
	}
	if r[2] != nil {
		return slotBusy{s.cfg.Slot, string(r[2])}
	}
	if r[4] != nil {
		if s.Confirmed, err = parapply.ParseLSN(string(r[4])); err != nil {
			return fmt.Errorf("slot %s: %w", s.cfg.Slot, err)
		}
	}
	s.FailoverSlot = string(r[5]) == "t"
	return nil
}

// MakeFailover makes the slot Connect found a failover slot if the config
// asks for one and it is not (made before failover was asked for, or by an
// older release), as ALTER SUBSCRIPTION ... SET (failover = true) does. The
// caller calls it once its own checks have passed, as it does CreateSlot:
// a refused start leaves the slot as it was.
func (s *Source) MakeFailover(ctx context.Context) error {
	if s.Missing || !s.cfg.Failover || s.ServerVersion < failoverVersion || s.FailoverSlot {
		return nil
	}
	if _, err := s.query(ctx, "ALTER_REPLICATION_SLOT "+parapply.QuoteIdent(s.cfg.Slot)+" (FAILOVER true)"); err != nil {
		return fmt.Errorf("making slot %s a failover slot on the source: %w (or set failover = off)", s.cfg.Slot, err)
	}
	s.FailoverSlot = true
	return nil
}

// failoverVersion is the first PostgreSQL with failover slots.
const failoverVersion = 170000

// ErrSlotBusy is wrapped by the error of a start that found the slot held
// by a walsender: a subscriber that was just killed may still hold it for a
// moment, so a caller may wait and try again.
var ErrSlotBusy = errors.New("slot in use")

// checkPublications refuses publications the source database lacks.
func (s *Source) checkPublications(ctx context.Context) error {
	rows, err := s.query(ctx, "SELECT pubname FROM pg_catalog.pg_publication")
	if err != nil {
		return fmt.Errorf("looking up publications %s: %w", strings.Join(s.cfg.Publications, ", "), err)
	}
	existing := make([]string, len(rows))
	for i, r := range rows {
		existing[i] = string(r[0])
	}
	for _, pub := range s.cfg.Publications {
		if !slices.Contains(existing, pub) {
			return missingPublication(pub, s.Database, existing)
		}
	}
	return nil
}

// missingPublication is the error of a publication the source database
// lacks: naming the one of existing it was likely meant to be, else the
// statement that creates it.
func missingPublication(pub, database string, existing []string) error {
	create := "CREATE PUBLICATION " + parapply.Ident(pub) + " FOR TABLE ..."
	if near := nearest.Name(pub, existing); near != "" {
		return fmt.Errorf("publication %s does not exist in source database %s; did you mean %s? (set --publication %s; or, if %s is meant, create it there with %s)", parapply.Ident(pub), database, parapply.Ident(near), near, parapply.Ident(pub), create)
	}
	return fmt.Errorf("publication %s does not exist in source database %s; create it there with %s", parapply.Ident(pub), database, create)
}

type slotBusy struct{ slot, pid string }

func (e slotBusy) Error() string {
	return fmt.Sprintf("slot %s is in use on the publisher (its walsender is pid %s there, serving another connection); stop that subscriber or choose another --slot", e.slot, e.pid)
}

func (e slotBusy) Is(target error) bool { return target == ErrSlotBusy }

// CreateSlot creates the slot (pgoutput) if Connect found it missing, with
// an exported snapshot if the config asks for one; the connection must then
// stay idle until the copy is done.
func (s *Source) CreateSlot(ctx context.Context) error {
	if !s.Missing {
		return nil
	}
	res, err := s.createSlot(ctx)
	if err != nil {
		return fmt.Errorf("creating replication slot %s on the source: %w (check max_replication_slots and that the role has REPLICATION)", s.cfg.Slot, err)
	}
	s.Missing, s.Created, s.Snapshot = false, true, res.SnapshotName
	if s.ConsistentPoint, err = parapply.ParseLSN(res.ConsistentPoint); err != nil {
		return fmt.Errorf("slot %s: %w", s.cfg.Slot, err)
	}
	s.Confirmed = s.ConsistentPoint
	return nil
}

// createSlot sends CREATE_REPLICATION_SLOT: with the option list and
// FAILOVER where the slot is to be a failover slot (PostgreSQL 17 and
// later), else in the form every supported version takes.
func (s *Source) createSlot(ctx context.Context) (pglogrepl.CreateReplicationSlotResult, error) {
	if !s.cfg.Failover || s.ServerVersion < failoverVersion {
		action := "NOEXPORT_SNAPSHOT"
		if s.cfg.ExportSnapshot {
			action = "EXPORT_SNAPSHOT"
		}
		return pglogrepl.CreateReplicationSlot(ctx, s.conn, parapply.QuoteIdent(s.cfg.Slot), "pgoutput",
			pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: action})
	}
	snapshot := "'nothing'"
	if s.cfg.ExportSnapshot {
		snapshot = "'export'"
	}
	rows, err := s.query(ctx, "CREATE_REPLICATION_SLOT "+parapply.QuoteIdent(s.cfg.Slot)+" LOGICAL pgoutput (SNAPSHOT "+snapshot+", FAILOVER true)")
	if err != nil {
		return pglogrepl.CreateReplicationSlotResult{}, err
	}
	if len(rows) != 1 || len(rows[0]) < 4 {
		return pglogrepl.CreateReplicationSlotResult{}, fmt.Errorf("CREATE_REPLICATION_SLOT returned %d rows", len(rows))
	}
	s.FailoverSlot = true
	r := rows[0]
	return pglogrepl.CreateReplicationSlotResult{SlotName: string(r[0]), ConsistentPoint: string(r[1]), SnapshotName: string(r[2]), OutputPlugin: string(r[3])}, nil
}

// DropSlot drops the slot cfg names over a replication connection of its
// own, waiting (as long as ctx allows) for a walsender that still holds it
// to let go: for a start that created the slot and was refused, so that no
// slot is left on the publisher holding WAL for nobody.
func DropSlot(ctx context.Context, cfg Config) error {
	pc, err := pgconn.ParseConfig(cfg.DSN)
	if err != nil {
		return pgerr.Parse("source", err)
	}
	pc.RuntimeParams["replication"] = "database"
	if cfg.AppName != "" {
		pc.RuntimeParams["application_name"] = cfg.AppName
	}
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return fmt.Errorf("connecting to the source %s: %w", describe(pc), pgerr.Short(err))
	}
	defer conn.Close(context.Background())
	if err := pglogrepl.DropReplicationSlot(ctx, conn, parapply.QuoteIdent(cfg.Slot), pglogrepl.DropReplicationSlotOptions{Wait: true}); err != nil {
		return fmt.Errorf("dropping replication slot %s on the source: %w", cfg.Slot, err)
	}
	return nil
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

// Frame is one message of the replication stream, handed from the reader to
// the applier. Data is owned by the receiver.
type Frame struct {
	// WALStart is the XLogData start position; for a keepalive, the
	// publisher's WAL end.
	WALStart parapply.LSN
	// Data is the pgoutput message; nil for a keepalive.
	Data []byte
	// ServerTime is the publisher's clock when it sent the frame.
	ServerTime time.Time
}

// Feedback supplies the positions reported to the publisher, and signals
// when they advance.
type Feedback interface {
	Positions() (applied, durable parapply.LSN, lastCommit time.Time)
	Moved() <-chan struct{}
}

// Stream starts replication at start (0: the slot's confirmed position) and
// delivers frames to out, in batches, until ctx ends or the connection
// fails. It sends a standby status update when the durable position moves
// (at most four times a second), every StatusInterval, and whenever the
// publisher asks.
//
// The hot path avoids per-message goroutines and timers: reads use a plain
// socket deadline instead of a cancellable context, and frames are handed
// over in slices, as many as have arrived while the applier was busy.
func (s *Source) Stream(ctx context.Context, start parapply.LSN, out chan<- []Frame, fb Feedback) error {
	args, err := s.pluginArgs()
	if err != nil {
		return err
	}
	s.tap.exact = true // see receive
	err = pglogrepl.StartReplication(ctx, s.conn, parapply.QuoteIdent(s.cfg.Slot), pglogrepl.LSN(start),
		pglogrepl.StartReplicationOptions{Mode: pglogrepl.LogicalReplication, PluginArgs: args})
	if err != nil {
		s.tap.exact = false
		return fmt.Errorf("START_REPLICATION on slot %s: %w", s.cfg.Slot, err)
	}
	interval := s.cfg.StatusInterval
	if interval <= 0 {
		interval = 10 * time.Second
	}
	// Cancelling ctx interrupts a blocked read.
	stop := context.AfterFunc(ctx, func() { _ = s.conn.Conn().SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	wctx, stopWake := context.WithCancel(ctx)
	defer stopWake()
	go s.wakeOnMove(wctx, fb)
	st := &streamReader{s: s, out: out, fb: fb, interval: interval, received: start}
	return st.read(ctx)
}

// SetBinary sets whether the stream asks for binary tuple data, once the
// published columns' types on both sides are known (before Stream).
func (s *Source) SetBinary(on bool) { s.cfg.Binary = on }

// Binary reports whether the stream asks for binary tuple data.
func (s *Source) Binary() bool { return s.cfg.Binary }

// pluginArgs are pgoutput's options for the settings: protocol,
// publications, and the streaming, binary, two-phase and origin modes.
func (s *Source) pluginArgs() ([]string, error) {
	args := []string{
		"proto_version '" + strconv.Itoa(s.Proto) + "'",
		"publication_names " + parapply.QuoteLiteral(quotePubs(s.cfg.Publications)),
		"messages 'true'",
	}
	if s.cfg.Streaming && s.Proto >= 2 {
		args = append(args, "streaming 'on'")
	}
	if s.cfg.Binary {
		args = append(args, "binary 'true'")
	}
	if s.cfg.TwoPhase {
		if s.Proto < 3 {
			return nil, fmt.Errorf("two_phase = on needs pgoutput protocol 3 (PostgreSQL 15 or later) on the publisher; this one speaks %d: turn two_phase off", s.Proto)
		}
		args = append(args, "two_phase 'on'")
	}
	if s.cfg.Origin == OriginNone {
		args = append(args, "origin 'none'")
	}
	return args, nil
}

// wakeOnMove wakes a blocked read when the positions advance, until ctx
// ends, so that the publisher hears of it at once, as it does from the
// built-in apply worker: a synchronous publisher's commits wait for
// exactly that.
func (s *Source) wakeOnMove(ctx context.Context, fb Feedback) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-fb.Moved():
			_ = s.conn.Conn().SetReadDeadline(time.Now())
		}
	}
}

// maxPending bounds the frames read ahead of the applier: past it, the
// reader waits for the applier to take them.
const maxPending = 4096

// minPending is the room a batch of pending frames starts with: a batch
// of a few frames grown by doubling copied them several times.
const minPending = 64

// streamReader is one Stream's state: the position received, what was last
// reported to the publisher, and the frames read but not yet handed over.
type streamReader struct {
	s        *Source
	out      chan<- []Frame
	fb       Feedback
	interval time.Duration
	received parapply.LSN
	txns     txnTracker

	sentDurable, sentApplied parapply.LSN
	lastSent                 time.Time
	pending                  []Frame
	// cr reads the stream once pgconn's read buffer is empty (see
	// receive); nil before.
	cr *copyReader
}

// send reports the positions to the publisher if they moved since the last
// report, if interval has passed since it, or if force.
func (st *streamReader) send(ctx context.Context, force bool) error {
	applied, durable, _ := st.fb.Positions()
	if !force && durable == st.sentDurable && applied == st.sentApplied && time.Since(st.lastSent) < st.interval {
		return nil
	}
	// pglogrepl reports the write position as flushed and applied when
	// those are zero: before anything of ours is durable, report the
	// slot's own confirmed position instead (or nothing at all).
	flush := max(durable, st.s.Confirmed)
	w := max(st.received, flush)
	if flush == 0 {
		w = 0
	}
	err := pglogrepl.SendStandbyStatusUpdate(ctx, st.s.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: pglogrepl.LSN(w),
		WALFlushPosition: pglogrepl.LSN(flush),
		WALApplyPosition: pglogrepl.LSN(max(applied, flush)),
	})
	if err != nil {
		return fmt.Errorf("sending standby status update: %w", err)
	}
	st.sentDurable, st.sentApplied, st.lastSent = durable, applied, time.Now()
	return nil
}

// handed is called once pending went out: the next batch starts in a
// batch the applier handed back (Recycle), else with room for as many
// frames (while the applier is busy, batches of hundreds of frames grew by
// doubling, each step copying frames that hold pointers).
func (st *streamReader) handed() {
	if p, ok := handedBack.Get().(*[]Frame); ok && cap(*p) >= len(st.pending) {
		st.pending = (*p)[:0]
		return
	}
	st.pending = make([]Frame, 0, max(len(st.pending), minPending))
}

// handedBack holds batches of frames their receiver is done with.
var handedBack sync.Pool

// Recycle hands back a batch of frames received from Stream once nothing
// refers to the batch any more (its frames' bytes, which are not in it,
// stay valid): the next batches reuse it instead of growing new ones.
func Recycle(batch []Frame) {
	clear(batch)
	batch = batch[:0]
	handedBack.Put(&batch)
}

// flush hands pending frames over; it blocks only when block is set, and
// keeps reporting status while it waits.
func (st *streamReader) flush(ctx context.Context, block bool) error {
	if len(st.pending) == 0 {
		return nil
	}
	select {
	case st.out <- st.pending:
		st.handed()
		return nil
	default:
	}
	if !block {
		return nil
	}
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case st.out <- st.pending:
			st.handed()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if err := st.send(ctx, false); err != nil {
				return err
			}
		}
	}
}

// read reads the stream until ctx ends or the connection fails. The read
// deadline wakes it to report status and, when frames are waiting for a
// busy applier, to retry handing them over. It is renewed every 64
// messages or after it fires, not per message.
func (st *streamReader) read(ctx context.Context) error {
	s := st.s
	var shortWait bool
	for n := 0; ; n++ {
		stuck := len(st.pending) > 0
		if n%64 == 0 || stuck != shortWait {
			wait := 250 * time.Millisecond
			if stuck {
				wait = 10 * time.Millisecond
			}
			shortWait = stuck
			_ = s.conn.Conn().SetReadDeadline(time.Now().Add(wait))
			if err := st.send(ctx, false); err != nil {
				return err
			}
		}
		data, err := st.receive()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) || errors.Is(err, os.ErrDeadlineExceeded) {
				n = -1 // renew the deadline and report status
				if err := st.flush(ctx, len(st.pending) >= maxPending); err != nil {
					return err
				}
				continue
			}
			return err
		}
		if len(data) == 0 {
			continue
		}
		if err := st.copyData(ctx, data); err != nil {
			return err
		}
		if err := st.flush(ctx, len(st.pending) >= maxPending); err != nil {
			return err
		}
	}
}

// receive returns the next CopyData message's payload, the caller's to
// keep (nothing writes over it). Replication starts with the connection's
// tap exact (handover), so pgconn's read buffer holds no bytes past the
// reply to START_REPLICATION: the copyReader then reads through the tap
// itself, and its payloads are kept as read. Should the buffer hold more
// (a notice read ahead), the first messages come from pgconn, copied out
// of the buffer it reuses, until it is empty. Other messages of the
// protocol are skipped (notices, parameter changes), or end the stream (an
// error, the end of the copy). A read's error is wrapped, a deadline's
// still recognisable (errors.Is, pgconn.Timeout).
func (st *streamReader) receive() ([]byte, error) {
	slot := st.s.cfg.Slot
	for st.cr == nil {
		if st.s.conn.Frontend().ReadBufferLen() == 0 {
			st.s.tap.exact = false
			st.cr = &copyReader{r: st.s.tap}
			break
		}
		msg, err := st.s.conn.ReceiveMessage(context.Background())
		if err != nil {
			return nil, fmt.Errorf("reading the replication stream of slot %s: %w", slot, err)
		}
		switch m := msg.(type) {
		case *pgproto3.CopyData:
			return bytes.Clone(m.Data), nil
		case *pgproto3.ErrorResponse:
			return nil, publisherError(slot, m)
		case *pgproto3.CopyDone:
			return nil, copyDone(slot)
		}
	}
	for {
		typ, body, err := st.cr.next()
		if err != nil {
			return nil, fmt.Errorf("reading the replication stream of slot %s: %w", slot, err)
		}
		switch typ {
		case 'd':
			return body, nil
		case 'E':
			var m pgproto3.ErrorResponse
			if err := m.Decode(body); err != nil {
				return nil, fmt.Errorf("publisher sent an unreadable error on slot %s: %w", slot, err)
			}
			return nil, publisherError(slot, &m)
		case 'c':
			return nil, copyDone(slot)
		}
	}
}

// publisherError is the error the publisher ended replication with.
func publisherError(slot string, m *pgproto3.ErrorResponse) error {
	err := fmt.Errorf("publisher ended replication on slot %s: %w", slot, pgconn.ErrorResponseToPgError(m))
	if m.Code == pgerrcode.UndefinedObject && strings.HasPrefix(m.Message, "publication ") {
		// Dropped while the slot had changes to decode after it
		// (PostgreSQL 17 and earlier; 18 decodes on, sending nothing).
		err = fmt.Errorf("%w; the publication was dropped while parapply ran: the slot cannot decode past the drop, even once it is created again; create it again as it was, then either move the slot past its creation (SELECT pg_replication_slot_advance('%s', pg_current_wal_lsn()) on the publisher: the changes since the drop are not replicated, find them with parapply verify) or start over with a new slot", err, slot)
	}
	return err
}

// copyDone is the publisher ending the copy without an error.
func copyDone(slot string) error {
	return fmt.Errorf("publisher ended the replication stream of slot %s", slot)
}

// copyData takes one message of the stream: a keepalive (answered at once
// if the publisher asks, after what was read before it is handed over) or
// XLogData; both become pending frames, an XLogData's bytes the frame's
// as they are.
func (st *streamReader) copyData(ctx context.Context, data []byte) error {
	s := st.s
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("bad keepalive from the publisher: %w", err)
		}
		s.sawWALEnd(uint64(k.ServerWALEnd))
		st.pending = append(st.pending, Frame{WALStart: parapply.LSN(k.ServerWALEnd), ServerTime: k.ServerTime})
		if k.ReplyRequested {
			if err := st.flush(ctx, true); err != nil {
				return err
			}
			if err := st.send(ctx, true); err != nil {
				return err
			}
		}
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("bad XLogData from the publisher: %w", err)
		}
		s.sawWALEnd(uint64(x.ServerWALEnd))
		if len(x.WALData) > 0 {
			st.txns.saw(x.WALData[0], &s.largeTxn)
		}
		wal := x.WALData
		if l := parapply.LSN(x.WALStart); l > st.received {
			st.received = l
		}
		st.pending = append(st.pending, Frame{WALStart: parapply.LSN(x.WALStart), Data: wal, ServerTime: x.ServerTime})
	}
	return nil
}

func quotePubs(pubs []string) string {
	q := make([]string, len(pubs))
	for i, p := range pubs {
		q[i] = parapply.QuoteIdent(p)
	}
	return strings.Join(q, ",")
}

// PublishedTable is a table the publications send, with its published
// columns (nil: all) and row filter ("" for none).
type PublishedTable struct {
	Schema, Name string
	Columns      []string
	RowFilter    string
	// Key lists the columns of the table's replica identity on the
	// publisher (its primary key, or the index REPLICA IDENTITY USING
	// INDEX names), in the index's order; empty under REPLICA IDENTITY
	// FULL or NOTHING, or without a primary key.
	Key []string
	// Types holds the publisher's type OID of each of the table's columns,
	// by name: whether values can travel in binary depends on them.
	Types map[string]uint32
}

// publishedTables lists what the publications send, computed as PostgreSQL
// 16's subscriptions do (pg_get_publication_tables over all the
// publications at once), by hand so that a PostgreSQL 14 or 15 publisher
// gets the same answer:
//   - when any of the publications publishes through partition roots, a
//     table one of whose ancestors is listed is left out: its changes
//     arrive as that ancestor's, and its rows are in the ancestor's copy
//     (copying both would copy them twice);
//   - a row passes if any publication's filter passes it (no filter passes
//     all);
//   - the columns are the publications' column list, which must be the
//     same in each (PostgreSQL 16+ refuses different lists, as parapply
//     does; a PostgreSQL 15 publisher sends their union, and so parapply
//     takes it).
func (s *Source) publishedTables(ctx context.Context) ([]PublishedTable, error) {
	return ListPublished(ctx, s.conn, s.cfg.Publications)
}

// ListPublished is publishedTables on any connection to the publisher
// database (a replication connection or an ordinary one).
func ListPublished(ctx context.Context, conn *pgconn.PgConn, publications []string) ([]PublishedTable, error) {
	version, _ := strconv.Atoi(conn.ParameterStatus("server_version_num"))
	if version == 0 {
		// Reported at connection start only from PostgreSQL 16 on.
		res, err := conn.Exec(ctx, "SHOW server_version_num").ReadAll()
		if err != nil {
			return nil, fmt.Errorf("reading the source's server version: %w", err)
		}
		if len(res) == 0 || len(res[0].Rows) != 1 {
			return nil, errors.New("reading the source's server version: SHOW server_version_num returned no row")
		}
		version, _ = strconv.Atoi(string(res[0].Rows[0][0]))
	}
	pubs := make([]string, len(publications))
	for i, p := range publications {
		pubs[i] = parapply.QuoteLiteral(p)
	}
	cols, filter := "NULL::text", "NULL::text"
	if version >= 180000 {
		cols, filter = "array_to_string(t.attnames, ',')", "t.rowfilter"
	} else if version >= 150000 {
		// Before 18 no generated column is published, but PostgreSQL 15's
		// view lists them with the others: leave them out.
		cols, filter = `array_to_string(ARRAY(SELECT n.attname FROM unnest(t.attnames) WITH ORDINALITY n (attname, ord)
			JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = n.attname WHERE a.attgenerated = '' ORDER BY n.ord), ',')`, "t.rowfilter"
	}
	res, err := conn.Exec(ctx, `SELECT t.schemaname, t.tablename, `+cols+`, `+filter+`, p.pubviaroot, c.oid,
			ARRAY(SELECT a.relid::oid FROM pg_catalog.pg_partition_ancestors(c.oid) a WHERE a.relid::oid <> c.oid),
			(SELECT pg_catalog.json_agg(a.attname ORDER BY pg_catalog.array_position(i.indkey::int2[], a.attnum))
				FROM pg_catalog.pg_index i JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
				WHERE i.indrelid = c.oid AND ((c.relreplident = 'i' AND i.indisreplident) OR (c.relreplident = 'd' AND i.indisprimary)))::text,
			(SELECT pg_catalog.json_object_agg(a.attname, a.atttypid::int8) FROM pg_catalog.pg_attribute a
				WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)::text
		FROM pg_catalog.pg_publication_tables t
		JOIN pg_catalog.pg_publication p ON p.pubname = t.pubname
		JOIN pg_catalog.pg_namespace n ON n.nspname = t.schemaname
		JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = t.tablename
		WHERE t.pubname IN (`+strings.Join(pubs, ",")+`) ORDER BY 1, 2`).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("listing published tables: %w", err)
	}
	var rows [][][]byte
	if len(res) > 0 {
		rows = res[len(res)-1].Rows
	}
	return combinePublished(rows, version)
}

// combinePublished applies publishedTables' rules to its rows: schema,
// table, column names (comma separated; empty or NULL for all), row filter
// (NULL for none), pubviaroot, oid, the oids of its ancestors and its
// replica identity's columns (a JSON array, NULL for none) and its columns' type
// OIDs (a JSON object by name), one row per
// table and publication, ordered by table.
func combinePublished(rows [][][]byte, serverVersion int) ([]PublishedTable, error) {
	viaRoot := false
	listed := map[string]bool{}
	for _, r := range rows {
		viaRoot = viaRoot || string(r[4]) == "t"
		listed[string(r[5])] = true
	}
	var out []PublishedTable
	var colSets []string // per entry of out, the first column list seen ("*" for all)
	allCols, noFilter := map[int]bool{}, map[int]bool{}
	for _, r := range rows {
		if viaRoot && hasListedAncestor(string(r[6]), listed) {
			continue
		}
		schema, name := string(r[0]), string(r[1])
		i := len(out) - 1
		first := i < 0 || out[i].Schema != schema || out[i].Name != name
		if first {
			out = append(out, PublishedTable{Schema: schema, Name: name})
			if len(r) > 7 && r[7] != nil {
				if err := json.Unmarshal(r[7], &out[len(out)-1].Key); err != nil {
					return nil, fmt.Errorf("reading the replica identity of %s.%s: %w", schema, name, err)
				}
			}
			if len(r) > 8 && r[8] != nil {
				if err := json.Unmarshal(r[8], &out[len(out)-1].Types); err != nil {
					return nil, fmt.Errorf("reading the column types of %s.%s: %w", schema, name, err)
				}
			}
			colSets = append(colSets, "")
			i++
		}
		t := &out[i]
		set := "*"
		if len(r[2]) > 0 {
			set = string(r[2])
		}
		if !first && set != colSets[i] && serverVersion >= 160000 {
			return nil, fmt.Errorf("table %s is published with different column lists in the given publications (%s and %s); PostgreSQL 16+ refuses such a subscription too: give the table the same column list in each, or subscribe to fewer publications",
				parapply.QuoteIdent(schema)+"."+parapply.QuoteIdent(name), describeColumns(colSets[i]), describeColumns(set))
		}
		if first {
			colSets[i] = set
		}
		if set == "*" {
			allCols[i] = true
		} else {
			for _, c := range strings.Split(set, ",") {
				if !slices.Contains(t.Columns, c) {
					t.Columns = append(t.Columns, c)
				}
			}
		}
		if r[3] == nil {
			noFilter[i] = true
		} else if t.RowFilter == "" {
			t.RowFilter = "(" + string(r[3]) + ")"
		} else {
			t.RowFilter += " OR (" + string(r[3]) + ")"
		}
	}
	for i := range out {
		if allCols[i] {
			out[i].Columns = nil
		}
		if noFilter[i] {
			out[i].RowFilter = ""
		}
	}
	return out, nil
}

func describeColumns(set string) string {
	if set == "*" {
		return "all columns"
	}
	return "(" + set + ")"
}

// hasListedAncestor reports whether an oid array's text form ({1,2})
// names a listed oid.
func hasListedAncestor(ancestors string, listed map[string]bool) bool {
	for _, a := range strings.Split(strings.Trim(ancestors, "{}"), ",") {
		if a != "" && listed[a] {
			return true
		}
	}
	return false
}

// SnapshotSlot is a temporary slot whose exported snapshot serves a copy
// of tables that join later; closing it drops the slot.
type SnapshotSlot struct {
	conn            *pgconn.PgConn
	Snapshot        string
	ConsistentPoint parapply.LSN
}

// NewSnapshotSlot creates a temporary logical slot with an exported
// snapshot on a connection of its own.
func NewSnapshotSlot(ctx context.Context, cfg Config) (*SnapshotSlot, error) {
	pc, err := pgconn.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, pgerr.Parse("source", err)
	}
	pc.RuntimeParams["replication"] = "database"
	pc.RuntimeParams["application_name"] = cfg.AppName + " copy"
	conn, err := pgconn.ConnectConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("connecting to the source %s: %w", describe(pc), pgerr.Short(err))
	}
	name := fmt.Sprintf("%s_sync_%d", cfg.Slot, time.Now().UnixNano()%1_000_000_000)
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, parapply.QuoteIdent(name), "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		conn.Close(context.Background())
		return nil, fmt.Errorf("creating temporary slot %s for the copy: %w", name, err)
	}
	l, err := parapply.ParseLSN(res.ConsistentPoint)
	if err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return &SnapshotSlot{conn: conn, Snapshot: res.SnapshotName, ConsistentPoint: l}, nil
}

// Close ends the connection, which drops the temporary slot.
func (s *SnapshotSlot) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.conn.Close(ctx)
}
