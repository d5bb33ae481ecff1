package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/verify"
	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/source"
)

// tableCheck is one published table compared: its rows on each side, and
// whether they are the same.
type tableCheck struct {
	Table         string `json:"table"`
	PublisherRows int64  `json:"publisher_rows"`
	TargetRows    int64  `json:"target_rows"`
	Equal         bool   `json:"equal"`
	Difference    string `json:"difference,omitempty"`
}

// rowCompareLimit is the largest table whose first differing row verify
// names (reading every row of both sides); above it, the counts and sums.
const rowCompareLimit = 200_000

// VerifyCommand compares every published table on the publisher and the
// target: row counts and a checksum of every row's text over the
// published columns (the publisher's rows those its row filters send),
// and names the first differing row of a table that differs. Run once
// writes have stopped and parapply has caught up; exit 0 only when every
// table is equal. It says when the publisher wrote during the
// comparison (the results are not final: cutover is the check once
// writes stop) and, when tables differ, where the slot stands (no live
// parapply streams from it, or it had not caught up).
type VerifyCommand struct {
	out io.Writer
}

// Run is parapply verify: a line per table as it is compared, then notes
// on what the comparison may have missed.
func (cmd *VerifyCommand) Run(ctx context.Context, args []string) error {
	out := cmd.out
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print the comparison as JSON")
	usageFor(fs, "parapply verify --source DSN --target DSN --publication NAME[,NAME] [--slot NAME] [--config FILE] [--json]")
	o, err := loadOptions(fs, args, "source", "target", "publication", "slot", "application_name")
	if err != nil {
		return err
	}
	if o.Source == "" || o.Target == "" || len(o.Publications) == 0 {
		return usageError{errors.New("verify needs --source, --target and --publication")}
	}
	src, dst, err := connectBoth(ctx, o, "verify")
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	defer dst.Close(context.Background())
	// Best effort: a publisher in recovery has no WAL insert position.
	before, markErr := readWALMark(ctx, src)
	checks, err := compareTables(ctx, src, dst, o.Publications, func(tc tableCheck) {
		if !*asJSON {
			fmt.Fprintln(out, checkLine(tc))
		}
	})
	if err != nil {
		return err
	}
	var notes []string
	if markErr == nil {
		if after, err := readWALMark(ctx, src); err == nil {
			if n := writesNote(before, after); n != "" {
				notes = append(notes, n)
			}
		}
	}
	if verdict(checks) != nil && markErr == nil {
		n, err := slotNote(ctx, src, dst, o.Slot, before.LSN)
		if err != nil {
			return err
		}
		if n != "" {
			notes = append(notes, n)
		}
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(checks); err != nil {
			return err
		}
	} else {
		for _, n := range notes {
			fmt.Fprintln(out, "note: "+n)
		}
	}
	if err := verdict(checks); err != nil {
		if len(notes) > 0 {
			return fmt.Errorf("%w; %s", err, strings.Join(notes, "; "))
		}
		return err
	}
	return nil
}

// connectBoth connects to o's publisher and target as the command.
func connectBoth(ctx context.Context, o options, command string) (src, dst *pgx.Conn, err error) {
	app := o.ApplicationName + " " + command
	if src, err = connectPlain(ctx, o.Source, "source", app); err != nil {
		return nil, nil, err
	}
	if dst, err = connectPlain(ctx, o.Target, "target", app); err != nil {
		src.Close(context.Background())
		return nil, nil, err
	}
	return src, dst, nil
}

// compareTables compares each table the publications send, calling each
// with its result as it is known.
func compareTables(ctx context.Context, src, dst *pgx.Conn, pubs []string, each func(tableCheck)) ([]tableCheck, error) {
	tables, err := source.ListPublished(ctx, src.PgConn(), pubs)
	if err != nil {
		return nil, err
	}
	var out []tableCheck
	for _, t := range tables {
		name := parapply.QuoteIdent(t.Schema) + "." + parapply.QuoteIdent(t.Name)
		cols := t.Columns
		if cols == nil {
			if cols, err = verify.Columns(ctx, src, name); err != nil {
				return out, fmt.Errorf("columns of %s on the publisher: %w", name, err)
			}
		}
		a, err := verify.ChecksumWhere(ctx, src, name, cols, t.RowFilter)
		if err != nil {
			return out, fmt.Errorf("reading %s on the publisher: %w", name, err)
		}
		b, err := verify.ChecksumWhere(ctx, dst, name, cols, "")
		if err != nil {
			return out, fmt.Errorf("reading %s on the target: %w", name, err)
		}
		tc := tableCheck{Table: t.Schema + "." + t.Name, PublisherRows: a.Rows, TargetRows: b.Rows, Equal: a == b}
		if !tc.Equal {
			tc.Difference = "the sums of the rows differ"
			if max(a.Rows, b.Rows) <= rowCompareLimit {
				r, err := verify.Rows(ctx, src, dst, name, cols, t.RowFilter)
				if err == nil && r.Detail != "" {
					tc.Difference = r.Detail
				}
			}
		}
		each(tc)
		out = append(out, tc)
	}
	return out, nil
}

func checkLine(tc tableCheck) string {
	if tc.Equal {
		return fmt.Sprintf("%s: equal, %d rows", tc.Table, tc.PublisherRows)
	}
	return fmt.Sprintf("%s: DIFFERS: %d rows on the publisher, %d on the target; %s", tc.Table, tc.PublisherRows, tc.TargetRows,
		strings.ReplaceAll(tc.Difference, "on the source", "on the publisher"))
}

// verdict is verify's outcome: nil when every table is equal.
func verdict(checks []tableCheck) error {
	n := 0
	for _, c := range checks {
		if !c.Equal {
			n++
		}
	}
	if n > 0 {
		return fmt.Errorf("%d of %d published tables differ between the publisher and the target (above)", n, len(checks))
	}
	return nil
}

// CutoverCommand is the cut-over once the publisher's writes have
// stopped: it waits until parapply has made every change up to the
// publisher's current WAL position durable on the target (the slot
// confirms it), brings the sequences over, verifies every published
// table, and says how long it took: the write downtime it added.
type CutoverCommand struct {
	out io.Writer
}

// Run is parapply cutover: its three steps, each said as it starts.
func (cmd *CutoverCommand) Run(ctx context.Context, args []string) error {
	out := cmd.out
	fs := flag.NewFlagSet("cutover", flag.ContinueOnError)
	wait := fs.Duration("timeout", 5*time.Minute, "how long to wait for parapply to catch up")
	usageFor(fs, "parapply cutover --source DSN --target DSN --publication NAME[,NAME] [--slot NAME] [--sequences owned|all] [--timeout 5m] [--config FILE]")
	names := []string{"source", "target", "publication", "slot", "sequences", "application_name"}
	c, err := loadConfig(fs, args, names...)
	if err != nil {
		return err
	}
	// Read in two steps (see loadOptions): a missing setting is named
	// before a bad --sequences.
	o, err := c.options(names...)
	if o.Source == "" || o.Target == "" || len(o.Publications) == 0 {
		return usageError{errors.New("cutover needs --source, --target and --publication")}
	}
	if err != nil {
		return err
	}
	start := time.Now()
	src, dst, err := connectBoth(ctx, o, "cutover")
	if err != nil {
		return err
	}
	defer src.Close(context.Background())
	defer dst.Close(context.Background())
	slot := o.Slot
	var end parapply.LSN
	if err := src.QueryRow(ctx, "SELECT pg_catalog.pg_current_wal_insert_lsn()::text").Scan((*lsnText)(&end)); err != nil {
		return fmt.Errorf("reading the publisher's WAL position: %w", err)
	}
	fmt.Fprintf(out, "1. waiting for slot %s to confirm the publisher's WAL position %s (every change before it applied and flushed on the target)\n", slot, end)
	if err := waitConfirmed(ctx, src, dst, slot, end, *wait); err != nil {
		return err
	}
	fmt.Fprintf(out, "   done after %s\n", time.Since(start).Round(time.Millisecond))
	mode := o.Sequences
	if mode == sequences.None {
		mode = sequences.Owned
	}
	fmt.Fprintf(out, "2. bringing the sequences over (sequences = %s)\n", mode)
	res, from, err := syncSequences(ctx, src, dst, mode, o)
	if err != nil {
		return err
	}
	sum := sequences.Summarize(res)
	fmt.Fprintf(out, "   %d sequences, %s: %d moved forward, %d already there, %d ahead of the publisher\n", sum.Sequences, from, sum.Moved, sum.Unchanged, sum.Ahead)
	if n := sum.Failed(); n > 0 {
		for _, r := range res {
			if r.Refused() || r.Missing || !r.Readable {
				fmt.Fprintf(out, "   %s: %s\n", r.QualifiedName(), resultText(r))
			}
		}
		return fmt.Errorf("%d sequences could not be synced (above): the target is not ready", n)
	}
	fmt.Fprintln(out, "3. verifying every published table")
	checks, err := compareTables(ctx, src, dst, o.Publications, func(tc tableCheck) { fmt.Fprintln(out, "   "+checkLine(tc)) })
	if err != nil {
		return err
	}
	if err := verdict(checks); err != nil {
		return fmt.Errorf("%w: the target is not ready (were the publisher's writes stopped?)", err)
	}
	fmt.Fprintf(out, "ready to cut over: the target holds every change up to %s, its sequences are synced and %d tables are equal; this took %s. Point the application at the target, then stop parapply and retire the slot (parapply drop).\n",
		end, len(checks), time.Since(start).Round(time.Millisecond))
	return nil
}

// waitConfirmed waits, at most for, until slot's confirmed position on the
// publisher reaches end; sooner, once no live parapply has streamed from
// the slot for noStreamerFor, it says why (notStreaming) and stops.
func waitConfirmed(ctx context.Context, src, dst *pgx.Conn, slot string, end parapply.LSN, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	nudged := time.Time{}
	var noneSince time.Time
	for {
		// An idle walsender tells where it stands once WAL follows what it
		// sent last (else at the next running-transactions record, every
		// 15 s): a message in the WAL, once a second, best effort (the
		// role may not be allowed to write one).
		if time.Since(nudged) >= time.Second {
			nudged = time.Now()
			_, _ = src.Exec(ctx, "SELECT pg_catalog.pg_logical_emit_message(false, 'parapply.cutover', '')")
		}
		var confirmed *string
		var active bool
		err := src.QueryRow(ctx, "SELECT confirmed_flush_lsn::text, active FROM pg_catalog.pg_replication_slots WHERE slot_name = $1", slot).Scan(&confirmed, &active)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("the publisher has no slot %s: check --slot", slot)
		}
		if err != nil {
			return fmt.Errorf("reading slot %s on the publisher: %w", slot, err)
		}
		if confirmed != nil {
			if l, err := parapply.ParseLSN(*confirmed); err == nil && l >= end {
				return nil
			}
		}
		at := "nothing"
		if confirmed != nil {
			at = *confirmed
		}
		why := ""
		if !active {
			rec, err := slotRecord(ctx, dst, slot)
			if err != nil {
				return err
			}
			why = notStreaming(active, rec)
		}
		switch {
		case why == "":
			noneSince = time.Time{}
		case noneSince.IsZero():
			noneSince = time.Now()
		case time.Since(noneSince) >= noStreamerFor:
			return fmt.Errorf("slot %s confirmed %s, not yet %s, and no parapply streams from it: %s; start parapply on the slot (parapply run ... --slot %s), then run parapply cutover again",
				slot, at, end, why, slot)
		}
		if time.Now().After(deadline) {
			state := "parapply does not stream from it: " + why
			if active {
				state = "parapply streams from it"
			} else if why == "" {
				state = "parapply runs on the slot but does not stream from it now (it copies, or is between connections: parapply status says which)"
			}
			return fmt.Errorf("slot %s confirmed %s, not yet %s, after %s; %s", slot, at, end, wait, state)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// lsnText scans an LSN's text.
type lsnText parapply.LSN

func (l *lsnText) Scan(src any) error {
	s, ok := src.(string)
	if !ok {
		return fmt.Errorf("LSN: want text, got %T", src)
	}
	v, err := parapply.ParseLSN(s)
	*l = lsnText(v)
	return err
}
