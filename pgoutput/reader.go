package pgoutput

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/parapply/parapply"
)

// ErrMalformed is wrapped by every error Decode returns, so callers can tell
// bad input (errors.Is(err, ErrMalformed)) from their own failures.
var ErrMalformed = errors.New("pgoutput: malformed message")

// malformedError carries the detailed reason; it unwraps to ErrMalformed.
type malformedError struct{ msg string }

func (e *malformedError) Error() string { return "pgoutput: " + e.msg }
func (e *malformedError) Unwrap() error { return ErrMalformed }

func malformedf(format string, args ...any) error {
	return &malformedError{msg: fmt.Sprintf(format, args...)}
}

// pgEpochSeconds is 2000-01-01 00:00:00 UTC, PostgreSQL's timestamp epoch,
// in Unix seconds.
const pgEpochSeconds = 946684800

// pgTime converts a PostgreSQL TimestampTz (microseconds since 2000-01-01
// UTC) to a time.Time in UTC without overflowing for any int64.
func pgTime(us int64) time.Time {
	sec, rem := us/1e6, us%1e6
	if rem < 0 {
		sec--
		rem += 1e6
	}
	return time.Unix(sec+pgEpochSeconds, rem*1e3).UTC()
}

// reader walks one message with a sticky error: after the first failure every
// read returns a zero value and the error describes that first failure.
type reader struct {
	b    []byte
	off  int
	what string // message name, for errors
	col  int    // relation column being read, for errors; -1 otherwise
	err  error
	// dec gives a tuple's values (Decoder.tupleRoom).
	dec *Decoder
}

func (r *reader) remaining() int { return len(r.b) - r.off }

func (r *reader) failf(format string, args ...any) {
	if r.err != nil {
		return
	}
	msg := r.what + " message: "
	if r.col >= 0 {
		msg += fmt.Sprintf("column %d: ", r.col)
	}
	r.err = &malformedError{msg: msg + fmt.Sprintf(format, args...)}
}

// need reports whether n more bytes can be read, recording an error naming
// field if not.
func (r *reader) need(n int, field string) bool {
	if r.err != nil {
		return false
	}
	if n > len(r.b)-r.off {
		r.failf("%s: need %d bytes, have %d", field, n, len(r.b)-r.off)
		return false
	}
	return true
}

func (r *reader) u8(field string) byte {
	if !r.need(1, field) {
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) u32(field string) uint32 {
	if !r.need(4, field) {
		return 0
	}
	v := binary.BigEndian.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64(field string) uint64 {
	if !r.need(8, field) {
		return 0
	}
	v := binary.BigEndian.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

func (r *reader) xid(field string) parapply.XID { return parapply.XID(r.u32(field)) }
func (r *reader) lsn(field string) parapply.LSN { return parapply.LSN(r.u64(field)) }
func (r *reader) time(field string) time.Time {
	if r.err != nil {
		return time.Time{}
	}
	v := r.u64(field)
	if r.err != nil {
		return time.Time{}
	}
	return pgTime(int64(v))
}

// cstring reads a NUL-terminated string and copies it.
func (r *reader) cstring(field string) string {
	if r.err != nil {
		return ""
	}
	i := bytes.IndexByte(r.b[r.off:], 0)
	if i < 0 {
		r.failf("%s: string not NUL-terminated within %d remaining bytes", field, len(r.b)-r.off)
		return ""
	}
	s := string(r.b[r.off : r.off+i])
	r.off += i + 1
	return s
}

// count reads an int16 (wide == false) or int32 element count and checks
// that count elements of at least minSize bytes each fit in what remains,
// so that allocating count elements is bounded by the message size. The
// field is named field+suffix in errors (two parts, so that callers need
// not concatenate on the success path).
func (r *reader) count(wide bool, minSize int, field, suffix string) int {
	if r.err != nil {
		return 0
	}
	size := 2
	if wide {
		size = 4
	}
	if r.remaining() < size {
		r.failf("%s%s: need %d bytes, have %d", field, suffix, size, r.remaining())
		return 0
	}
	var n int64
	if wide {
		n = int64(int32(binary.BigEndian.Uint32(r.b[r.off:])))
	} else {
		n = int64(int16(binary.BigEndian.Uint16(r.b[r.off:])))
	}
	r.off += size
	if n < 0 {
		r.failf("%s%s: negative count %d", field, suffix, n)
		return 0
	}
	if n*int64(minSize) > int64(r.remaining()) {
		r.failf("%s%s: count %d needs at least %d bytes, have %d", field, suffix, n, n*int64(minSize), r.remaining())
		return 0
	}
	return int(n)
}

// tuple reads a TupleData into room the Decoder hands out (tupleRoom: a
// shared slab for small tuples). Every column takes at least one byte, so
// the room stays proportional to the message size.
func (r *reader) tuple(label string) parapply.Tuple {
	n := r.count(false, 1, label, " column count")
	if r.err != nil {
		return nil
	}
	t := r.dec.tupleRoom(n)
	b := r.b
	off := r.off
	for i := range t {
		if off >= len(b) {
			r.failf("%s column %d: missing kind byte", label, i)
			return nil
		}
		kind := b[off]
		off++
		switch kind {
		case parapply.ValueNull, parapply.ValueUnchanged:
			t[i] = parapply.Value{Kind: kind}
		case parapply.ValueText, parapply.ValueBinary:
			if len(b)-off < 4 {
				r.failf("%s column %d: %s length: need 4 bytes, have %d", label, i, kindName(kind), len(b)-off)
				return nil
			}
			l := int64(int32(binary.BigEndian.Uint32(b[off:])))
			off += 4
			if l < 0 {
				r.failf("%s column %d: negative %s length %d", label, i, kindName(kind), l)
				return nil
			}
			if l > int64(len(b)-off) {
				r.failf("%s column %d: %s length %d exceeds remaining %d bytes", label, i, kindName(kind), l, len(b)-off)
				return nil
			}
			end := off + int(l)
			t[i] = parapply.Value{Kind: kind, Data: b[off:end:end]}
			off = end
		default:
			r.failf("%s column %d: unknown value kind %q (0x%02x)", label, i, kind, kind)
			return nil
		}
	}
	r.off = off
	return t
}

func kindName(kind byte) string {
	if kind == parapply.ValueBinary {
		return "binary"
	}
	return "text"
}
