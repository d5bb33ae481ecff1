package pgoutput

import (
	"encoding/binary"

	"github.com/parapply/parapply"
)

// Decoder turns pgoutput messages into Go values. It is stateful only in that
// it knows whether it is inside a stream (between StreamStart and
// StreamStop), because there Relation, Type, Insert, Update, Delete, Truncate
// and Message carry a leading XID. Use one Decoder per replication
// connection, feeding it every message in order; it is not safe for
// concurrent use, nor to be copied once used (a copy would hand out the same
// room for messages). The zero value is ready to use for protocol versions 1-3.
type Decoder struct {
	// ProtoVersion is the proto_version negotiated with the publisher. It
	// only matters for Stream Abort, whose abort LSN and time are read when
	// ProtoVersion >= 4 and the message holds them.
	ProtoVersion int

	inStream bool

	// Room for the row changes' messages and tuples, handed out a piece at
	// a time (see take).
	inserts []Insert
	updates []Update
	deletes []Delete
	values  []parapply.Value
}

// Slab sizes: a row change's message and tuple come out of allocations of
// this many, rather than two allocations per change. A piece kept keeps
// its slab alive, and the stream chunks its neighbours' values point into:
// a few hundred values span about as much of the stream as one chunk
// (source's copyReader) holds, which one kept message keeps anyway.
const (
	messageSlab = 32
	valueSlab   = 256
)

// take returns the next zero element of *slab, making a new slab of n when
// it is used up.
func take[T any](slab *[]T, n int) *T {
	if len(*slab) == 0 {
		*slab = make([]T, n)
	}
	p := &(*slab)[0]
	*slab = (*slab)[1:]
	return p
}

// tupleRoom returns room for a tuple of n values: from the slab for a
// small one, allocated alone for a large one.
func (d *Decoder) tupleRoom(n int) parapply.Tuple {
	if n > valueSlab/4 {
		return make(parapply.Tuple, n)
	}
	if n > len(d.values) {
		d.values = make([]parapply.Value, valueSlab)
	}
	t := d.values[:n:n]
	d.values = d.values[n:]
	return t
}

// NewStreamDecoder returns a decoder positioned inside a stream block, for
// messages of a streamed transaction kept aside (each carries its xid).
func NewStreamDecoder(protoVersion int) *Decoder {
	return &Decoder{ProtoVersion: protoVersion, inStream: true}
}

// PeekStreamedChange reports whether data is a row change inside a stream
// block (Insert, Update, Delete or Truncate, which start with the
// transaction's xid) and returns that xid without decoding the tuples: a
// reader that only stores streamed changes need not pay for that.
func (d *Decoder) PeekStreamedChange(data []byte) (parapply.XID, bool) {
	if !d.inStream || len(data) < 5 {
		return 0, false
	}
	switch data[0] {
	case 'I', 'U', 'D', 'T':
		return parapply.XID(binary.BigEndian.Uint32(data[1:5])), true
	}
	return 0, false
}

// InStream reports whether the decoder is between a StreamStart and a
// StreamStop, so callers can check their own bookkeeping against it.
func (d *Decoder) InStream() bool { return d.inStream }

// Decode parses one pgoutput message (one XLogData payload, starting with
// the tag byte) and returns it as one of the pointer types of this package.
//
// The returned message may alias data: Value.Data of tuple values and
// LogicalMessage.Content are subslices of data, not copies, so a caller that
// keeps them after reusing data must copy them. Strings are copied.
//
// Malformed input, including bytes left over after a complete message, gives
// an error wrapping ErrMalformed and leaves the decoder's stream state as it
// was; Decode never panics.
func (d *Decoder) Decode(data []byte) (Message, error) {
	if len(data) == 0 {
		return nil, malformedf("empty message")
	}
	r := reader{b: data, off: 1, col: -1, dec: d}
	var m Message
	switch tag := data[0]; tag {
	case 'B':
		r.what = "begin"
		m = &Begin{
			FinalLSN:   r.lsn("final lsn"),
			CommitTime: r.time("commit time"),
			XID:        r.xid("xid"),
		}
	case 'C':
		r.what = "commit"
		m = &Commit{
			Flags:      r.u8("flags"),
			CommitLSN:  r.lsn("commit lsn"),
			EndLSN:     r.lsn("end lsn"),
			CommitTime: r.time("commit time"),
		}
	case 'O':
		r.what = "origin"
		m = &Origin{
			CommitLSN: r.lsn("commit lsn"),
			Name:      r.cstring("name"),
		}
	case 'R':
		r.what = "relation"
		m = d.relation(&r)
	case 'Y':
		r.what = "type"
		t := &TypeMessage{XID: d.streamXID(&r)}
		t.OID = r.u32("type oid")
		t.Namespace = namespace(r.cstring("namespace"))
		t.Name = r.cstring("name")
		m = t
	case 'I':
		r.what = "insert"
		ins := take(&d.inserts, messageSlab)
		ins.XID = d.streamXID(&r)
		ins.RelationID = r.u32("relation id")
		if k := r.u8("tuple kind"); r.err == nil && k != 'N' {
			r.failf("tuple kind %q, want 'N'", k)
		}
		ins.New = r.tuple("new tuple")
		m = ins
	case 'U':
		r.what = "update"
		m = d.update(&r)
	case 'D':
		r.what = "delete"
		del := take(&d.deletes, messageSlab)
		del.XID = d.streamXID(&r)
		del.RelationID = r.u32("relation id")
		del.OldKind = r.u8("tuple kind")
		if r.err == nil && del.OldKind != 'K' && del.OldKind != 'O' {
			r.failf("tuple kind %q, want 'K' or 'O'", del.OldKind)
		}
		del.Old = r.tuple("old tuple")
		m = del
	case 'T':
		r.what = "truncate"
		m = d.truncate(&r)
	case 'M':
		r.what = "logical message"
		lm := &LogicalMessage{XID: d.streamXID(&r)}
		lm.Transactional = r.u8("flags")&1 != 0
		lm.LSN = r.lsn("lsn")
		lm.Prefix = r.cstring("prefix")
		n := r.count(true, 1, "content length", "")
		if r.err == nil {
			lm.Content = r.b[r.off : r.off+n : r.off+n]
			r.off += n
		}
		m = lm
	case 'S':
		r.what = "stream start"
		m = &StreamStart{
			XID:   r.xid("xid"),
			First: r.u8("first segment flag") == 1,
		}
	case 'E':
		r.what = "stream stop"
		m = &StreamStop{}
	case 'c':
		r.what = "stream commit"
		m = &StreamCommit{
			XID:        r.xid("xid"),
			Flags:      r.u8("flags"),
			CommitLSN:  r.lsn("commit lsn"),
			EndLSN:     r.lsn("end lsn"),
			CommitTime: r.time("commit time"),
		}
	case 'A':
		r.what = "stream abort"
		a := &StreamAbort{
			XID:    r.xid("xid"),
			SubXID: r.xid("subxid"),
		}
		// Protocol 4 adds the abort LSN and time only with streaming =
		// parallel, so their presence is told by the length.
		if d.ProtoVersion >= 4 && r.remaining() == 16 {
			a.AbortLSN = r.lsn("abort lsn")
			a.AbortTime = r.time("abort time")
			a.HasAbortLSN = true
		}
		m = a
	case 'b':
		r.what = "begin prepare"
		m = &BeginPrepare{
			PrepareLSN:  r.lsn("prepare lsn"),
			EndLSN:      r.lsn("end lsn"),
			PrepareTime: r.time("prepare time"),
			XID:         r.xid("xid"),
			GID:         r.cstring("gid"),
		}
	case 'P':
		r.what = "prepare"
		m = r.prepare()
	case 'K':
		r.what = "commit prepared"
		m = &CommitPrepared{
			Flags:      r.u8("flags"),
			CommitLSN:  r.lsn("commit lsn"),
			EndLSN:     r.lsn("end lsn"),
			CommitTime: r.time("commit time"),
			XID:        r.xid("xid"),
			GID:        r.cstring("gid"),
		}
	case 'r':
		r.what = "rollback prepared"
		m = &RollbackPrepared{
			Flags:          r.u8("flags"),
			PrepareEndLSN:  r.lsn("prepare end lsn"),
			RollbackEndLSN: r.lsn("rollback end lsn"),
			PrepareTime:    r.time("prepare time"),
			RollbackTime:   r.time("rollback time"),
			XID:            r.xid("xid"),
			GID:            r.cstring("gid"),
		}
	case 'p':
		r.what = "stream prepare"
		m = (*StreamPrepare)(r.prepare())
	default:
		return nil, malformedf("unknown message tag %q (0x%02x)", tag, tag)
	}
	if r.err == nil && r.off != len(r.b) {
		r.failf("%d trailing bytes after the message", len(r.b)-r.off)
	}
	if r.err != nil {
		return nil, r.err
	}
	switch m.(type) {
	case *StreamStart:
		d.inStream = true
	case *StreamStop:
		d.inStream = false
	}
	return m, nil
}

// streamXID reads the leading XID that data messages carry inside a stream.
func (d *Decoder) streamXID(r *reader) parapply.XID {
	if !d.inStream {
		return 0
	}
	return r.xid("xid")
}

// namespace undoes the publisher's abbreviation of pg_catalog as "".
func namespace(s string) string {
	if s == "" {
		return "pg_catalog"
	}
	return s
}

// minColumnSize is the smallest encoding of a relation column: flags, an
// empty name's NUL, type OID and type modifier.
const minColumnSize = 1 + 1 + 4 + 4

func (d *Decoder) relation(r *reader) *RelationMessage {
	m := &RelationMessage{XID: d.streamXID(r)}
	rel := &m.Relation
	rel.ID = r.u32("relation id")
	rel.Namespace = namespace(r.cstring("namespace"))
	rel.Name = r.cstring("name")
	rel.ReplicaIdentity = r.u8("replica identity")
	switch rel.ReplicaIdentity {
	case parapply.IdentityDefault, parapply.IdentityNothing, parapply.IdentityFull, parapply.IdentityIndex:
	default:
		if r.err == nil {
			r.failf("unknown replica identity %q (0x%02x)", rel.ReplicaIdentity, rel.ReplicaIdentity)
		}
	}
	n := r.count(false, minColumnSize, "column count", "")
	if r.err != nil {
		return m
	}
	rel.Columns = make([]parapply.Column, n)
	for i := range rel.Columns {
		c := &rel.Columns[i]
		r.col = i
		c.Key = r.u8("flags")&1 != 0
		c.Name = r.cstring("name")
		c.TypeOID = r.u32("type oid")
		c.TypeMod = int32(r.u32("type modifier"))
		if r.err != nil {
			break
		}
	}
	r.col = -1
	return m
}

func (d *Decoder) update(r *reader) *Update {
	m := take(&d.updates, messageSlab)
	m.XID = d.streamXID(r)
	m.RelationID = r.u32("relation id")
	kind := r.u8("tuple kind")
	if kind == 'K' || kind == 'O' {
		m.OldKind = kind
		m.Old = r.tuple("old tuple")
		kind = r.u8("new tuple kind")
	}
	if r.err == nil && kind != 'N' {
		if m.OldKind == 0 {
			r.failf("tuple kind %q, want 'K', 'O' or 'N'", kind)
		} else {
			r.failf("new tuple kind %q, want 'N'", kind)
		}
	}
	m.New = r.tuple("new tuple")
	return m
}

func (d *Decoder) truncate(r *reader) *Truncate {
	m := &Truncate{XID: d.streamXID(r)}
	n := int64(int32(r.u32("relation count")))
	flags := r.u8("options")
	m.Cascade = flags&1 != 0
	m.RestartIdentity = flags&2 != 0
	if r.err != nil {
		return m
	}
	if n < 0 {
		r.failf("relation count: negative count %d", n)
		return m
	}
	if n*4 > int64(r.remaining()) {
		r.failf("relation count: count %d needs %d bytes, have %d", n, n*4, r.remaining())
		return m
	}
	m.RelationIDs = make([]uint32, n)
	for i := range m.RelationIDs {
		m.RelationIDs[i] = r.u32("relation id")
	}
	return m
}

// prepare reads the body shared by Prepare and Stream Prepare.
func (r *reader) prepare() *Prepare {
	return &Prepare{
		Flags:       r.u8("flags"),
		PrepareLSN:  r.lsn("prepare lsn"),
		EndLSN:      r.lsn("end lsn"),
		PrepareTime: r.time("prepare time"),
		XID:         r.xid("xid"),
		GID:         r.cstring("gid"),
	}
}
