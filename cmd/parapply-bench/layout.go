package main

// Layouts say where a run's processes may execute. On one machine (shared)
// the publisher, its clients and walsender, the target and the engine take
// CPU from one another: every microsecond parapply spends is taken from the
// publisher or the target. Production runs them on two machines; separate
// models that by giving each side half of the CPUs: the publisher's server
// (its walsender included) and the benchmark's clients one half, the
// subscriber's server (the built-in's apply worker, parapply's sessions)
// and the parapply process the other.
const (
	layoutShared   = "shared"
	layoutSeparate = "separate"
)

// layouts are the layouts --layout accepts.
var layouts = []string{layoutShared, layoutSeparate}
