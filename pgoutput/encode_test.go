package pgoutput

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/parapply/parapply"
)

// builder writes pgoutput fields the way proto.c's pq_send* calls do:
// big-endian integers, NUL-terminated strings. Tests only.
type builder []byte

func (b builder) u8(v byte) builder    { return append(b, v) }
func (b builder) u16(v uint16) builder { return binary.BigEndian.AppendUint16(b, v) }
func (b builder) u32(v uint32) builder { return binary.BigEndian.AppendUint32(b, v) }
func (b builder) i32(v int32) builder  { return b.u32(uint32(v)) }
func (b builder) u64(v uint64) builder { return binary.BigEndian.AppendUint64(b, v) }
func (b builder) raw(p ...byte) builder {
	return append(b, p...)
}
func (b builder) xid(v parapply.XID) builder { return b.u32(uint32(v)) }
func (b builder) lsn(v parapply.LSN) builder { return b.u64(uint64(v)) }
func (b builder) str(s string) builder       { return append(append(b, s...), 0) }

// ts writes a TimestampTz: microseconds since 2000-01-01 UTC.
func (b builder) ts(t time.Time) builder {
	return b.u64(uint64(t.UnixMicro() - pgEpochSeconds*1e6))
}

// tuple writes a TupleData.
func (b builder) tuple(t parapply.Tuple) builder {
	b = b.u16(uint16(len(t)))
	for _, v := range t {
		b = b.u8(v.Kind)
		if v.Kind == parapply.ValueText || v.Kind == parapply.ValueBinary {
			b = b.i32(int32(len(v.Data))).raw(v.Data...)
		}
	}
	return b
}

func (b builder) streamXID(inStream bool, x parapply.XID) builder {
	if inStream {
		return b.xid(x)
	}
	return b
}

// encodeMessage encodes a decoded message back into pgoutput bytes, the way
// the publisher would (inStream says whether data messages carry an XID).
func encodeMessage(m Message, inStream bool) []byte {
	var b builder
	switch m := m.(type) {
	case *Begin:
		b = b.u8('B').lsn(m.FinalLSN).ts(m.CommitTime).xid(m.XID)
	case *Commit:
		b = b.u8('C').u8(m.Flags).lsn(m.CommitLSN).lsn(m.EndLSN).ts(m.CommitTime)
	case *Origin:
		b = b.u8('O').lsn(m.CommitLSN).str(m.Name)
	case *RelationMessage:
		r := m.Relation
		b = b.u8('R').streamXID(inStream, m.XID).u32(r.ID).str(encNamespace(r.Namespace)).str(r.Name).u8(r.ReplicaIdentity)
		b = b.u16(uint16(len(r.Columns)))
		for _, c := range r.Columns {
			var flags byte
			if c.Key {
				flags = 1
			}
			b = b.u8(flags).str(c.Name).u32(c.TypeOID).i32(c.TypeMod)
		}
	case *TypeMessage:
		b = b.u8('Y').streamXID(inStream, m.XID).u32(m.OID).str(encNamespace(m.Namespace)).str(m.Name)
	case *Insert:
		b = b.u8('I').streamXID(inStream, m.XID).u32(m.RelationID).u8('N').tuple(m.New)
	case *Update:
		b = b.u8('U').streamXID(inStream, m.XID).u32(m.RelationID)
		if m.OldKind != 0 {
			b = b.u8(m.OldKind).tuple(m.Old)
		}
		b = b.u8('N').tuple(m.New)
	case *Delete:
		b = b.u8('D').streamXID(inStream, m.XID).u32(m.RelationID).u8(m.OldKind).tuple(m.Old)
	case *Truncate:
		var flags byte
		if m.Cascade {
			flags |= 1
		}
		if m.RestartIdentity {
			flags |= 2
		}
		b = b.u8('T').streamXID(inStream, m.XID).u32(uint32(len(m.RelationIDs))).u8(flags)
		for _, id := range m.RelationIDs {
			b = b.u32(id)
		}
	case *LogicalMessage:
		var flags byte
		if m.Transactional {
			flags = 1
		}
		b = b.u8('M').streamXID(inStream, m.XID).u8(flags).lsn(m.LSN).str(m.Prefix).i32(int32(len(m.Content))).raw(m.Content...)
	case *StreamStart:
		var first byte
		if m.First {
			first = 1
		}
		b = b.u8('S').xid(m.XID).u8(first)
	case *StreamStop:
		b = b.u8('E')
	case *StreamCommit:
		b = b.u8('c').xid(m.XID).u8(m.Flags).lsn(m.CommitLSN).lsn(m.EndLSN).ts(m.CommitTime)
	case *StreamAbort:
		b = b.u8('A').xid(m.XID).xid(m.SubXID)
		if m.HasAbortLSN {
			b = b.lsn(m.AbortLSN).ts(m.AbortTime)
		}
	case *BeginPrepare:
		b = b.u8('b').lsn(m.PrepareLSN).lsn(m.EndLSN).ts(m.PrepareTime).xid(m.XID).str(m.GID)
	case *Prepare:
		b = b.u8('P').u8(m.Flags).lsn(m.PrepareLSN).lsn(m.EndLSN).ts(m.PrepareTime).xid(m.XID).str(m.GID)
	case *CommitPrepared:
		b = b.u8('K').u8(m.Flags).lsn(m.CommitLSN).lsn(m.EndLSN).ts(m.CommitTime).xid(m.XID).str(m.GID)
	case *RollbackPrepared:
		b = b.u8('r').u8(m.Flags).lsn(m.PrepareEndLSN).lsn(m.RollbackEndLSN).ts(m.PrepareTime).ts(m.RollbackTime).xid(m.XID).str(m.GID)
	case *StreamPrepare:
		b = b.u8('p').u8(m.Flags).lsn(m.PrepareLSN).lsn(m.EndLSN).ts(m.PrepareTime).xid(m.XID).str(m.GID)
	default:
		panic(fmt.Sprintf("encodeMessage: unexpected %T", m))
	}
	return b
}

// encNamespace abbreviates pg_catalog as the publisher does.
func encNamespace(s string) string {
	if s == "pg_catalog" {
		return ""
	}
	return s
}
