// Package spill keeps a streamed transaction's changes on disk until the
// publisher commits or aborts it, so that memory stays bounded whatever the
// transaction's size. A Log is an append-only file of length-prefixed
// records; a subtransaction's abort marks the tail from its first change on
// as dead (the file is never rewritten, so a reader still busy with an
// earlier range is unaffected).
package spill

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// Log is one streamed transaction's changes. Append, Flush, Cut and Replay
// belong to one goroutine (the stream reader); Read may run on another, on
// ranges already flushed.
type Log struct {
	f    *os.File
	w    *bufio.Writer
	size int64 // bytes appended, flushed or not
	dead []span
}

type span struct{ from, to int64 }

// Create makes a new log in dir (the system's temporary directory if empty).
func Create(dir string) (*Log, error) {
	f, err := os.CreateTemp(dir, "parapply-stream-*.spill")
	if err != nil {
		return nil, fmt.Errorf("creating a spill file for a streamed transaction: %w (set spill_directory to a writable directory)", err)
	}
	return &Log{f: f, w: bufio.NewWriterSize(f, 256<<10)}, nil
}

// Append adds one record and returns its offset.
func (l *Log) Append(rec []byte) (int64, error) {
	off := l.size
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(rec)))
	if _, err := l.w.Write(hdr[:]); err != nil {
		return 0, l.failed(err)
	}
	if _, err := l.w.Write(rec); err != nil {
		return 0, l.failed(err)
	}
	l.size += 4 + int64(len(rec))
	return off, nil
}

func (l *Log) failed(err error) error {
	return fmt.Errorf("writing spill file %s: %w (is its file system full? set spill_directory)", l.f.Name(), err)
}

// Size is the end of the last record appended.
func (l *Log) Size() int64 { return l.size }

// Flush writes buffered records to the file, so that Read sees them.
func (l *Log) Flush() error {
	if err := l.w.Flush(); err != nil {
		return l.failed(err)
	}
	return nil
}

// Cut marks every record from offset from on as dead: a rolled back
// subtransaction's changes, and everything after them.
func (l *Log) Cut(from int64) {
	if from < l.size {
		l.dead = append(l.dead, span{from, l.size})
	}
}

// Read calls fn with each record in [from, to), dead or not (the caller
// undoes dead ones itself, with savepoints); each record is a slice the
// caller may keep (decoded messages point into it), never written again.
// The range must have been flushed.
//
// The file is read straight into chunks of readChunk that records are
// handed out of, as the stream's reader does with the connection: one copy
// per byte and one allocation per chunk, not a buffer's copy and an
// allocation per record. A record kept keeps its chunk.
func (l *Log) Read(from, to int64, fn func(off int64, rec []byte) error) error {
	var chunk []byte // the file's bytes from base on
	base, off := from, from
	for off < to {
		avail := chunk[off-base:]
		need := 4
		if len(avail) >= 4 {
			need += int(binary.BigEndian.Uint32(avail))
		}
		if len(avail) < need {
			if int64(need) > to-off {
				return fmt.Errorf("reading spill file %s at %d: %w", l.f.Name(), off, io.ErrUnexpectedEOF)
			}
			// A new chunk, with the part of the record already read moved
			// over; as large as the record if it is larger.
			next := make([]byte, min(int64(max(readChunk, need)), to-off))
			copy(next, avail)
			if _, err := l.f.ReadAt(next[len(avail):], off+int64(len(avail))); err != nil {
				return fmt.Errorf("reading spill file %s at %d: %w", l.f.Name(), off, err)
			}
			chunk, base = next, off
			continue
		}
		at := int(off - base)
		if err := fn(off, chunk[at+4:at+need:at+need]); err != nil {
			return err
		}
		off += int64(need)
	}
	return nil
}

// readChunk is the most Read reads at once (a record larger than it gets a
// chunk of its own size): about what a stream block of the publisher's
// logical_decoding_work_mem brings, in a few reads.
const readChunk = 256 << 10

// Replay calls fn with every live record, in order.
func (l *Log) Replay(fn func(rec []byte) error) error {
	if err := l.Flush(); err != nil {
		return err
	}
	var from int64
	live := func(to int64) error {
		if to <= from {
			return nil
		}
		return l.Read(from, to, func(_ int64, rec []byte) error { return fn(rec) })
	}
	for _, d := range l.merged() {
		if err := live(d.from); err != nil {
			return err
		}
		from = max(from, d.to)
	}
	return live(l.size)
}

// merged returns the dead spans in order, overlaps joined.
func (l *Log) merged() []span {
	out := []span{}
	for _, d := range l.dead {
		// Cuts only ever reach the end at their time: a later cut either
		// starts after an earlier one ends or swallows its tail.
		for len(out) > 0 && d.from <= out[len(out)-1].to {
			last := out[len(out)-1]
			out = out[:len(out)-1]
			d = span{min(d.from, last.from), max(d.to, last.to)}
		}
		out = append(out, d)
	}
	return out
}

// DeadBytes is the size of the records cut so far.
func (l *Log) DeadBytes() int64 {
	var n int64
	for _, d := range l.merged() {
		n += d.to - d.from
	}
	return n
}

// Close closes and removes the file.
func (l *Log) Close() error {
	name := l.f.Name()
	err := l.f.Close()
	if rerr := os.Remove(name); rerr != nil && !errors.Is(rerr, os.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}
