package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/parapply/parapply/preflight"
	"github.com/parapply/parapply/subscriber"
)

// CheckCommand checks everything a run with these settings needs of the
// publisher and the target, as pg_upgrade --check does: one line per
// check, ok or what is wrong and the exact fix; exit 0 only when none
// fails (warnings do not count).
type CheckCommand struct {
	out io.Writer
}

// Run is parapply check: it takes every setting of run, and --json.
func (cmd *CheckCommand) Run(ctx context.Context, args []string) error {
	out := cmd.out
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	usageFor(fs, "parapply check --source DSN --target DSN --publication NAME[,NAME] [--config FILE] [--json]   (takes every setting of run)")
	c, err := loadConfig(fs, args)
	if err != nil {
		return err
	}
	cfg, err := subscriberConfig(c, nil)
	if err != nil {
		return err
	}
	rep := preflight.Run(ctx, cfg)
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		printReport(out, rep)
	}
	if !rep.Passed() {
		return subscriber.Permanent(fmt.Errorf("%s: parapply run refuses to start until they pass", countChecks(rep.Count(preflight.Failed), rep.Count(preflight.Skipped), 0)))
	}
	return nil
}

// preflightGate runs the checks before a run starts, before any slot is
// created: a failed one stops it (the error lists each problem and its
// fix; nothing was created on either server). Warnings are left to
// parapply check (the run's own, where they matter, are logged as it
// meets them); a server that cannot be reached is left to the run, which
// rides such faults out.
func preflightGate(ctx context.Context, cfg subscriber.Config, log *slog.Logger) error {
	rep := preflight.Run(ctx, cfg)
	if sides := rep.Unreached; len(sides) > 0 {
		log.Warn("pre-flight checks skipped: the " + strings.Join(sides, " and the ") + " could not be reached")
		return nil
	}
	var failed []string
	for _, r := range rep.Results {
		for _, p := range r.Problems {
			if !p.Fails {
				continue
			}
			line := r.Side + ": " + p.What
			if p.Object != "" {
				line = r.Side + ": " + p.Object + ": " + p.What
			}
			if p.Fix != "" {
				line += " (fix: " + p.Fix + ")"
			}
			failed = append(failed, line)
		}
	}
	if len(failed) == 0 {
		if n := rep.Count(preflight.Skipped); n > 0 {
			log.Warn(fmt.Sprintf("pre-flight checks that could not complete (a connection lost while they ran): %d; the run goes on, making its own", n))
		}
		return nil
	}
	problems := "problems"
	if len(failed) == 1 {
		problems = "problem"
	}
	return fmt.Errorf("the pre-flight checks found %d %s, and nothing was created on either server: %s; parapply check (with the same settings) lists every check",
		len(failed), problems, strings.Join(failed, "; "))
}

// printReport writes the report as pg_upgrade --check does: a line per
// check with dots to its outcome, then for each problem what it is and
// its fix, and a last line that sums up.
func printReport(w io.Writer, rep preflight.Report) {
	side := ""
	for _, r := range rep.Results {
		if r.Side != side {
			if side != "" {
				fmt.Fprintln(w)
			}
			side = r.Side
			fmt.Fprintf(w, "Checking the %s\n", side)
		}
		fmt.Fprintf(w, "  %s\n", resultLine(r))
		for _, p := range r.Problems {
			what := p.What
			if p.Object != "" {
				what = p.Object + ": " + what
			}
			fmt.Fprintf(w, "      %s\n", what)
			if p.Fix != "" {
				fmt.Fprintf(w, "        fix: %s\n", p.Fix)
			}
		}
	}
	fmt.Fprintln(w)
	switch f, sk, wn := rep.Count(preflight.Failed), rep.Count(preflight.Skipped), rep.Count(preflight.Warning); {
	case f > 0:
		fmt.Fprintf(w, "%s: fix the failed ones (the fix is under each) and check again\n", countChecks(f, sk, wn))
	case sk > 0:
		fmt.Fprintf(w, "%s: each says why; mend that and check again\n", countChecks(f, sk, wn))
	case wn > 0:
		fmt.Fprintf(w, "every check passed; %s (read them: each says what parapply will not do)\n", countChecks(0, 0, wn))
	default:
		fmt.Fprintln(w, "every check passed")
	}
}

// countChecks counts checks by outcome in words that agree with the
// numbers ("1 check failed", "2 checks failed, 1 could not run"), leaving
// out the outcomes none had; the first count names the checks.
func countChecks(failed, skipped, warned int) string {
	var parts []string
	for _, c := range []struct {
		n    int
		verb string
	}{{failed, "failed"}, {skipped, "could not run"}, {warned, "warned"}} {
		switch {
		case c.n == 0:
		case len(parts) > 0:
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.verb))
		case c.n == 1:
			parts = append(parts, "1 check "+c.verb)
		default:
			parts = append(parts, fmt.Sprintf("%d checks %s", c.n, c.verb))
		}
	}
	if len(parts) == 0 {
		return "no check failed"
	}
	return strings.Join(parts, ", ")
}

// resultLine is one check's line: its name, dots, its outcome in capitals
// unless ok, and its detail.
func resultLine(r preflight.Result) string {
	name := r.Check
	const width = 48
	dots := " "
	if len(name) < width {
		dots = " " + strings.Repeat(".", width-len(name)) + " "
	}
	outcome := string(r.Status)
	if r.Status != preflight.OK {
		outcome = strings.ToUpper(outcome)
	}
	line := name + dots + outcome
	if r.Detail != "" {
		line += " (" + r.Detail + ")"
	}
	return line
}
