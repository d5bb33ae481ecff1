package main

import (
	"errors"
	"log/slog"
	"time"

	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/conflict"
	"github.com/parapply/parapply/schemacopy"
	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/tablesync"
)

// options holds the settings typed, each read by its kind (see settings):
// what the commands use once loadConfig has resolved them as text.
type options struct {
	Source, Target       string
	Publications         []string
	Slot                 string
	ApplicationName      string
	SynchronousCommit    apply.SynchronousCommit
	Streaming            bool
	DecodingWorkMem      int // bytes; 0 keeps the publisher's own
	TwoPhase             bool
	Failover             bool
	Origin               source.Origin
	DetectConflicts      bool
	DetectConflictsAsked bool // on or off, not auto
	Conflicts            *conflict.Rules
	DetectUpdateDeleted  bool
	MaxRetention         time.Duration
	MaxClockSkew         time.Duration
	OnError              subscriber.OnError
	DDL                  subscriber.DDLMode
	StreamWorkers        int
	SpillDirectory       string
	Schema               schemacopy.Mode
	PGDump               string
	CopyData             bool
	CopyWorkers          int
	CopyDeferIndexes     bool
	SharedTables         bool
	ExistingData         tablesync.ExistingData
	Workers              int
	AutoWorkers          bool
	MaxWorkers           int
	CommitOrder          subscriber.CommitOrder
	Prefetch             bool
	Binary               bool
	PrefetchConnections  int
	BatchRows            int
	GroupMaxChanges      int
	GroupMaxBytes        int
	GroupMaxDelay        time.Duration
	Sequences            sequences.Mode
	SequenceSyncInterval time.Duration
	LockTimeout          time.Duration
	ReconnectTimeout     time.Duration
	StatusInterval       time.Duration
	MetricsAddr          string
	CPUProfile           string
	LogFormat            logFormat
	LogLevel             slog.Level
}

// options reads the named settings (every one if none is named) into their
// typed fields, in the order of settings. The error is the first bad
// value's, naming its setting; the others are read all the same, so that a
// command can name a setting it lacks before a bad one.
func (c config) options(names ...string) (options, error) {
	var o options
	var first error
	for _, s := range settings {
		if len(names) > 0 && !contains(names, s.name) {
			continue
		}
		if err := s.kind(&o).set(s.name, c[s.name]); err != nil && first == nil {
			first = err
		}
	}
	return o, first
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

// validate refuses a run without the settings it cannot start without,
// naming each and where to give it.
func (o options) validate() error {
	switch {
	case o.Source == "":
		return errors.New("no source given: set --source (or source in the config file, or PARAPPLY_SOURCE) to the publisher's connection string")
	case o.Target == "":
		return errors.New("no target given: set --target (or target in the config file, or PARAPPLY_TARGET) to the target's connection string")
	case len(o.Publications) == 0:
		return errors.New("no publication given: set --publication to the publication(s) to subscribe to")
	}
	return nil
}
