package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/progress"
)

// SkipCommand records on the target that the runs of a slot are to skip the
// source transaction committed at --lsn, as ALTER SUBSCRIPTION ... SKIP
// does: the way past a transaction that cannot be applied (the error that
// stopped parapply names its commit LSN). Requests add up (two failing
// transactions applied in one group are named one after the other);
// --list shows them and which are done with.
type SkipCommand struct {
	out io.Writer
}

// Run is parapply skip: --lsn (with --ddl) adds a request, --list shows
// them.
func (cmd *SkipCommand) Run(ctx context.Context, args []string) error {
	out := cmd.out
	fs := flag.NewFlagSet("skip", flag.ContinueOnError)
	lsnFlag := fs.String("lsn", "", "commit LSN of the source transaction to skip (the one the error names, e.g. 0/1A2B3C4)")
	ddlOnly := fs.Bool("ddl", false, "skip only the DDL statements the publisher sent in that transaction (ddl = apply), not its row changes: after running them, or what stands for them, on the target by hand")
	list := fs.Bool("list", false, "list the slot's skip requests and whether each is pending, skipped or passed, instead of adding one")
	usageFor(fs, "parapply skip --target DSN --slot NAME (--lsn LSN [--ddl] | --list) [--config FILE]")
	o, err := loadOptions(fs, args, "target", "slot", "application_name")
	if err != nil {
		return err
	}
	if o.Target == "" || (*lsnFlag == "") == !*list {
		return fmt.Errorf("skip needs --target, --slot (default %q) and either --lsn, the commit LSN of the source transaction to skip, or --list", "parapply")
	}
	var lsn parapply.LSN
	if !*list {
		lsn, err = parapply.ParseLSN(*lsnFlag)
		if err != nil || lsn == 0 {
			return fmt.Errorf("invalid --lsn %q: give a commit LSN as PostgreSQL prints it, such as 0/1A2B3C4", *lsnFlag)
		}
	}
	conn, err := connector("parapply skip", !*list)(ctx, o.Target, "target", o.ApplicationName+" skip")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if *list {
		return listSkips(ctx, conn, o.Slot, out)
	}
	if *ddlOnly {
		if err := progress.SetSkip(ctx, conn, o.Slot, lsn, progress.SkipDDL); err != nil {
			return err
		}
		fmt.Fprintf(out, "slot %s: the DDL statements of the source transaction committed at %s will be skipped, its row changes applied, when parapply next starts (restart it if it runs)\n", o.Slot, lsn)
		return nil
	}
	if err := progress.SetSkip(ctx, conn, o.Slot, lsn, ""); err != nil {
		return err
	}
	fmt.Fprintf(out, "slot %s: the source transaction committed at %s will be skipped, none of its changes applied, when parapply next starts (restart it if it runs); parapply.skip on the target holds the request, with any others, until the target has passed it (parapply skip --list shows them)\n", o.Slot, lsn)
	return nil
}

// listSkips prints the slot's skip requests, one a line: its commit LSN and
// whether it is pending, skipped (when) or passed.
func listSkips(ctx context.Context, conn *pgx.Conn, slot string, out io.Writer) error {
	reqs, err := progress.ListSkips(ctx, conn, slot)
	if err != nil {
		return err
	}
	if len(reqs) == 0 {
		fmt.Fprintf(out, "slot %s: no skip requests\n", slot)
		return nil
	}
	for _, r := range reqs {
		var state string
		switch {
		case !r.SkippedAt.IsZero() && r.Passed:
			state = "skipped at " + r.SkippedAt.Format(time.RFC3339) + "; passed (removed at the next start)"
		case !r.SkippedAt.IsZero():
			state = "skipped at " + r.SkippedAt.Format(time.RFC3339)
		case r.Passed:
			state = "passed without being skipped: no source transaction committed at this LSN (removed at the next start)"
		default:
			state = "pending: skipped when parapply next meets it"
		}
		line := fmt.Sprintf("slot %s: %s %s (requested at %s)", slot, r.LSN, state, r.RequestedAt.Format(time.RFC3339))
		if r.Reason == progress.SkipDDL {
			line += "; its DDL statements only"
		} else if r.Reason != "" {
			line += "; on_error = skip_transaction, after: " + r.Reason
		}
		fmt.Fprintln(out, line)
	}
	return nil
}

// skipLine is the skip command, up to its --lsn, that a run's errors print
// (apply.Config.SkipCommand): --config FILE where the run took its target
// from that file, else --target with the run's target without its
// password, and --slot, so that it runs as printed.
func skipLine(o options, file string) string {
	args := []string{"parapply", "skip"}
	fromFile := false
	if file != "" {
		vals, err := readConfigFile(file)
		if err == nil {
			fo, err := config(vals).options("target")
			fromFile = err == nil && fo.Target == o.Target
		}
	}
	if fromFile {
		if abs, err := filepath.Abs(file); err == nil {
			file = abs
		}
		args = append(args, "--config", shellQuote(file))
	} else {
		args = append(args, "--target", shellQuote(withoutSecrets(o.Target)))
	}
	return strings.Join(append(args, "--slot", shellQuote(o.Slot)), " ")
}

// shellQuote is s as a POSIX shell word: as it is when it holds nothing
// the shell reads, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:@%+,=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
