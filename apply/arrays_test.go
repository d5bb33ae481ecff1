package apply

import (
	"testing"
	"unsafe"
)

func TestArena(t *testing.T) {
	t.Run("a committed group's arrays are reused", func(t *testing.T) {
		var ar arena
		a := ar.get(5000)
		b := ar.get(9000)
		if cap(a) < 5000 || cap(b) < 9000 || len(a) != 0 || len(b) != 0 {
			t.Fatalf("get gave len %d cap %d and len %d cap %d", len(a), cap(a), len(b), cap(b))
		}
		held := ar.takeHeld()
		if len(held) != 2 || len(ar.held) != 0 {
			t.Fatalf("takeHeld returned %d buffers, left %d", len(held), len(ar.held))
		}
		// Before the release, a new group gets other memory.
		if c := ar.get(5000); unsafe.SliceData(c) == unsafe.SliceData(a) {
			t.Fatal("a buffer of a group not committed yet was given out again")
		}
		ar.drop()
		ar.release(held)
		if c := ar.get(5000); unsafe.SliceData(c) != unsafe.SliceData(a) {
			t.Error("the committed group's buffer of the same size class was not reused")
		}
		if c := ar.get(12000); unsafe.SliceData(c) != unsafe.SliceData(b) {
			t.Error("a 16 kB buffer was not reused for 12 kB")
		}
		if ar.freeBytes != 0 {
			t.Errorf("freeBytes %d after taking every free buffer, want 0", ar.freeBytes)
		}
	})
	t.Run("an abandoned group's arrays are never reused", func(t *testing.T) {
		var ar arena
		a := ar.get(5000)
		ar.drop()
		ar.release(ar.takeHeld())
		if c := ar.get(5000); unsafe.SliceData(c) == unsafe.SliceData(a) {
			t.Fatal("a dropped buffer was given out again")
		}
	})
	t.Run("small arrays and a nil arena allocate", func(t *testing.T) {
		var ar arena
		if b := ar.get(100); cap(b) < 100 || len(ar.held) != 0 {
			t.Errorf("a small array: cap %d, %d held", cap(b), len(ar.held))
		}
		var none *arena
		if b := none.get(1 << 20); cap(b) < 1<<20 {
			t.Errorf("nil arena: cap %d", cap(b))
		}
		none.release([][]byte{make([]byte, 0, 8192)})
		none.drop()
		if none.takeHeld() != nil {
			t.Error("a nil arena held buffers")
		}
	})
	t.Run("what it keeps is bounded", func(t *testing.T) {
		var ar arena
		for range maxArenaFree/(1<<20) + 8 {
			ar.get(1 << 20)
		}
		ar.release(ar.takeHeld())
		if ar.freeBytes > maxArenaFree {
			t.Errorf("keeps %d bytes, more than %d", ar.freeBytes, maxArenaFree)
		}
		if ar.freeBytes != maxArenaFree {
			t.Errorf("keeps %d bytes, want the bound %d filled", ar.freeBytes, maxArenaFree)
		}
		// A buffer not from a size class (grown by append) is not kept.
		before := ar.freeBytes
		ar.release([][]byte{make([]byte, 0, 5000)})
		if ar.freeBytes != before {
			t.Error("a buffer of no size class was kept")
		}
	})
}
