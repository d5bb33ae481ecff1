package citus

import (
	"encoding/binary"
	"encoding/hex"
	"math/bits"
	"strconv"
	"strings"
)

// Citus places a row of a hash-distributed table by the 32-bit hash of its
// distribution value under the value's type's default hash function, the
// same PostgreSQL's hash indexes use (hashint4, hashint8, hashtext, ...):
// Bob Jenkins' lookup3 hash as PostgreSQL's hashfn.c computes it. The
// functions below compute it for the types a distribution column most
// often has, from the value as the stream carries it (text or binary), so
// that a run of changes can be split by shard without asking the server.
// A wrong hash would only make a statement span several shards: the
// statements prune shards by the values themselves (see the apply's
// distribution filter).

func rot(x uint32, k int) uint32 { return bits.RotateLeft32(x, k) }

func mix(a, b, c uint32) (uint32, uint32, uint32) {
	a -= c
	a ^= rot(c, 4)
	c += b
	b -= a
	b ^= rot(a, 6)
	a += c
	c -= b
	c ^= rot(b, 8)
	b += a
	a -= c
	a ^= rot(c, 16)
	c += b
	b -= a
	b ^= rot(a, 19)
	a += c
	c -= b
	c ^= rot(b, 4)
	b += a
	return a, b, c
}

func final(a, b, c uint32) uint32 {
	c ^= b
	c -= rot(b, 14)
	a ^= c
	a -= rot(c, 11)
	b ^= a
	b -= rot(a, 25)
	c ^= b
	c -= rot(b, 16)
	a ^= c
	a -= rot(c, 4)
	b ^= a
	b -= rot(a, 14)
	c ^= b
	c -= rot(b, 24)
	return c
}

// hashBytes is PostgreSQL's hash_bytes (hash_any) on a little-endian
// machine.
func hashBytes(k []byte) uint32 {
	a := 0x9e3779b9 + uint32(len(k)) + 3923095
	b, c := a, a
	for len(k) >= 12 {
		a += binary.LittleEndian.Uint32(k)
		b += binary.LittleEndian.Uint32(k[4:])
		c += binary.LittleEndian.Uint32(k[8:])
		a, b, c = mix(a, b, c)
		k = k[12:]
	}
	// The last 11 bytes; the lowest byte of c is left for the length.
	switch len(k) {
	case 11:
		c += uint32(k[10]) << 24
		fallthrough
	case 10:
		c += uint32(k[9]) << 16
		fallthrough
	case 9:
		c += uint32(k[8]) << 8
		fallthrough
	case 8:
		b += binary.LittleEndian.Uint32(k[4:])
		a += binary.LittleEndian.Uint32(k)
	case 7:
		b += uint32(k[6]) << 16
		fallthrough
	case 6:
		b += uint32(k[5]) << 8
		fallthrough
	case 5:
		b += uint32(k[4])
		fallthrough
	case 4:
		a += binary.LittleEndian.Uint32(k)
	case 3:
		a += uint32(k[2]) << 16
		fallthrough
	case 2:
		a += uint32(k[1]) << 8
		fallthrough
	case 1:
		a += uint32(k[0])
	}
	return final(a, b, c)
}

// hashUint32 is PostgreSQL's hash_bytes_uint32 (hash_uint32).
func hashUint32(k uint32) uint32 {
	a := uint32(0x9e3779b9) + 4 + 3923095
	b, c := a, a
	a += k
	return final(a, b, c)
}

// hashInt8 is hashint8: the halves folded so that an int8 equal to an
// int4 hashes alike.
func hashInt8(v int64) uint32 {
	lo, hi := uint32(v), uint32(v>>32)
	if v >= 0 {
		lo ^= hi
	} else {
		lo ^= ^hi
	}
	return hashUint32(lo)
}

// Type OIDs whose hash a Hasher computes.
const (
	oidInt2    = 21
	oidInt4    = 23
	oidInt8    = 20
	oidText    = 25
	oidVarchar = 1043
	oidUUID    = 2950
)

// Hasher computes the hash of a value of one type, given as text or in
// binary; ok is false when it cannot (a value it cannot parse).
type Hasher func(v []byte, binaryForm bool) (h int32, ok bool)

// HasherFor returns the Hasher of a type OID under a deterministic
// collation, or nil when it has none (the run is then not split by shard).
func HasherFor(typ uint32) Hasher {
	switch typ {
	case oidInt2, oidInt4, oidInt8:
		size := map[uint32]int{oidInt2: 2, oidInt4: 4, oidInt8: 8}[typ]
		return func(v []byte, bin bool) (int32, bool) {
			var n int64
			switch {
			case bin && len(v) == size:
				switch size {
				case 2:
					n = int64(int16(binary.BigEndian.Uint16(v)))
				case 4:
					n = int64(int32(binary.BigEndian.Uint32(v)))
				default:
					n = int64(binary.BigEndian.Uint64(v))
				}
			case bin:
				return 0, false
			default:
				var err error
				if n, err = strconv.ParseInt(strings.TrimSpace(string(v)), 10, size*8); err != nil {
					return 0, false
				}
			}
			if typ == oidInt8 {
				return int32(hashInt8(n)), true
			}
			return int32(hashUint32(uint32(int32(n)))), true
		}
	case oidText, oidVarchar:
		// Binary and text forms are the same bytes.
		return func(v []byte, _ bool) (int32, bool) { return int32(hashBytes(v)), true }
	case oidUUID:
		return func(v []byte, bin bool) (int32, bool) {
			if bin {
				if len(v) != 16 {
					return 0, false
				}
				return int32(hashBytes(v)), true
			}
			var u [16]byte
			s := strings.ReplaceAll(strings.Trim(string(v), "{}"), "-", "")
			if len(s) != 32 {
				return 0, false
			}
			if _, err := hex.Decode(u[:], []byte(s)); err != nil {
				return 0, false
			}
			return int32(hashBytes(u[:])), true
		}
	}
	return nil
}
