package apply

import (
	"math/bits"
	"sync"
)

// A group's array parameters are large (a text column's values, one after
// another) and live only until the group's commit returns: the target has
// then read them, and no replay needs them. Allocated fresh for every
// statement, each was cleared by the runtime before it was written, and
// the garbage collector walked the heap for them: on one-row transactions
// with a 1 kB column that was a fifth of the process's CPU. An arena keeps
// them for the next groups instead.

// minArenaSize is the smallest array the arena keeps: smaller ones cost
// the allocator little.
const minArenaSize = 4 << 10

// maxArenaFree bounds the bytes the arena keeps for reuse.
const maxArenaFree = 32 << 20

// arena recycles the memory of the array parameters of committed groups.
// The applier's builder takes buffers (get) and hands the open group's
// over at its end (takeHeld); the commit's round trip, on the sender's
// goroutine, gives them back once the commit has returned (release).
type arena struct {
	mu        sync.Mutex
	free      [40][][]byte // by size class: capacity 1<<class
	freeBytes int
	// held are the buffers given out for the open group (builder only).
	held [][]byte
}

// sizeClass is the class of a buffer of at least n bytes.
func sizeClass(n int) int { return bits.Len(uint(n - 1)) }

// get returns an empty buffer of capacity at least n, recycled when one is
// free; a nil arena allocates.
func (ar *arena) get(n int) []byte {
	if ar == nil || n < minArenaSize {
		return make([]byte, 0, n)
	}
	c := sizeClass(n)
	if c >= len(ar.free) {
		return make([]byte, 0, n)
	}
	var b []byte
	ar.mu.Lock()
	if k := len(ar.free[c]); k > 0 {
		b = ar.free[c][k-1]
		ar.free[c] = ar.free[c][:k-1]
		ar.freeBytes -= cap(b)
	}
	ar.mu.Unlock()
	if b == nil {
		b = make([]byte, 0, 1<<c)
	}
	ar.held = append(ar.held, b)
	return b[:0]
}

// takeHeld returns the open group's buffers, for its commit to release;
// the next group starts with none.
func (ar *arena) takeHeld() [][]byte {
	if ar == nil {
		return nil
	}
	h := ar.held
	ar.held = nil
	return h
}

// drop forgets the open group's buffers without recycling them: the
// statements of an abandoned group may still be referenced.
func (ar *arena) drop() {
	if ar != nil {
		ar.held = nil
	}
}

// release makes bufs, whose group has committed, free for reuse, up to
// maxArenaFree bytes in all.
func (ar *arena) release(bufs [][]byte) {
	if ar == nil || len(bufs) == 0 {
		return
	}
	ar.mu.Lock()
	defer ar.mu.Unlock()
	for _, b := range bufs {
		c := sizeClass(cap(b))
		if cap(b) != 1<<c || ar.freeBytes+cap(b) > maxArenaFree {
			continue
		}
		ar.free[c] = append(ar.free[c], b)
		ar.freeBytes += cap(b)
	}
}
