package source

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// message encodes one backend message.
func message(typ byte, body []byte) []byte {
	b := []byte{typ}
	b = binary.BigEndian.AppendUint32(b, uint32(4+len(body)))
	return append(b, body...)
}

// splitReader hands out its data in pieces of the given sizes (cycled),
// returning a deadline error before each piece when stalling.
type splitReader struct {
	data     []byte
	sizes    []int
	i        int
	stalling bool
	stalled  bool // the last call returned the deadline error
}

func (r *splitReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	if r.stalling && !r.stalled {
		r.stalled = true
		return 0, os.ErrDeadlineExceeded
	}
	r.stalled = false
	n := min(r.sizes[r.i%len(r.sizes)], len(p), len(r.data))
	r.i++
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

func TestCopyReader(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2)) // fixed: every run reads the same stream
	body := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	sizes := []int{0, 1, 5, 1000, minChunkRead - 3, chunkSize - 7, chunkSize, chunkSize + 1, 3 * chunkSize}
	for _, tc := range []struct {
		name  string
		reads []int
		stall bool
	}{
		{"whole", []int{1 << 30}, false},
		{"byte by byte", []int{1}, false},
		{"odd pieces", []int{3, 7, 4096, 1, 65537}, false},
		{"deadlines between pieces", []int{2, 5000, 9}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stream []byte
			var want [][]byte
			for i := range 60 {
				b := body(sizes[rng.IntN(len(sizes))])
				if tc.reads[0] == 1 && len(b) > chunkSize {
					b = b[:i] // a byte at a time through 3 chunks: slow, and no new case
				}
				want = append(want, b)
				stream = append(stream, message('d', b)...)
			}
			cr := &copyReader{r: &splitReader{data: stream, sizes: tc.reads, stalling: tc.stall}}
			var got [][]byte
			for {
				typ, b, err := cr.next()
				if errors.Is(err, os.ErrDeadlineExceeded) {
					continue
				}
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if typ != 'd' {
					t.Fatalf("message %d: type %q, want 'd'", len(got), typ)
				}
				got = append(got, b)
			}
			if len(got) != len(want) {
				t.Fatalf("%d messages read, %d sent", len(got), len(want))
			}
			// Compared after everything was read: a body handed out
			// earlier must not have been overwritten by later reads.
			for i := range want {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("message %d (%d bytes): body differs from what was sent (%d bytes)", i, len(want[i]), len(got[i]))
				}
				if cap(got[i]) != len(got[i]) {
					t.Fatalf("message %d: capacity %d past its length %d: an append would write into the next message", i, cap(got[i]), len(got[i]))
				}
			}
		})
	}
}

func TestCopyReaderBrokenLength(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length uint32
	}{
		{"shorter than its own length word", 3},
		{"larger than any message", maxMessage + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := []byte{'d'}
			b = binary.BigEndian.AppendUint32(b, tc.length)
			cr := &copyReader{r: bytes.NewReader(b)}
			_, _, err := cr.next()
			if err == nil || !strings.Contains(err.Error(), "broken stream") {
				t.Fatalf("got %v, want an error naming a broken stream", err)
			}
		})
	}
}

// FuzzCopyReader reads arbitrary bytes as a stream, in pieces of every
// size: no input may panic, and the messages returned are the input's, in
// order, each body within it.
func FuzzCopyReader(f *testing.F) {
	f.Add(append(message('d', []byte("wal")), message('k', nil)...), uint8(1))
	f.Add([]byte{'d', 0, 0, 0, 3}, uint8(7))
	f.Add([]byte{'d', 0xff, 0xff, 0xff, 0xff}, uint8(200))
	f.Fuzz(func(t *testing.T, data []byte, piece uint8) {
		cr := &copyReader{r: &splitReader{data: slices.Clone(data), sizes: []int{int(piece) + 1}}}
		var rebuilt []byte
		for {
			typ, body, err := cr.next()
			if err != nil {
				break
			}
			rebuilt = append(rebuilt, message(typ, body)...)
		}
		if !bytes.HasPrefix(data, rebuilt) {
			t.Fatalf("the messages read are not the input's: %x from %x", rebuilt, data)
		}
	})
}
