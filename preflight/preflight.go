// Package preflight checks, before parapply starts, everything a run needs
// of the publisher and the target for the settings given: the roles'
// privileges, the servers' settings, the publications and each published
// table's columns and types on the target. Each check ends ok, in a
// warning, or failed with the exact fix (the GRANT, the ALTER SYSTEM), as
// pg_upgrade --check reports; `parapply check` prints them, and `parapply
// run` refuses to start, before any slot is created, while one fails.
// What a run's own start checks again (the publisher's version and
// wal_level, the publications, the slot, prepared transactions and the
// replica role on the target) is judged by package judge, here and there
// alike, so that each problem has one wording and one fix.
package preflight

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/internal/pgerr"
	"github.com/parapply/parapply/preflight/judge"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/tablesync"
)

// Status is a check's outcome.
type Status string

// The outcomes, in order of weight.
const (
	OK      Status = "ok"
	Warning Status = "warning"
	Failed  Status = "failed"
	// Skipped: the check could not run (its side could not be reached,
	// or an earlier check failed); the report says why.
	Skipped Status = "skipped"
)

// Problem is one thing a check found, on one object.
type Problem struct {
	Object string `json:"object,omitempty"`
	What   string `json:"what"`
	Fix    string `json:"fix,omitempty"`
	// Fails is false for a warning, and for a check that could not
	// complete (Unfinished: a connection lost while it ran).
	Fails      bool `json:"fails"`
	Unfinished bool `json:"unfinished,omitempty"`
}

// Result is one check.
type Result struct {
	Side     string    `json:"side"` // publisher or target
	Check    string    `json:"check"`
	Status   Status    `json:"status"`
	Detail   string    `json:"detail,omitempty"`
	Problems []Problem `json:"problems,omitempty"`
}

// Report is every check, in the order they ran.
type Report struct {
	Results []Result `json:"results"`
	// Unreached names the sides that could not be reached: their other
	// checks did not run.
	Unreached []string `json:"unreached,omitempty"`
}

// Count counts the checks of a status.
func (r Report) Count(st Status) int {
	n := 0
	for _, c := range r.Results {
		if c.Status == st {
			n++
		}
	}
	return n
}

// Passed tells whether a run may start: no check failed, and every one
// could run.
func (r Report) Passed() bool { return r.Count(Failed) == 0 && r.Count(Skipped) == 0 }

// timeout bounds the whole report: every query is a catalog read.
const timeout = 60 * time.Second

// Run runs every check for the settings of a run (cfg, as parapply run
// starts with them). It never changes either server: what it tries
// (session_replication_role) is rolled back.
func Run(ctx context.Context, cfg subscriber.Config) Report {
	if cfg.ExistingData == "" {
		cfg.ExistingData = tablesync.ExistingError // as the copy takes it
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var rep Report
	pub := checkPublisher(ctx, cfg, &rep)
	checkTarget(ctx, cfg, pub, &rep)
	return rep
}

// add appends a check's result, its status the weightiest of its
// problems'.
func (r *Report) add(side, check, detail string, problems ...Problem) {
	st := OK
	for _, p := range problems {
		switch {
		case p.Fails:
			st = Failed
		case p.Unfinished && st != Failed:
			st = Skipped
		case st == OK:
			st = Warning
		}
	}
	r.Results = append(r.Results, Result{Side: side, Check: check, Status: st, Detail: detail, Problems: problems})
}

// has tells whether a check of that name was reported.
func (r *Report) has(side, check string) bool {
	for _, c := range r.Results {
		if c.Side == side && c.Check == check {
			return true
		}
	}
	return false
}

// unreachable records that side could not be reached, so none of its
// other checks ran.
func (r *Report) unreachable(side string) {
	r.skip(side, "the "+side+"'s other checks", "the "+side+" could not be reached")
	r.Unreached = append(r.Unreached, side)
}

// skip records a check that could not run, and why.
func (r *Report) skip(side, check, why string) {
	r.Results = append(r.Results, Result{Side: side, Check: check, Status: Skipped, Detail: why})
}

func fail(object, what, fix string) Problem {
	return Problem{Object: object, What: what, Fix: fix, Fails: true}
}

// broken is the problem of a check whose query failed: where the server
// answered with an error (a privilege, say) the check fails; where the
// connection broke it could not complete, which a run rides out as any
// fault.
func broken(object, what string, err error) Problem {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return fail(object, what+": "+pgerr.Text(err), "")
	}
	return Problem{Object: object, What: what + ": " + err.Error(), Unfinished: true}
}

// failing is the failed problem of a judgement, none for nil.
func failing(f *judge.Finding) []Problem {
	if f == nil {
		return nil
	}
	return []Problem{fail("", f.What, f.Fix)}
}

func warn(object, what, fix string) Problem {
	return Problem{Object: object, What: what, Fix: fix}
}

// quoteName quotes a schema-qualified name for a fix's SQL.
func quoteName(schema, name string) string {
	return fmt.Sprintf("%s.%s", ident(schema), ident(name))
}
