package subscriber

import (
	"errors"

	"github.com/parapply/parapply/internal/enum"
)

// OnError is what a source transaction that cannot be applied does: stop
// parapply, naming it, or be skipped, its changes written to
// parapply.conflicts (the on_error setting).
type OnError string

// The values of OnError.
const (
	OnErrorStop OnError = "stop"
	OnErrorSkip OnError = "skip_transaction"
)

// OnErrors lists on_error's values, for ParseOnError and the help text.
var OnErrors = []OnError{OnErrorStop, OnErrorSkip}

// ParseOnError reads the on_error setting, naming it and its values when s
// is none of them.
func ParseOnError(s string) (OnError, error) { return enum.Parse("on_error", s, OnErrors) }

// DDLMode is what parapply does with the DDL the publisher's capture
// (parapply ddl install) or parapply.replicate_ddl sends: nothing (off, the
// messages are passed over as the built-in subscription passes them), or
// run it on the target at its place in the stream (apply) (the ddl
// setting).
type DDLMode string

// The values of DDLMode.
const (
	DDLOff   DDLMode = "off"
	DDLApply DDLMode = "apply"
)

// DDLModes lists ddl's values, for ParseDDL and the help text.
var DDLModes = []DDLMode{DDLOff, DDLApply}

// ParseDDL reads the ddl setting, naming it and its values when s is none
// of them.
func ParseDDL(s string) (DDLMode, error) { return enum.Parse("ddl", s, DDLModes) }

// CommitOrder is the order transactions commit in with workers: after every
// earlier one (preserve), or as soon as those it depends on have
// (dependency) (the commit_order setting).
type CommitOrder string

// The values of CommitOrder.
const (
	CommitPreserve   CommitOrder = "preserve"
	CommitDependency CommitOrder = "dependency"
)

// CommitOrders lists commit_order's values, for ParseCommitOrder and the
// help text.
var CommitOrders = []CommitOrder{CommitPreserve, CommitDependency}

// ParseCommitOrder reads the commit_order setting, naming it and its values
// when s is none of them.
func ParseCommitOrder(s string) (CommitOrder, error) {
	return enum.Parse("commit_order", s, CommitOrders)
}

// Validate refuses a configuration whose settings contradict each other,
// with an error that names them and how to settle it; each setting's own
// value is checked where it is read.
func (c Config) Validate() error {
	if c.DetectUpdateDeleted && !c.DetectConflicts {
		return errors.New("detect_update_deleted is on, but detect_conflicts is off: turn detect_conflicts on, or detect_update_deleted off")
	}
	if !c.DetectConflicts && c.Conflicts.String() != "" {
		return errors.New("conflict_resolution is set, but detect_conflicts is off: turn detect_conflicts on, or leave conflict_resolution empty")
	}
	return nil
}
