package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestVerificationCatchesCorruption runs a tiny update workload against the
// built-in subscription, corrupts one subscriber row before verification,
// and expects the cell to be reported as failed, not as a time.
func TestVerificationCatchesCorruption(t *testing.T) {
	o := options{scale: 0.01, runs: 1, workers: []int{0}}
	ctx := context.Background()

	ok := runCell(ctx, o, "update", "builtin", 0, "")
	if !ok.Verified || ok.CatchupS <= 0 {
		t.Fatalf("clean run: verified %v, catch-up %.2fs, error %q", ok.Verified, ok.CatchupS, ok.Error)
	}

	beforeVerify = func(ctx context.Context, sub *pgx.Conn) error {
		_, err := sub.Exec(ctx, "UPDATE foo SET value = -42 WHERE id = 7")
		return err
	}
	defer func() { beforeVerify = nil }()
	bad := runCell(ctx, o, "update", "builtin", 0, "")
	if bad.Verified {
		t.Fatal("a corrupted subscriber row was reported as verified")
	}
	if !strings.Contains(bad.Error, "verification") || !strings.Contains(bad.Error, "foo differs") {
		t.Fatalf("failure does not name the verification and the table: %q", bad.Error)
	}
	if bad.CatchupS != 0 || speedup(methodCatchup, &ok, &bad) != 0 {
		t.Fatalf("a failed cell carries a time: %+v", bad)
	}
}

// TestDrainWaitsForTheMarker runs the drain engine on a tiny update workload:
// it must see the marker's commit (or the cell would time out), on a tiny
// big-transaction (the transaction's commit), and is refused for a live
// workload.
func TestDrainWaitsForTheMarker(t *testing.T) {
	o := options{scale: 0.01, runs: 1, workers: []int{0}}
	ctx := context.Background()
	r := runCell(ctx, o, "update", "drain", 0, "")
	if !r.Verified || r.CatchupS <= 0 || r.Transactions != 10 {
		t.Fatalf("drain run: completed %v, catch-up %.2fs, %d transactions, error %q", r.Verified, r.CatchupS, r.Transactions, r.Error)
	}
	if r := runCell(ctx, o, "big-transaction", "drain", 0, ""); !r.Verified || r.CatchupS <= 0 {
		t.Fatalf("drain on big-transaction: completed %v, delay %.2fs, error %q", r.Verified, r.CatchupS, r.Error)
	}
	if r := runCell(ctx, o, "tpcb", "drain", 0, ""); r.Verified || !strings.Contains(r.Error, "catch-up workloads and big-transaction only") {
		t.Fatalf("drain on a live workload: completed %v, error %q", r.Verified, r.Error)
	}
}

// TestSpeedupComparesRates checks that a catch-up's speed-up compares
// transactions per second, not times: an engine handed a smaller backlog
// that it takes less time over but applies more slowly is slower.
func TestSpeedupComparesRates(t *testing.T) {
	base := &result{Verified: true, CatchupS: 5.0, CatchupRate: 64000} // 320,000 transactions
	r := &result{Verified: true, CatchupS: 4.8, CatchupRate: 62500}    // 300,000 transactions
	if got := speedup(methodCatchup, base, r); got < 0.97 || got > 0.98 {
		t.Fatalf("speed-up %.3f, want 62500/64000 = 0.977 (the ratio of times would be %.3f)", got, base.CatchupS/r.CatchupS)
	}
	// Without rates (a delay, or an old record), times are compared.
	if got := speedup(methodCatchup, &result{Verified: true, CatchupS: 6}, &result{Verified: true, CatchupS: 3}); got != 2 {
		t.Fatalf("speed-up %.3f without rates, want 2", got)
	}
}

// runCell measures one cell alone, o.runs times.
func runCell(ctx context.Context, o options, w, e string, workers int, mode string) result {
	c := newCell(o, w, e, workers, mode)
	for i := 0; i < o.runs; i++ {
		c.measureRun(ctx, o, i)
	}
	return c.summary()
}

// TestDrainTake feeds the drain pgoutput messages as the publisher sends
// them: the marker's commit, and big-transaction's transaction whole or
// streamed in blocks (its messages carrying the xid), committed or aborted.
func TestDrainTake(t *testing.T) {
	u32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	msg := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	rel := func(xid *uint32, id uint32, name string) []byte {
		b := []byte{'R'}
		if xid != nil {
			b = append(b, u32(*xid)...)
		}
		return msg(b, u32(id), []byte("public\x00"+name+"\x00"), []byte{'d', 0, 0})
	}
	ins := func(xid *uint32, id uint32) []byte {
		b := []byte{'I'}
		if xid != nil {
			b = append(b, u32(*xid)...)
		}
		return msg(b, u32(id), []byte{'N', 0, 0})
	}
	commit := func(end uint64) []byte {
		return msg([]byte{'C', 0}, binary.BigEndian.AppendUint64(nil, end-8), binary.BigEndian.AppendUint64(nil, end), make([]byte, 8))
	}
	streamCommit := func(xid uint32, end uint64) []byte {
		return msg([]byte{'c'}, u32(xid), []byte{0}, binary.BigEndian.AppendUint64(nil, end-8), binary.BigEndian.AppendUint64(nil, end), make([]byte, 8))
	}
	x7, x8 := uint32(7), uint32(8)
	begin := msg([]byte{'B'}, make([]byte, 16), u32(5))
	tests := []struct {
		name   string
		msgs   [][]byte
		marked bool
		big    int64
		pos    uint64
	}{
		{"the marker's commit", [][]byte{rel(nil, 1, markerTable), begin, ins(nil, 1), commit(100)}, true, 0, 100},
		{"big, whole", [][]byte{rel(nil, 2, "big"), begin, ins(nil, 2), commit(200)}, false, 1, 200},
		{"big, streamed", [][]byte{
			{'S', 0, 0, 0, 7, 1}, rel(&x7, 2, "big"), ins(&x7, 2), {'E'},
			begin, ins(nil, 3), commit(150), // another transaction between the blocks
			{'S', 0, 0, 0, 7, 0}, ins(&x7, 2), {'E'},
			streamCommit(7, 300),
		}, false, 1, 300},
		{"big, streamed and aborted", [][]byte{
			{'S', 0, 0, 0, 8, 1}, rel(&x8, 2, "big"), ins(&x8, 2), {'E'},
			msg([]byte{'A'}, u32(8), u32(8)),
			begin, ins(nil, 3), commit(400),
		}, false, 0, 400},
		{"the marker inside a stream is not the marker's commit", [][]byte{
			rel(nil, 1, markerTable), {'S', 0, 0, 0, 7, 1}, ins(&x7, 1), {'E'}, streamCommit(7, 500),
		}, false, 0, 500},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDrain("")
			for _, m := range tc.msgs {
				d.take(m)
			}
			if d.marked.Load() != tc.marked || d.bigDone.Load() != tc.big || d.pos.Load() != tc.pos {
				t.Errorf("marked %v, big transactions committed %d, position %d; want %v, %d, %d",
					d.marked.Load(), d.bigDone.Load(), d.pos.Load(), tc.marked, tc.big, tc.pos)
			}
		})
	}
}
