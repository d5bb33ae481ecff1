package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/source"
)

// SyncSequencesCommand brings the publisher's sequences to the target once
// and says what it did to each: the cut-over step of a migration, run once
// writes on the publisher have stopped and parapply has caught up.
type SyncSequencesCommand struct {
	out io.Writer
}

// Run is parapply sync-sequences: a line per sequence, then the sums.
func (cmd *SyncSequencesCommand) Run(ctx context.Context, args []string) error {
	out := cmd.out
	fs := flag.NewFlagSet("sync-sequences", flag.ContinueOnError)
	usageFor(fs, "parapply sync-sequences --source DSN --target DSN --publication NAME[,NAME] [--sequences owned|all] [--config FILE]")
	o, err := loadOptions(fs, args, "source", "target", "publication", "slot", "sequences", "application_name")
	if err != nil {
		return err
	}
	mode := o.Sequences
	if mode == sequences.None {
		mode = sequences.Owned
	}
	if o.Source == "" || o.Target == "" {
		return fmt.Errorf("sync-sequences needs --source and --target")
	}
	src, err := sequences.Connect(ctx, o.Source, o.ApplicationName+" sequences")
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	dst, err := sequences.Connect(ctx, o.Target, o.ApplicationName+" sequences")
	if err != nil {
		return err
	}
	defer dst.Close(context.Background())
	if mode == sequences.Owned && len(o.Publications) == 0 {
		return fmt.Errorf("sequences = owned syncs the sequences of the published tables: name the publication with --publication (or use --sequences all)")
	}
	res, from, err := syncSequences(ctx, src, dst, mode, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "sequences = %s: %s\n", mode, from)
	for _, r := range res {
		fmt.Fprintf(out, "%s: %s\n", r.QualifiedName(), resultText(r))
	}
	sum := sequences.Summarize(res)
	fmt.Fprintf(out, "%d sequences: %d moved forward, %d already there, %d ahead of the publisher, %d refused (the target role lacks a grant), %d never used, %d missing on the target, %d not readable by the source role\n",
		sum.Sequences, sum.Moved, sum.Unchanged, sum.Ahead, sum.Refused, sum.Unused, sum.Missing, sum.Unread)
	if n := sum.Failed(); n > 0 {
		return fmt.Errorf("%d sequences could not be synced (see above)", n)
	}
	return nil
}

// syncSequences brings the sequences over once, those of the published
// tables (Owned: o's publications) or all, or the publications' own
// when they publish sequences (PostgreSQL 19's FOR ALL SEQUENCES), and
// records the sync where parapply status shows it (under o's slot).
func syncSequences(ctx context.Context, src, dst *pgx.Conn, mode sequences.Mode, o options) ([]sequences.Result, sequences.From, error) {
	var tables []sequences.Table
	if mode == sequences.Owned {
		published, err := source.ListPublished(ctx, src.PgConn(), o.Publications)
		if err != nil {
			return nil, sequences.FromNothing, err
		}
		for _, t := range published {
			tables = append(tables, sequences.Table{Schema: t.Schema, Name: t.Name})
		}
	}
	res, from, err := sequences.Sync(ctx, src, dst, mode, o.Publications, tables)
	recordSequenceSync(ctx, dst, o.Slot, res, err, os.Stderr)
	return res, from, err
}

// resultText says what Apply did with one sequence, in the words an
// operator checks at a cut-over: where the target's stood and stands.
func resultText(r sequences.Result) string {
	switch {
	case !r.Readable:
		return "not readable by the source role: " + r.SourceGrant() + " left untouched"
	case !r.Used:
		return "never used on the publisher: left untouched"
	case r.Missing:
		return "missing on the target: create it there"
	case r.Refused():
		return "refused, the target role may not read and set it: " + r.Grant + "; left untouched"
	case r.Moved && r.Called:
		return fmt.Sprintf("moved forward from %d to %d", r.Before, r.Last)
	case r.Moved:
		return fmt.Sprintf("moved forward to %d (it was unused, its next value %d)", r.Last, r.Before)
	case r.Ahead && r.Called:
		return fmt.Sprintf("ahead of the publisher (at %d); left at %d", r.Last, r.Before)
	case r.Ahead:
		return fmt.Sprintf("ahead of the publisher (at %d); left unused, its next value %d", r.Last, r.Before)
	default:
		return fmt.Sprintf("already at %d", r.Last)
	}
}

// splitList splits a comma-separated setting.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
