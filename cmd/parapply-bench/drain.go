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
}

func newDrain(pubDSN string) *drain { return &drain{dsn: pubDSN, moved: make(chan struct{}, 1)} }

func (d *drain) start(ctx context.Context) error {
	// PARAPPLY_PACED and PARAPPLY_TRICKLE switch the drain's reads as they
	// switch parapply's (see source.Config), for measurements alike.
	src, err := source.Connect(ctx, source.Config{DSN: d.dsn, Slot: "bench", Publications: []string{"bench"}, AppName: d.appName(), StatusInterval: time.Second,
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

// take looks at one pgoutput message of a transaction that is not streamed
// (catch-up workloads have small transactions) only as far as it must to
// tell the marker's commit.
func (d *drain) take(m []byte) {
	if len(m) == 0 {
		return
	}
	switch m[0] {
	case 'R':
		// 'R', relation id, namespace, name: the marker table is public.
		if len(m) > 5 && bytes.HasPrefix(m[5:], []byte("public\x00"+markerTable+"\x00")) {
			d.marker = binary.BigEndian.Uint32(m[1:5])
		}
	case 'I', 'U':
		if len(m) >= 5 && d.marker != 0 && binary.BigEndian.Uint32(m[1:5]) == d.marker {
			d.seen = true
		}
	case 'C':
		if len(m) >= 18 {
			d.pos.Store(binary.BigEndian.Uint64(m[10:18]))
			if d.seen {
				d.marked.Store(true)
			}
			d.seen = false
			select {
			case d.moved <- struct{}{}:
			default:
			}
		}
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
	deadline := time.Now().Add(markerWait)
	for !d.marked.Load() {
		if time.Now().After(deadline) {
			return fmt.Errorf("the marker's commit did not arrive within %s", markerWait)
		}
		if err := sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}
