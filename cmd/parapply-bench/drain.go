package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/source"
)

// drain is the floor of a catch-up: it reads the publication's stream with
// parapply's own reader and throws it away, confirming each commit as it
// arrives. What remains of its time is the publisher's walsender decoding
// and sending the changes, which no subscriber that reads pgoutput over the
// replication protocol can go below.
type drain struct {
	dsn    string
	cancel context.CancelFunc
	done   chan error
	src    *source.Source
	marker uint32 // relation id of the marker table, once described
	seen   bool   // the open transaction changed the marker table
	marked atomic.Bool
	pos    atomic.Uint64
	moved  chan struct{}
	// For big-transaction: the relation id of its table, the streamed
	// transactions that inserted into it (by xid), whether the one being
	// streamed now is one, and how many of its transactions have
	// committed (streamed or not).
	big       uint32
	bigXIDs   map[uint32]bool
	streamXID uint32
	inStream  bool
	bigDone   atomic.Int64
}

func newDrain(pubDSN string) *drain {
	return &drain{dsn: pubDSN, moved: make(chan struct{}, 1), bigXIDs: map[uint32]bool{}}
}

func (d *drain) start(ctx context.Context) error {
	// PARAPPLY_PACED and PARAPPLY_TRICKLE switch the drain's reads as they
	// switch parapply's (see source.Config), for measurements alike.
	// Streaming (1MB held before a block goes) and binary values, as
	// parapply asks by default: a big transaction reaches it in blocks as
	// the publisher writes it.
	src, err := source.Connect(ctx, source.Config{DSN: d.dsn, Slot: "bench", Publications: []string{"bench"}, AppName: d.appName(), StatusInterval: time.Second,
		Streaming: true, Binary: true, DecodingWorkMem: "1MB",
		Unpaced: os.Getenv("PARAPPLY_PACED") == "off", NoTrickle: os.Getenv("PARAPPLY_TRICKLE") == "off"})
	if err != nil {
		return err
	}
	if err := src.CreateSlot(ctx); err != nil {
		src.Close()
		return err
	}
	d.src, d.done = src, make(chan error, 1)
	d.marked.Store(false)
	ctx, d.cancel = context.WithCancel(context.Background())
	frames := make(chan []source.Frame, 16)
	go func() { d.done <- src.Stream(ctx, 0, frames, d) }()
	go func() {
		for {
			select {
			case fs := <-frames:
				for _, f := range fs {
					d.take(f.Data)
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return nil
}

// take looks at one pgoutput message only as far as it must to tell the
// marker's commit and the commit of big-transaction's transaction, which
// comes streamed (in blocks between 'S' and 'E', whose messages carry the
// xid after their tag, committed by 'c') or whole.
func (d *drain) take(m []byte) {
	if len(m) == 0 {
		return
	}
	body := m[1:]
	if d.inStream && m[0] != 'E' && len(body) >= 4 {
		body = body[4:] // the xid of the streamed transaction
	}
	switch m[0] {
	case 'S':
		if len(m) >= 5 {
			d.inStream, d.streamXID = true, binary.BigEndian.Uint32(m[1:5])
		}
	case 'E':
		d.inStream = false
	case 'R':
		// 'R', relation id, namespace, name: the tables are in public.
		if len(body) > 4 {
			switch {
			case bytes.HasPrefix(body[4:], []byte("public\x00"+markerTable+"\x00")):
				d.marker = binary.BigEndian.Uint32(body[:4])
			case bytes.HasPrefix(body[4:], []byte("public\x00big\x00")):
				d.big = binary.BigEndian.Uint32(body[:4])
			}
		}
	case 'I', 'U':
		if len(body) < 4 {
			return
		}
		switch rel := binary.BigEndian.Uint32(body[:4]); {
		case rel == 0:
		case rel == d.marker && !d.inStream:
			d.seen = true
		case rel == d.big && d.inStream:
			d.bigXIDs[d.streamXID] = true
		case rel == d.big:
			d.bigXIDs[0] = true // the open transaction, not streamed
		}
	case 'c':
		// 'c', xid, flags, commit LSN, end LSN, time.
		if len(m) >= 22 {
			xid := binary.BigEndian.Uint32(m[1:5])
			d.committed(binary.BigEndian.Uint64(m[14:22]), d.bigXIDs[xid])
			delete(d.bigXIDs, xid)
		}
	case 'A':
		if len(m) >= 5 {
			delete(d.bigXIDs, binary.BigEndian.Uint32(m[1:5]))
		}
	case 'C':
		if len(m) >= 18 {
			if d.seen {
				d.marked.Store(true)
			}
			d.seen = false
			d.committed(binary.BigEndian.Uint64(m[10:18]), d.bigXIDs[0])
			delete(d.bigXIDs, 0)
		}
	}
}

// committed records a commit ending at end, of one of big-transaction's
// transactions if big.
func (d *drain) committed(end uint64, big bool) {
	d.pos.Store(end)
	if big {
		d.bigDone.Add(1)
	}
	select {
	case d.moved <- struct{}{}:
	default:
	}
}

// Positions reports every commit received as applied and durable.
func (d *drain) Positions() (applied, durable parapply.LSN, lastCommit time.Time) {
	p := parapply.LSN(d.pos.Load())
	return p, p, time.Time{}
}

func (d *drain) Moved() <-chan struct{} { return d.moved }

func (d *drain) stop() float64 {
	if d.cancel == nil {
		return 0
	}
	d.cancel()
	if err := <-d.done; err != nil && !errors.Is(err, context.Canceled) {
		logf("drain: %v", err)
	}
	d.src.Close()
	d.cancel = nil
	return 0
}

func (d *drain) appName() string { return "drain" }

func (d *drain) close() { d.stop() }

// waitMarked waits, as long as waitMarker would, for the marker's commit to
// arrive.
func (d *drain) waitMarked(ctx context.Context) error {
	return d.waitFor(ctx, "the marker's commit", d.marked.Load)
}

// waitBig waits, as long as waitMarker would, until n of big-transaction's
// transactions have committed.
func (d *drain) waitBig(ctx context.Context, n int64) error {
	return d.waitFor(ctx, "the big transaction's commit", func() bool { return d.bigDone.Load() >= n })
}

// waitFor polls arrived until it reports true, for markerWait at most;
// what names it in the error.
func (d *drain) waitFor(ctx context.Context, what string, arrived func() bool) error {
	deadline := time.Now().Add(markerWait)
	for !arrived() {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not arrive within %s", what, markerWait)
		}
		if err := sleep(ctx, time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}
