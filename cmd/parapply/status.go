package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/parapply/parapply/internal/pgerr"
	"github.com/parapply/parapply/progress"
	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/status"
	"github.com/parapply/parapply/subscriber"
)

// slotReport is what `parapply status` shows of one slot.
type slotReport struct {
	status.Record
	// Stale is true when the record says running but is not believed
	// (status.Record.Stale); Liveness says why (status.Record.Liveness).
	Stale    bool   `json:"stale"`
	Liveness string `json:"liveness"`
	// Progress is the slot's progress row: what the target holds as
	// applied, exactly once.
	Progress *progressReport `json:"progress,omitempty"`
	// Publisher is the slot as the publisher sees it (with --source).
	Publisher *status.Slot `json:"publisher,omitempty"`
}

type progressReport struct {
	CommitLSN  string     `json:"commit_lsn"`
	EndLSN     string     `json:"end_lsn"`
	XID        uint32     `json:"source_xid"`
	CommitTime *time.Time `json:"commit_time,omitempty"`
	AppliedAt  *time.Time `json:"applied_at,omitempty"`
}

type statusReport struct {
	Time  time.Time    `json:"time"`
	Slots []slotReport `json:"slots"`
	// InactiveSlots (with --source) are the publisher's pgoutput slots
	// named as one parapply used on this target that no one streams
	// from and no live parapply holds (a run copies before it streams):
	// each keeps WAL on the publisher.
	InactiveSlots []status.Slot `json:"inactive_slots,omitempty"`
	// Hidden are the slots recorded on the target that neither run, nor
	// applied anything, nor were updated in the last hour (shown with
	// --all).
	Hidden []string `json:"hidden_slots,omitempty"`
}

// StatusCommand shows, from the target's records, the progress, lag and
// workers of the runs of each slot, running or past, and with --source
// the slot as the publisher sees it; --watch refreshes it.
type StatusCommand struct {
	out                        io.Writer
	target, source, slot, file string
	all, asJSON, watch         bool
	interval                   time.Duration
}

// flags is status's flag set: target, source and slot as flags of their
// own (status takes none of run's other settings), bound to cmd's fields.
func (cmd *StatusCommand) flags() *flag.FlagSet {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	usageFor(fs, "parapply status --target DSN [--source DSN] [--slot NAME] [--watch [--interval 2s]] [--json]")
	fs.StringVar(&cmd.target, "target", "", "connection string of the target database (default: target from --config or PARAPPLY_TARGET)")
	fs.StringVar(&cmd.source, "source", "", "connection string of the publisher: also show the slot as the publisher sees it (default: source from --config or PARAPPLY_SOURCE, if set)")
	fs.StringVar(&cmd.slot, "slot", "", "show only this slot (default: every slot recorded on the target)")
	fs.StringVar(&cmd.file, "config", os.Getenv("PARAPPLY_CONFIG"), "configuration file to take target, source and slot from")
	fs.BoolVar(&cmd.all, "all", false, "show every slot recorded on the target, also those neither running, nor applied from, nor updated in the last hour")
	fs.BoolVar(&cmd.asJSON, "json", false, "print JSON (one object per refresh with --watch)")
	fs.BoolVar(&cmd.watch, "watch", false, "refresh until interrupted")
	fs.DurationVar(&cmd.interval, "interval", 2*time.Second, "refresh interval with --watch")
	return fs
}

// Run is parapply status: one report, or with --watch one per interval
// until interrupted.
func (cmd *StatusCommand) Run(ctx context.Context, args []string) error {
	fs := cmd.flags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := cmd.resolve(fs); err != nil {
		return err
	}
	tconn, err := connectPlain(ctx, cmd.target, "target", "parapply status")
	if err != nil {
		return err
	}
	defer tconn.Close(context.Background())
	var sconn *pgx.Conn
	if cmd.source != "" {
		if sconn, err = connectPlain(ctx, cmd.source, "source", "parapply status"); err != nil {
			return err
		}
		defer sconn.Close(context.Background())
	}
	tty := isTerminal(cmd.out)
	for {
		if err := cmd.report(ctx, tconn, sconn, tty); err != nil {
			return err
		}
		if !cmd.watch {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(cmd.interval):
		}
		if !tty && !cmd.asJSON {
			fmt.Fprintln(cmd.out)
		}
	}
}

// resolve takes target, source and slot not given as flags from the
// config file, then the environment (where the file leaves one empty), and
// reads them typed, as run does its settings, then checks them.
func (cmd *StatusCommand) resolve(fs *flag.FlagSet) error {
	names := []string{"target", "source", "slot"}
	c := config{}
	if cmd.file != "" {
		vals, err := readConfigFile(cmd.file)
		if err != nil {
			return err
		}
		for _, name := range names {
			c[name] = vals[name]
		}
	}
	for _, name := range names {
		if v, ok := os.LookupEnv("PARAPPLY_" + strings.ToUpper(name)); ok && c[name] == "" {
			c[name] = v
		}
	}
	fs.Visit(func(f *flag.Flag) {
		if contains(names, f.Name) {
			c[f.Name] = f.Value.String()
		}
	})
	o, err := c.options(names...)
	if err != nil {
		return err
	}
	cmd.target, cmd.source, cmd.slot = o.Target, o.Source, o.Slot
	if err := checkDSN("target", cmd.target); err != nil {
		return err
	}
	if err := checkDSN("source", cmd.source); err != nil {
		return err
	}
	if cmd.target == "" {
		return errors.New("no target given: set --target (or target in the config file, or PARAPPLY_TARGET) to the target's connection string")
	}
	if cmd.watch && cmd.interval <= 0 {
		return fmt.Errorf("invalid value for interval: %s (a duration above zero, such as 2s)", cmd.interval)
	}
	return nil
}

// report prints one report, as JSON or as text (with --watch on a
// terminal, on a cleared screen).
func (cmd *StatusCommand) report(ctx context.Context, tconn, sconn *pgx.Conn, tty bool) error {
	rep, err := collectStatus(ctx, tconn, sconn, cmd.slot, cmd.all, cmd.source)
	if err != nil {
		return err
	}
	if cmd.asJSON {
		enc := json.NewEncoder(cmd.out)
		if !cmd.watch {
			enc.SetIndent("", "  ")
		}
		return enc.Encode(rep)
	}
	if cmd.watch && tty {
		fmt.Fprint(cmd.out, "\033[H\033[2J") // clear the screen, as watch(1) does
	}
	printStatus(cmd.out, rep)
	return nil
}

// connectPlain opens an ordinary connection to one side for a command,
// named app unless the DSN names it; errors name the side, host, port,
// database and user, and the one reason (never the password).
func connectPlain(ctx context.Context, dsn, side, app string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, pgerr.Parse(side, err)
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = app
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connecting to the %s (host %s port %d database %s user %s): %w", side, cfg.Host, cfg.Port, cfg.Database, cfg.User, pgerr.Short(err))
	}
	return conn, nil
}

// recentSlot is how long a slot that never applied anything (a start
// refused before its slot was made, say) stays in parapply status without
// --all.
const recentSlot = time.Hour

// collectStatus reads the report of slot (every slot if empty; those
// long idle without a progress row only with all) from the target, and
// with sconn the publisher's view of each slot and its inactive slots.
func collectStatus(ctx context.Context, tconn, sconn *pgx.Conn, slot string, all bool, sourceDSN string) (statusReport, error) {
	// Every slot's record, for the list of inactive slots; the slot asked
	// for, or every one, for the report.
	every, err := status.Read(ctx, tconn, "")
	if err != nil {
		return statusReport{}, err
	}
	recs, err := slotRecords(every, slot)
	if err != nil {
		return statusReport{}, err
	}
	now := time.Now()
	rep := statusReport{Time: now, Slots: []slotReport{}}
	for _, r := range recs {
		sr := slotReport{Record: r, Stale: r.Stale(), Liveness: r.Liveness()}
		p, ok, err := progress.Read(ctx, tconn, r.Slot)
		if err != nil {
			return rep, err
		}
		// Shown: a slot asked for, one that runs or has applied (its
		// progress row), or one updated lately; the others only with
		// --all (parapply drop removes them).
		if !all && slot == "" && !r.Live() && !ok && now.Sub(r.UpdatedAt) > recentSlot {
			rep.Hidden = append(rep.Hidden, r.Slot)
			continue
		}
		if ok {
			sr.Progress = newProgressReport(p)
		}
		if sconn != nil {
			if sr.Publisher, err = publisherSlot(ctx, sconn, sourceDSN, r.Slot); err != nil {
				return rep, err
			}
		}
		rep.Slots = append(rep.Slots, sr)
	}
	if sconn != nil {
		if rep.InactiveSlots, err = inactiveUnheld(ctx, tconn, sconn, every); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// slotRecords keeps the record of slot (every record if slot is empty);
// none is an error that says no parapply has run for it.
func slotRecords(every []status.Record, slot string) ([]status.Record, error) {
	var recs []status.Record
	for _, r := range every {
		if slot == "" || r.Slot == slot {
			recs = append(recs, r)
		}
	}
	if len(recs) == 0 {
		if slot != "" {
			return nil, fmt.Errorf("the target has no status of slot %s: no parapply has run for it (check --slot)", slot)
		}
		return nil, errors.New("the target has no parapply status yet: no parapply has run against it")
	}
	return recs, nil
}

// newProgressReport is a slot's progress row as the report shows it, its
// times left out when unknown.
func newProgressReport(p progress.Position) *progressReport {
	pr := &progressReport{CommitLSN: p.CommitLSN.String(), EndLSN: p.EndLSN.String(), XID: uint32(p.XID)}
	if !p.CommitTime.IsZero() {
		pr.CommitTime = &p.CommitTime
	}
	if !p.AppliedAt.IsZero() {
		pr.AppliedAt = &p.AppliedAt
	}
	return pr
}

// publisherSlot is slot as the publisher sees it, with the standbys of a
// multi-host source; nil if the publisher has no such slot.
func publisherSlot(ctx context.Context, sconn *pgx.Conn, sourceDSN, slot string) (*status.Slot, error) {
	s, err := status.ReadSlot(ctx, sconn, slot)
	if errors.Is(err, status.ErrNoSlot) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s.Standbys = readStandbys(ctx, sourceDSN, slot, sconn)
	return &s, nil
}

// inactiveUnheld lists the publisher's slots named as one parapply used on
// this target that no one streams from and no live parapply holds.
func inactiveUnheld(ctx context.Context, tconn, sconn *pgx.Conn, every []status.Record) ([]status.Slot, error) {
	names, err := status.SlotNames(ctx, tconn)
	if err != nil {
		return nil, err
	}
	inactive, err := status.InactiveSlots(ctx, sconn, names)
	if err != nil {
		return nil, err
	}
	return unheld(inactive, every), nil
}

// unheld keeps the inactive slots no live parapply holds (recs: every
// slot's record): a run copying, or between two connections, does not
// stream from its slot, which is no less in use.
func unheld(inactive []status.Slot, recs []status.Record) []status.Slot {
	var out []status.Slot
	for _, p := range inactive {
		i := slices.IndexFunc(recs, func(r status.Record) bool { return r.Slot == p.Name })
		if i < 0 || !recs[i].Live() {
			out = append(out, p)
		}
	}
	return out
}

// readStandbys reads, on each host the source names besides the one
// connected to (a multi-host source, for publisher failover), whether it
// is a standby keeping a synchronized copy of slot.
func readStandbys(ctx context.Context, dsn, slot string, connected *pgx.Conn) []status.Standby {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil || len(cfg.Fallbacks) == 0 {
		return nil
	}
	hosts := []*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port}}
	hosts = append(hosts, cfg.Fallbacks...)
	named := map[string]bool{}
	for _, h := range hosts {
		named[net.JoinHostPort(h.Host, strconv.Itoa(int(h.Port)))] = true
	}
	if len(named) < 2 {
		return nil // one server, perhaps tried with and without TLS
	}
	seen := map[string]bool{connected.PgConn().Conn().RemoteAddr().String(): true}
	var out []status.Standby
	for _, h := range hosts {
		addr := net.JoinHostPort(h.Host, strconv.Itoa(int(h.Port)))
		if seen[addr] {
			continue
		}
		seen[addr] = true
		c := cfg.Copy()
		c.Host, c.Port, c.TLSConfig, c.Fallbacks, c.ValidateConnect = h.Host, h.Port, h.TLSConfig, nil, nil
		c.ConnectTimeout = 5 * time.Second
		conn, err := pgx.ConnectConfig(ctx, c)
		if err != nil {
			out = append(out, status.Standby{Host: addr, Error: pgerr.Short(err).Error()})
			continue
		}
		out = append(out, status.ReadStandby(ctx, conn, addr, slot))
		conn.Close(context.Background())
	}
	return out
}

// failoverText says whether the slot survives a failover of the
// publisher: its failover flag, synchronized_standby_slots, and each
// standby's copy.
func failoverText(p status.Slot) string {
	if p.Failover == nil {
		return ""
	}
	if !*p.Failover {
		return "not a failover slot (failover = off, or made before it was asked)"
	}
	parts := []string{"a failover slot"}
	if p.SyncStandbySlots == "" {
		parts = append(parts, "synchronized_standby_slots not set on the publisher")
	} else {
		parts = append(parts, "synchronized_standby_slots = "+p.SyncStandbySlots)
	}
	for _, sb := range p.Standbys {
		switch {
		case sb.Error != "":
			parts = append(parts, sb.Host+": "+sb.Error)
		case !sb.InRecovery:
			parts = append(parts, sb.Host+": not a standby")
		case sb.Synced:
			parts = append(parts, fmt.Sprintf("%s: synchronized (confirmed flush %s)", sb.Host, sb.ConfirmedLSN))
		default:
			parts = append(parts, sb.Host+": NOT SYNCHRONIZED (sync_replication_slots, hot_standby_feedback, primary_slot_name, dbname in primary_conninfo)")
		}
	}
	return strings.Join(parts, "; ")
}

// printStatus prints the report as text: each slot's lines, its
// workers' table, then the slots not shown and the publisher's inactive
// slots.
func printStatus(w io.Writer, rep statusReport) {
	for i, s := range rep.Slots {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "slot %s: %s\n", s.Slot, stateText(s.Record))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		printSlotProgress(tw, rep.Time, s)
		printSlotWork(tw, rep.Time, s)
		if p := s.Publisher; p != nil {
			printPublisherSlot(tw, s, *p)
		}
		if s.LastError != "" {
			at := ""
			if s.LastErrorAt != nil {
				at = " (" + since(rep.Time, *s.LastErrorAt) + " ago)"
			}
			fmt.Fprintf(tw, "  last error\t%s%s\n", s.LastError, at)
		}
		tw.Flush()
		printWorkers(w, s.Workers)
	}
	if len(rep.Hidden) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "%d older slots not shown, which never applied anything (%s): --all shows them, parapply drop --slot NAME removes one\n", len(rep.Hidden), strings.Join(rep.Hidden, ", "))
	}
	if len(rep.InactiveSlots) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "inactive slots of parapply on the publisher, which no live parapply holds (each keeps WAL until it is used again or dropped with pg_drop_replication_slot):")
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, p := range rep.InactiveSlots {
			fmt.Fprintf(tw, "  %s\tretains %s of WAL (wal_status %s); confirmed flush %s, restart %s, current WAL %s\n",
				p.Name, bytesText(p.RetainedBytes), p.WALStatus, p.ConfirmedLSN, p.RestartLSN, p.CurrentLSN)
		}
		tw.Flush()
	}
}

// printSlotProgress prints where a slot's run stands: its process, its
// positions, lag and rate, and what it did since it started.
func printSlotProgress(tw io.Writer, now time.Time, s slotReport) {
	fmt.Fprintf(tw, "  process\tpid %d on %s, parapply %s, application_name %s, started %s ago, updated %s ago\n",
		s.PID, s.Host, s.Version, s.ApplicationName, since(now, s.StartedAt), since(now, s.UpdatedAt))
	fmt.Fprintf(tw, "  positions\treceived %s, applied %s, flushed %s, publisher WAL end %s\n", s.Received, s.Applied, s.Flushed, s.SourceWALEnd)
	last := "none yet"
	if s.LastCommit != nil {
		last = s.LastCommit.Local().Format("2006-01-02 15:04:05.000 MST")
	}
	if s.State == subscriber.StateCopying {
		fmt.Fprintf(tw, "  lag\t%s of WAL retained by the slot while the copy runs (streaming starts after it; last applied source commit %s)\n", bytesText(s.LagBytes), last)
	} else {
		fmt.Fprintf(tw, "  lag\t%s, %.1f s (last applied source commit %s)\n", bytesText(s.LagBytes), s.LagSeconds, last)
	}
	fmt.Fprintf(tw, "  rate\t%.0f txn/s, %.0f rows/s\n", s.TxnsPerSecond, s.RowsPerSecond)
	fmt.Fprintf(tw, "  since start\t%d source transactions in %d target transactions, %d rows, %d missing rows\n", s.SourceTxns, s.TargetTxns, s.Rows, s.Missing)
	fmt.Fprintf(tw, "  queued\t%s\n", bytesText(s.QueueBytes))
}

// printSlotWork prints, where the record has them, who applies, the DDL
// run, what the run waits for, the faults ridden out, the sequences'
// sync, the copy's progress and the progress row.
func printSlotWork(tw io.Writer, now time.Time, s slotReport) {
	if a := s.Apply; a != nil {
		fmt.Fprintf(tw, "  applied by\t%s\n", applyText(*a))
	}
	if s.DDL > 0 {
		fmt.Fprintf(tw, "  schema changes\t%d DDL statements from the publisher run on the target (ddl = apply)\n", s.DDL)
	}
	if w := s.Waiting; w != nil {
		fmt.Fprintf(tw, "  waiting\t%s since %s ago: %s (%s); fix: %s\n", w.Reason, since(now, w.Since), w.What, w.Error, w.Fix)
	}
	if len(s.Faults) > 0 {
		var parts []string
		for _, c := range subscriber.FaultCauses {
			if n := s.Faults[c]; n > 0 {
				parts = append(parts, fmt.Sprintf("%s %d", c, n))
			}
		}
		fmt.Fprintf(tw, "  faults\tridden out since start: %s\n", strings.Join(parts, ", "))
	}
	if q := s.Sequences; q != nil {
		fmt.Fprintf(tw, "  sequences\t%s\n", sequencesText(now, *q))
	}
	if c := s.Copy; c != nil {
		done := ""
		if c.Percent != nil && c.ETASeconds != nil {
			done = fmt.Sprintf(" (%.0f%%, about %s left)", *c.Percent, (time.Duration(*c.ETASeconds) * time.Second).String())
		}
		fmt.Fprintf(tw, "  copy\t%s\n", copyText(*c, done))
	}
	if p := s.Progress; p != nil {
		fmt.Fprintf(tw, "  progress row\tlast applied source transaction %d, commit %s, resume at %s\n", p.XID, p.CommitLSN, p.EndLSN)
	}
}

// copyText is the copy's line: the tables and rows done, and the index
// phase's statements where there are any, done (their share and time left
// in done), its bytes and time so far; "building indexes (k of n)" first
// once every table's rows are in and only the indexes are left.
func copyText(c status.Copy, done string) string {
	rows := fmt.Sprintf("%d of %d tables, %d of about %d rows", c.TablesDone, c.Tables, c.Rows, c.RowsEstimated)
	switch {
	case c.Building:
		rows = fmt.Sprintf("building indexes (%d of %d), %s", c.IndexesBuilt, c.Indexes, rows)
	case c.Indexes > 0:
		rows += fmt.Sprintf(", %d of %d indexes built", c.IndexesBuilt, c.Indexes)
	}
	return fmt.Sprintf("%s%s, %s in %.0f s", rows, done, bytesText(c.Bytes), c.ElapsedSeconds)
}

// sequencesText says when the sequences were last synced, by whom and
// with what outcome.
func sequencesText(now time.Time, q status.Sequences) string {
	by := ""
	if q.By == status.SyncedByCommand {
		by = " by parapply sync-sequences"
	}
	line := fmt.Sprintf("%d checked %s ago%s (%d moved forward, %d already there, %d ahead of the publisher, %d refused by the target role, %d missing on the target, %d not readable)",
		q.Sequences, since(now, q.At), by, q.Moved, q.Unchanged, q.Ahead, q.Refused, q.Missing, q.Unreadable)
	if q.At.IsZero() {
		line = "not synced yet"
	}
	if q.Error != "" {
		line += "; last sync failed: " + q.Error
	}
	return line
}

// printPublisherSlot prints the slot as the publisher sees it (with
// --source): whether it is streamed from, its positions, the WAL it
// keeps, and whether it survives a failover.
func printPublisherSlot(tw io.Writer, s slotReport, p status.Slot) {
	active := "inactive"
	switch {
	case !p.Active && s.Live() && s.State == subscriber.StateCopying:
		active = "not streaming yet: parapply copies the tables and streams from the slot once the copy ends (do not drop it)"
	case !p.Active && s.Live():
		active = fmt.Sprintf("inactive while parapply is %s; it streams from the slot again by itself (do not drop it)", s.State)
	case p.Active && p.ReplicationState == "":
		active = fmt.Sprintf("active (walsender pid %d; its state is hidden from the source role: GRANT pg_read_all_stats TO it)", p.ActivePID)
	case p.Active:
		active = fmt.Sprintf("active (pid %d, application_name %s, %s, sync_state %s)", p.ActivePID, p.ApplicationName, p.ReplicationState, p.SyncState)
	}
	fmt.Fprintf(tw, "  publisher slot\t%s; confirmed flush %s, restart %s, current WAL %s; retains %s of WAL (wal_status %s)\n",
		active, p.ConfirmedLSN, p.RestartLSN, p.CurrentLSN, bytesText(p.RetainedBytes), p.WALStatus)
	if f := failoverText(p); f != "" {
		fmt.Fprintf(tw, "  failover\t%s\n", f)
	}
}

// printWorkers prints the apply workers' table, a row each, numbers
// aligned right.
func printWorkers(w io.Writer, workers []status.Worker) {
	if len(workers) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  worker\tsource txns\ttarget txns\trows\tbusy\tdependency wait\tcommit order wait\tretries\t")
	for _, wk := range workers {
		fmt.Fprintf(tw, "  %d\t%d\t%d\t%d\t%.1fs\t%.1fs\t%.1fs\t%d\t\n", wk.Worker, wk.SourceTxns, wk.TargetTxns, wk.Rows,
			wk.BusySeconds, wk.DependencyWaitSecs, wk.CommitWaitSecs, wk.Retries)
	}
	tw.Flush()
}

// stateText is a slot's state as status prints it: the recorded state,
// and, where the record is not believed, why.
func stateText(r status.Record) string {
	age := r.Age.Round(100 * time.Millisecond)
	switch r.Liveness() {
	case status.RunNotRunning:
		return fmt.Sprintf("%s (NOT RUNNING: not updated for %s and no target session holds the slot's lock: parapply ended without recording it (killed?), or cannot reach or write to the target)", r.State, age)
	case status.RunNotUpdated:
		return fmt.Sprintf("%s (NOT UPDATED FOR %s: the slot's target sessions are still there, but parapply does not record its status: it is stuck, or cannot write parapply.status)", r.State, age)
	}
	return r.State
}

// recordSequenceSync records a sync-sequences run where parapply status
// reads it; a target that will not take the record only loses that.
func recordSequenceSync(ctx context.Context, conn *pgx.Conn, slot string, rs []sequences.Result, syncErr error, stderr io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := status.RecordSequenceSync(ctx, conn, slot, rs, syncErr); err != nil {
		fmt.Fprintf(stderr, "parapply: warning: parapply status will not show this sync: %s\n", oneLine(err.Error()))
	}
}

// applyText says who applies: the stream reader or workers, and with
// workers = auto what it saw.
func applyText(a status.Apply) string {
	who := "the stream reader's connection"
	if a.WorkersActive > 0 {
		who = fmt.Sprintf("%d workers", a.WorkersActive)
	}
	if !a.Auto {
		return who
	}
	switches := "switches"
	if a.Switches == 1 {
		switches = "switch"
	}
	return fmt.Sprintf("%s (workers = auto: %d %s; %.0f%% of the appliers' active samples waited on data reads)", who, a.Switches, switches, 100*a.ReadWaitShare)
}

func since(now, t time.Time) string {
	if t.IsZero() || t.Unix() == 0 { // never set (recorded as the epoch)
		return "?"
	}
	d := now.Sub(t)
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// bytesText prints a byte count as PostgreSQL's pg_size_pretty does.
func bytesText(n int64) string {
	units := []string{"bytes", "kB", "MB", "GB", "TB"}
	v, i := float64(n), 0
	for v >= 10*1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if i == 0 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%.0f %s", v, units[i])
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
