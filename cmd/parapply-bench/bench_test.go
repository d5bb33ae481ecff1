package main

import (
	"context"
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
// it must see the marker's commit (or the cell would time out), and is
// refused for a workload that is not a catch-up.
func TestDrainWaitsForTheMarker(t *testing.T) {
	o := options{scale: 0.01, runs: 1, workers: []int{0}}
	ctx := context.Background()
	r := runCell(ctx, o, "update", "drain", 0, "")
	if !r.Verified || r.CatchupS <= 0 || r.Transactions != 10 {
		t.Fatalf("drain run: completed %v, catch-up %.2fs, %d transactions, error %q", r.Verified, r.CatchupS, r.Transactions, r.Error)
	}
	if r := runCell(ctx, o, "tpcb", "drain", 0, ""); r.Verified || !strings.Contains(r.Error, "catch-up workloads only") {
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
