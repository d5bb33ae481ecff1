package citus

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/parapply/parapply/internal/pgtest"
)

// TestHashMatchesServer compares each Hasher with the server's own hash
// function on values of every length and sign, in text and in binary.
func TestHashMatchesServer(t *testing.T) {
	ctx, srv := pgtest.ForTest(t, "citus-hash", 2*time.Minute)
	conn := pgtest.Connect(ctx, t, srv.DSN("postgres"))
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	ints := []int64{0, 1, -1, 2147483647, -2147483648, 32767, -32768}
	for range 200 {
		ints = append(ints, int64(rng.Int32()))
	}
	big := []int64{1 << 40, -(1 << 40), 9223372036854775807, -9223372036854775808}
	for range 200 {
		big = append(big, int64(rng.Uint64()))
	}
	var texts []string
	for n := range 40 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		texts = append(texts, string(b), "é"+string(b))
	}
	type tc struct {
		typ  uint32
		fn   string
		cast string
		text string
		bin  []byte
	}
	var cases []tc
	for _, v := range ints {
		if v >= -32768 && v <= 32767 {
			b := binary.BigEndian.AppendUint16(nil, uint16(int16(v)))
			cases = append(cases, tc{oidInt2, "hashint2", "int2", strconv.FormatInt(v, 10), b})
		}
		cases = append(cases, tc{oidInt4, "hashint4", "int4", strconv.FormatInt(v, 10), binary.BigEndian.AppendUint32(nil, uint32(int32(v)))})
		cases = append(cases, tc{oidInt8, "hashint8", "int8", strconv.FormatInt(v, 10), binary.BigEndian.AppendUint64(nil, uint64(v))})
	}
	for _, v := range big {
		cases = append(cases, tc{oidInt8, "hashint8", "int8", strconv.FormatInt(v, 10), binary.BigEndian.AppendUint64(nil, uint64(v))})
	}
	for _, s := range texts {
		cases = append(cases, tc{oidText, "hashtext", "text", s, []byte(s)}, tc{oidVarchar, "hashtext", "varchar", s, []byte(s)})
	}
	for range 50 {
		var u [16]byte
		for i := range u {
			u[i] = byte(rng.IntN(256))
		}
		s := fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
		cases = append(cases, tc{oidUUID, "uuid_hash", "uuid", s, u[:]})
	}
	for _, c := range cases {
		var want int32
		if err := conn.QueryRow(ctx, "SELECT "+c.fn+"($1::text::"+c.cast+")", c.text).Scan(&want); err != nil {
			t.Fatal(err)
		}
		h := HasherFor(c.typ)
		for _, bin := range []bool{false, true} {
			v := []byte(c.text)
			if bin {
				v = c.bin
			}
			got, ok := h(v, bin)
			if !ok || got != want {
				t.Errorf("%s(%q) binary=%v: got %d (ok %v), the server %d", c.fn, c.text, bin, got, ok, want)
			}
		}
	}
	if HasherFor(1700) != nil {
		t.Error("numeric has a Hasher; none was written for it")
	}
}
