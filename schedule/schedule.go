// Package schedule decides which source transactions may be applied at the
// same time. It is a pure data structure in the style of etcd's raft
// package: no goroutines, no I/O, no clock. The caller feeds it units of
// work (one source transaction, or a group of consecutive small ones) in
// source commit order, each with the keys it touches, asks which units may
// start, and reports when they are done; the same inputs always give the
// same answers, so it is tested without a database.
//
// The rule: a unit waits for the last earlier unit that touched any of its
// keys and is not done yet, and for nothing else. Waiting is transitive
// through that earlier unit, which itself waited for the toucher before it,
// so every pair of units sharing a key is applied in source order. A barrier
// unit (a TRUNCATE, a schema change, a table whose target triggers could
// observe other tables) waits for every earlier unit, and every later unit
// waits for it.
//
// Keys are remembered only while the unit that last touched them is not done,
// so memory is bounded by the units in flight, not by the stream's history.
package schedule

import (
	"fmt"
	"hash/maphash"
	"slices"
)

// Key is something two units can conflict on: a row (table and replica
// identity), a value of a unique index, a referenced parent row, or a whole
// table. Equal keys must come from equal things; unequal things that hash to
// the same key only cost a needless wait.
type Key uint64

var seed = maphash.MakeSeed()

// MakeKey hashes what names a conflict, a table and then (for a row or an
// index value) the encoded values, into a Key. It is stable within one
// process, which is all a scheduler needs.
func MakeKey(table string, parts ...[]byte) Key {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(table)
	for _, p := range parts {
		var n [5]byte
		n[0], n[1], n[2], n[3], n[4] = 0, byte(len(p)>>24), byte(len(p)>>16), byte(len(p)>>8), byte(len(p))
		h.Write(n[:])
		h.Write(p)
	}
	return Key(h.Sum64())
}

// ID numbers units in the order they were added, from 1: source commit
// order.
type ID uint64

type unit struct {
	keys    []Key
	deps    []ID // units it waited for when added (some may be done since)
	barrier bool
	waits   int  // units not done yet that this one waits for
	waiters []ID // units waiting for this one
	started bool
	mark    ID // the last unit registered as waiting for this one
}

// Scheduler tracks the units in flight. Not safe for concurrent use: one
// goroutine owns it.
type Scheduler struct {
	next    ID
	low     ID // lowest unit not done yet (next when none)
	units   map[ID]*unit
	owner   map[Key]ID // last unit to touch each key, while it is not done
	barrier ID         // a barrier not done yet, or 0
	ready   []ID       // units that may start, in ID order
}

// New returns an empty scheduler.
func New() *Scheduler {
	return &Scheduler{next: 1, low: 1, units: map[ID]*unit{}, owner: map[Key]ID{}}
}

// Add registers the next unit in source commit order and returns its ID and
// the units it waits for (for figures and tests). keys may repeat; the slice
// is kept, so the caller must not change it afterwards.
func (s *Scheduler) Add(keys []Key, barrier bool) (ID, []ID) {
	id := s.next
	s.next++
	u := &unit{keys: keys, barrier: barrier}
	s.units[id] = u
	var deps []ID
	wait := func(d ID) {
		du, ok := s.units[d]
		if !ok || d == id || du.mark == id {
			return
		}
		du.mark = id
		deps = append(deps, d)
		du.waiters = append(du.waiters, id)
		u.waits++
	}
	if barrier {
		for d := range s.units {
			wait(d)
		}
		slices.Sort(deps)
		s.barrier = id
	} else if s.barrier != 0 {
		wait(s.barrier)
	}
	for _, k := range keys {
		if d, ok := s.owner[k]; ok {
			wait(d)
		}
		s.owner[k] = id
	}
	u.deps = deps
	if u.waits == 0 {
		s.ready = append(s.ready, id)
	}
	return id, deps
}

// Extend lets the worker that holds the started units first to last (a run
// of consecutive IDs it applies in one target transaction, in ID order)
// take last+1 as well, and marks it started: when last+1 is added, not
// started, neither it nor first is a barrier, and every unit it waits for
// is done or among first to last. Applied after them in the same
// transaction, it then still follows everything it shares a key with. Runs
// of consecutive IDs committed whole keep the commit order a prefix of the
// source order, so workers that wait for every earlier unit to commit never
// wait for each other in a cycle.
func (s *Scheduler) Extend(first, last ID) (ID, bool) {
	next, _, ok := s.Joinable(first, last)
	if !ok {
		return 0, false
	}
	u := s.units[next]
	if u.waits == 0 {
		if i := slices.Index(s.ready, next); i >= 0 {
			s.ready = slices.Delete(s.ready, i, i+1)
		}
	}
	u.started = true
	return next, true
}

// Joinable reports whether Extend(first, last) would take last+1, without
// taking it, and whether that unit waits for a unit of the batch (chained:
// no other worker could start it before the batch commits) rather than
// being ready.
func (s *Scheduler) Joinable(first, last ID) (next ID, chained, ok bool) {
	next = last + 1
	u, ok := s.units[next]
	f, fok := s.units[first]
	if !ok || !fok || u.started || u.barrier || f.barrier {
		return 0, false, false
	}
	if u.waits > 0 {
		for _, d := range u.deps {
			if _, pending := s.units[d]; pending && d < first {
				return 0, false, false
			}
		}
	}
	return next, u.waits > 0, true
}

// Ready returns the units that may start now, lowest first, and marks them
// started: each unit is returned once.
func (s *Scheduler) Ready() []ID {
	r := s.ready
	s.ready = nil
	for _, id := range r {
		s.units[id].started = true
	}
	return r
}

// Next returns the lowest unit that may start now and marks it started, or
// false when none may.
func (s *Scheduler) Next() (ID, bool) {
	if len(s.ready) == 0 {
		return 0, false
	}
	id := s.ready[0]
	s.ready = s.ready[1:]
	s.units[id].started = true
	return id, true
}

// Done records that a started unit is applied and committed; units waiting
// only for it become ready.
func (s *Scheduler) Done(id ID) error {
	u, ok := s.units[id]
	if !ok || !u.started {
		return fmt.Errorf("schedule: unit %d is not in flight", id)
	}
	delete(s.units, id)
	for _, k := range u.keys {
		if s.owner[k] == id {
			delete(s.owner, k)
		}
	}
	if s.barrier == id {
		s.barrier = 0
	}
	for _, w := range u.waiters {
		wu, ok := s.units[w]
		if !ok {
			continue // a unit of the same batch, reported done first
		}
		if wu.waits--; wu.waits == 0 && !wu.started {
			s.insertReady(w)
		}
	}
	for s.low < s.next {
		if _, ok := s.units[s.low]; ok {
			break
		}
		s.low++
	}
	return nil
}

// insertReady keeps ready in ID order, so the oldest unit is always served
// first (with commit order preserved, the oldest unit is the one everyone
// may be waiting for).
func (s *Scheduler) insertReady(id ID) {
	i := len(s.ready)
	for i > 0 && s.ready[i-1] > id {
		i--
	}
	s.ready = append(s.ready, 0)
	copy(s.ready[i+1:], s.ready[i:])
	s.ready[i] = id
}

// MayCommit reports whether every unit before id is done: with commit order
// preserved, a unit commits only then.
func (s *Scheduler) MayCommit(id ID) bool { return id == s.low }

// Oldest returns the lowest unit not done yet (0 when none is in flight).
func (s *Scheduler) Oldest() ID {
	if s.low == s.next {
		return 0
	}
	return s.low
}

// ReadyCount returns the number of units that may start now.
func (s *Scheduler) ReadyCount() int { return len(s.ready) }

// InFlight returns the number of units added and not done.
func (s *Scheduler) InFlight() int { return len(s.units) }

// Keys returns the number of keys remembered; it is bounded by the keys of
// the units in flight.
func (s *Scheduler) Keys() int { return len(s.owner) }
