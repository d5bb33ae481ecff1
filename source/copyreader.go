package source

import (
	"encoding/binary"
	"fmt"
	"io"
)

// copyReader reads the publisher's messages once the replication stream is
// in copy-both mode, straight from the connection into chunks that are
// never written again where a message was read: a message's body stays
// valid for as long as anything refers to it. pgconn reads into a buffer
// it reuses, so its messages had to be copied out, and the connection had
// copied them once already into that buffer; here each byte of the stream
// is written once, by the read that takes it from the socket (the applier
// keeps a frame's values until their group is applied, as it kept the
// copies before).
type copyReader struct {
	r io.Reader
	// chunk holds what was read (len) in memory of chunkSize (cap); off is
	// where the first message not yet returned starts.
	chunk []byte
	off   int
}

const (
	// chunkSize is the memory one chunk takes; a message larger than it
	// gets a chunk of its own size. A chunk lives while any message in it
	// is referred to, so it is a bound on what a few small frames still
	// in the applier can hold.
	chunkSize = 256 << 10
	// minChunkRead is the least room a read is made into: with less left
	// in a chunk, the next read starts a new one (the part of a message
	// already read moves with it).
	minChunkRead = 16 << 10
	// maxMessage bounds a message's length word: PostgreSQL sends no
	// message larger than 1 GB (its largest allocation) plus headers; a
	// larger word is a broken stream, not a reason to allocate it.
	maxMessage = 1<<30 + 1<<20
)

// next returns the next message's type and body. The body is never
// overwritten. A read error (a deadline included) is returned as it is,
// with what was read kept: the next call goes on from there.
func (c *copyReader) next() (byte, []byte, error) {
	for {
		avail := c.chunk[c.off:]
		need := 5
		if len(avail) >= 5 {
			n := binary.BigEndian.Uint32(avail[1:5])
			if n < 4 || n > maxMessage {
				return 0, nil, fmt.Errorf("the publisher sent a message of type %q with length %d (a broken stream)", avail[0], n)
			}
			need = 1 + int(n)
			if len(avail) >= need {
				c.off += need
				return avail[0], avail[5:need:need], nil
			}
		}
		// A new chunk when this one cannot hold the message, or has
		// little room left after messages already returned.
		if room := cap(c.chunk) - len(c.chunk); room < need-len(avail) || (room < minChunkRead && c.off > 0) {
			fresh := make([]byte, len(avail), max(chunkSize, need))
			copy(fresh, avail)
			c.chunk, c.off = fresh, 0
		}
		n, err := c.r.Read(c.chunk[len(c.chunk):cap(c.chunk)])
		c.chunk = c.chunk[:len(c.chunk)+n]
		if err != nil && n == 0 {
			return 0, nil, err
		}
	}
}

// handover stands between pgconn's frontend and the connection, so that
// the stream can be taken from pgconn at a message boundary. pgconn's
// frontend reads ahead into a buffer nobody else can read; while exact is
// set, the frontend gets one byte per read, so it holds nothing past the
// message it asked for, and what handover read from the connection past
// that waits in buf. Once exact is off, reads take buf's leftovers first,
// then pass through.
type handover struct {
	r     io.Reader
	exact bool
	buf   []byte
	off   int
}

// handoverRead is what handover reads from the connection at a time while
// exact is set (a start's replies and the first messages of a stream).
const handoverRead = 16 << 10

func (h *handover) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if h.off < len(h.buf) {
		n := len(p)
		if h.exact {
			n = 1
		}
		n = copy(p[:n], h.buf[h.off:])
		h.off += n
		return n, nil
	}
	if !h.exact {
		return h.r.Read(p)
	}
	if h.buf == nil {
		h.buf = make([]byte, handoverRead)
	}
	n, err := h.r.Read(h.buf[:cap(h.buf)])
	h.buf, h.off = h.buf[:n], 0
	if n == 0 {
		return 0, err
	}
	p[0], h.off = h.buf[0], 1
	return 1, nil
}
