package apply

import (
	"slices"
	"testing"
	"time"

	"github.com/parapply/parapply/internal/pgtest"
)

// TestTune checks the tuner's one call into an applier on a real server:
// the signals it reads (the session's backend, the prefetch connections
// and their backends), the verdicts it passes on to the applier's own
// prefetcher (kept for a prefetcher opened later; unjudged changes
// nothing), that an applier sharing another's prefetcher neither reports
// nor changes it, and that the call does not wait for a round trip in
// flight (it comes from the tuner's goroutine; under -race, touching the
// applier's round trip state from there is a data race).
func TestTune(t *testing.T) {
	ctx, srv := pgtest.ForTest(t, "apply-tune", 2*time.Minute)
	a, err := Open(ctx, Config{DSN: srv.DSN("postgres"), Prefetch: true, PrefetchConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(ctx)
	pid := a.Conn().PgConn().PID()

	// No table has needed reading ahead: no prefetch connection yet. A
	// verdict given now is kept for the prefetcher opened later.
	if s := a.Tune(DiskWaiting, []uint32{7}); s.PID != pid || s.PrefetchConns != 0 || !slices.Equal(s.PrefetchPIDs, []uint32{7}) || s.Executed != 0 {
		t.Fatalf("before the prefetcher opens: %+v, want PID %d, no prefetch connection, pids [7]", s, pid)
	}
	pf := a.readAhead.shared.get()
	if pf == nil {
		t.Fatal("the prefetcher did not open")
	}
	if !pf.waits.Load() || !a.readAhead.slow() {
		t.Fatal("a prefetcher opened after DiskWaiting was not told its reads wait")
	}
	pf.grow()
	deadline := time.Now().Add(30 * time.Second)
	for a.Tune(DiskUnjudged, nil).PrefetchConns < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the prefetcher did not open its second connection within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s := a.Tune(DiskUnjudged, []uint32{7})
	if len(s.PrefetchPIDs) != 3 || s.PrefetchPIDs[0] != 7 || slices.Contains(s.PrefetchPIDs[1:], pid) || slices.Contains(s.PrefetchPIDs[1:], 0) {
		t.Errorf("prefetch backends %v, want 7 then the two prefetch connections' (not the applier's %d)", s.PrefetchPIDs, pid)
	}

	for _, tc := range []struct {
		verdict DiskWaits
		slow    bool  // statements wait for their rows
		retire  int32 // prefetch connections to close
	}{
		{DiskFast, false, 1},
		{DiskUnjudged, false, 1},
		{DiskWaiting, true, 0},
		{DiskUnjudged, true, 0},
	} {
		a.Tune(tc.verdict, nil)
		if a.readAhead.slow() != tc.slow || pf.waits.Load() != tc.slow || pf.retire.Load() != tc.retire {
			t.Errorf("after verdict %d: slow %v, prefetcher waits %v, retiring %d; want %v, %v, %d",
				tc.verdict, a.readAhead.slow(), pf.waits.Load(), pf.retire.Load(), tc.slow, tc.slow, tc.retire)
		}
	}

	// A worker's applier reads ahead on the reader's prefetcher: it
	// reports none of it, and a verdict given to it changes nothing.
	w := newApplier(Config{Prefetch: true}, nil)
	w.ShareReadAhead(a)
	if s := w.Tune(DiskFast, []uint32{7}); s.PrefetchConns != 0 || !slices.Equal(s.PrefetchPIDs, []uint32{7}) {
		t.Errorf("an applier sharing the prefetcher reports %+v", s)
	}
	if !a.readAhead.slow() || pf.retire.Load() != 0 {
		t.Error("a verdict given to an applier sharing the prefetcher changed it")
	}

	// A round trip in flight: the tuner's call returns without waiting for
	// it, and leaves it to the applier.
	a.Begin(Txn{XID: 1})
	a.queue("SELECT pg_catalog.pg_sleep(3)", "sleeping", -1)
	if err := a.sendQueuedAsync(ctx, nil); err != nil {
		t.Fatal(err)
	}
	got := make(chan TuneSignals, 1)
	go func() { got <- a.Tune(DiskUnjudged, nil) }()
	select {
	case s := <-got:
		if s.PID != pid {
			t.Errorf("during a round trip: PID %d, want %d", s.PID, pid)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Tune did not return within 30 s during a round trip")
	}
	if busy, err := a.Busy(); !busy || err != nil {
		t.Errorf("after Tune, the round trip in flight: busy %v, error %v; want it still in flight, for the applier to take", busy, err)
	}
	a.Abort(ctx)
}
