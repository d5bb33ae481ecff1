package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/internal/nearest"
	"github.com/parapply/parapply/schemacopy"
	"github.com/parapply/parapply/sequences"
	"github.com/parapply/parapply/source"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/tablesync"
)

// setting is one configuration parameter. It can be given, from lowest to
// highest precedence, as its default, in the configuration file (name =
// value, as in postgresql.conf), in the environment (PARAPPLY_NAME) or as a
// flag (--name, with dashes for underscores). Its kind, bound to its field
// of options, says how its value is written (shown by -h) and reads it.
type setting struct {
	name, def, help string
	kind            func(o *options) kind
}

var settings = []setting{
	{"source", "", "connection string of the publisher database (libpq keyword/value or URI)",
		func(o *options) kind { return str(&o.Source) }},
	{"target", "", "connection string of the target database",
		func(o *options) kind { return str(&o.Target) }},
	{"publication", "", "publication name(s) on the source, comma separated",
		func(o *options) kind { return list(&o.Publications) }},
	{"slot", "parapply", "logical replication slot on the source; created (pgoutput) if missing",
		func(o *options) kind { return str(&o.Slot) }},
	{"application_name", "parapply", "application_name shown in the publisher's pg_stat_replication and on the target",
		func(o *options) kind { return str(&o.ApplicationName) }},
	{"synchronous_commit", "off", "synchronous_commit of the target sessions; the publisher is told only flushed positions either way",
		func(o *options) kind {
			return choice(&o.SynchronousCommit, apply.SynchronousCommits, apply.ParseSynchronousCommit)
		}},
	{"streaming", "on", "ask the publisher to stream large in-progress transactions (on/off); they are applied as they arrive and kept in spill files until they commit",
		func(o *options) kind { return boolean(&o.Streaming) }},
	{"logical_decoding_work_mem", "1MB", "set on parapply's session on the publisher: how much of in-progress transactions it holds before streaming the largest (smaller: sent and applied sooner, but more transactions streamed); empty keeps the publisher's setting (64MB by default)",
		func(o *options) kind { return size(&o.DecodingWorkMem, 64<<10, true) }},
	{"binary", "on", "values travel from the publisher to the target in PostgreSQL's binary form, neither printed by the publisher nor parsed by parapply or the target, where every published column has the same built-in type on both sides (or an enum on the target); otherwise, and with off, every value travels as text, cast to the column's type on the target (pgoutput's binary option covers the whole stream); the initial copy likewise by binary or text COPY; a value whose binary form the target refuses (an empty tsquery) makes the copy of its table, or the whole stream, go on in text",
		func(o *options) kind { return boolean(&o.Binary) }},
	{"failover", "on", "on PostgreSQL 17 and later publishers, make the slot a failover slot (created so, or an existing one altered), which a standby with sync_replication_slots = on keeps a copy of: after that standby is promoted, parapply goes on from it (see docs/operations.md); ignored on earlier publishers",
		func(o *options) kind { return boolean(&o.Failover) }},
	{"two_phase", "off", "apply transactions prepared on the publisher (PREPARE TRANSACTION) as prepared transactions on the target, committed or rolled back when the publisher does; needs max_prepared_transactions > 0 on the target",
		func(o *options) kind { return boolean(&o.TwoPhase) }},
	{"origin", "any", "which changes the publisher sends, as CREATE SUBSCRIPTION's origin: any, or none for only those made on the publisher itself, not replicated to it (bidirectional setups; PostgreSQL 16 or later on the publisher). parapply commits what it applies under replication origins of its own (parapply_<slot>...), so that subscribers of the target with origin = none do not send it back",
		func(o *options) kind { return choice(&o.Origin, source.Origins, source.ParseOrigin) }},
	{"detect_conflicts", "auto", "detect conflicts (a replicated change meeting a row changed on the target, or missing there), resolve them by conflict_resolution and log each in parapply.conflicts on the target; off only counts rows an update or delete did not find, and stops at an insert that meets an existing row; auto is on, except for the tables a Citus coordinator manages (whose statements Citus does not run: off for those, said at the start), where on refuses the target",
		func(o *options) kind { return detection(&o.DetectConflicts, &o.DetectConflictsAsked) }},
	{"conflict_resolution", "", "policies by conflict type, for every table or one: type=policy or schema.table:type=policy, comma separated (e.g. update_origin_differs=last_update_wins, public.accounts:insert_exists=apply_remote); types insert_exists, update_exists, update_missing, update_origin_differs, delete_missing, delete_origin_differs, multiple_unique_conflicts; policies error, apply_remote, keep_local, skip, last_update_wins, first_update_wins (the last two need track_commit_timestamp on the target); unset types act as the built-in subscription does (see docs/conflicts.md)",
		func(o *options) kind { return rules(&o.Conflicts) }},
	{"detect_update_deleted", "off", "tell an update whose row was deleted on the target (update_deleted) from one whose row never was there (update_missing): parapply records the rows other sessions delete from published tables in parapply.tombstones (a trigger on each, installed and removed by parapply), until every remote transaction that could have been concurrent with the delete is applied; needs detect_conflicts",
		func(o *options) kind { return boolean(&o.DetectUpdateDeleted) }},
	{"max_retention_duration", "0", "with detect_update_deleted, the longest a record of a delete is kept even if remote transactions concurrent with it may still come (then an update of that row is reported as update_missing); 0: no limit, as PostgreSQL 19's subscription option",
		func(o *options) kind { return duration(&o.MaxRetention, true) }},
	{"max_clock_skew", "1s", "with detect_update_deleted, how far the publisher's and the target's clocks may be apart: a record of a delete is kept until the remote commit times applied pass the delete's commit time by this much",
		func(o *options) kind { return duration(&o.MaxClockSkew, true) }},
	{"on_error", "stop", "what a source transaction that cannot be applied (an error no conflict_resolution policy covers: a value the target refuses, a constraint, a conflict whose policy is error) does: stop names it and stops, as the built-in subscription does; skip_transaction rolls it back, logs each of its changes in parapply.conflicts (type apply_error, with the error) and goes on, exactly once",
		func(o *options) kind { return choice(&o.OnError, subscriber.OnErrors, subscriber.ParseOnError) }},
	{"ddl", "off", "what to do with schema changes the publisher sends (parapply ddl install there captures them; parapply.replicate_ddl sends one by hand): off passes over them, as the built-in subscription does (the target's schema is changed by hand); apply runs each on the target at its place in the stream, after every earlier transaction, with the publisher's search_path (see docs/ddl.md)",
		func(o *options) kind { return choice(&o.DDL, subscriber.DDLModes, subscriber.ParseDDL) }},
	{"stream_workers", "2", "streamed transactions applied as they arrive, each on a target connection of its own; more wait in their spill file until they commit (0: all do)",
		func(o *options) kind { return integer(&o.StreamWorkers, 0, maxInt) }},
	{"spill_directory", "", "directory for streamed transactions' spill files (default: the system's temporary directory)",
		func(o *options) kind { return str(&o.SpillDirectory) }},
	{"schema", "target", "where the published tables' definitions come from: target, the target has them (made by hand, as with pg_dump --schema-only | psql); copy, parapply brings over from the publisher with pg_dump those the target lacks, at a start or when they join the publication (the types, domains, functions and sequences of their schemas too; indexes and constraints built after the initial copy, foreign keys and triggers after that; no owners, grants or extensions: see docs/operations.md)",
		func(o *options) kind { return choice(&o.Schema, schemacopy.Modes, schemacopy.ParseMode) }},
	{"pg_dump", "", "with schema = copy, the pg_dump program to run (of the publisher's major version or newer); empty: the first new enough on PATH or in /usr/lib/postgresql/*/bin, newest first",
		func(o *options) kind { return str(&o.PGDump) }},
	{"copy_data", "on", "copy the rows published tables already hold before streaming (tables not synced before); off takes them as in sync",
		func(o *options) kind { return boolean(&o.CopyData) }},
	{"copy_workers", "2", "connection pairs the initial copy uses at once; more pays where the target has more cores and disks",
		func(o *options) kind { return integer(&o.CopyWorkers, 1, maxInt) }},
	{"copy_defer_indexes", "on", "drop the indexes of empty target tables for the initial copy and build them after it, several at once (faster; definitions are kept on the target until rebuilt), where the role may: on tables it owns, in schemas it may create in; the others are copied with their indexes in place (parapply check and the log name them); off keeps every index in place",
		func(o *options) kind { return boolean(&o.CopyDeferIndexes) }},
	{"shared_tables", "off", "let this slot apply to target tables another slot applies to as well (each slot claims its tables in parapply.table_claims); off refuses the start, naming both slots: two slots writing one table interleave their changes in no order the publisher had",
		func(o *options) kind { return boolean(&o.SharedTables) }},
	{"existing_data", "error", "what the copy does with a target table that already holds rows: error, truncate or keep",
		func(o *options) kind {
			return choice(&o.ExistingData, tablesync.ExistingDatas, tablesync.ParseExistingData)
		}},
	{"workers", "auto", "target connections applying transactions in parallel (1 to 64); 0 applies on one connection, in the stream reader (the fastest where the CPU is full); auto applies as 0 does until the target sessions wait on data reads (a slow disk, data larger than memory), then on max_workers workers, and back",
		func(o *options) kind { return workers(&o.Workers, &o.AutoWorkers) }},
	{"max_workers", "8", "with workers = auto, the workers it applies on while reads wait",
		func(o *options) kind { return integer(&o.MaxWorkers, 1, 64) }},
	{"commit_order", "preserve", "with workers: preserve commits in the publisher's commit order (a reader only sees states the publisher had); dependency commits each transaction as soon as those it conflicts with have (faster, but a reader may see later transactions before unrelated earlier ones)",
		func(o *options) kind {
			return choice(&o.CommitOrder, subscriber.CommitOrders, subscriber.ParseCommitOrder)
		}},
	{"prefetch", "on", "more target connections read ahead the rows of coming updates and deletes of tables larger than the target's shared_buffers, so the appliers find their pages in memory; only while the run is behind the publisher (by two seconds or more), never while it keeps up",
		func(o *options) kind { return boolean(&o.Prefetch) }},
	{"prefetch_connections", "16", "the most connections that read ahead at once (one, and more while key sets wait for one and the prefetch sessions wait on reads; each reads one row after another): the reads in flight on a slow disk",
		func(o *options) kind { return integer(&o.PrefetchConnections, 1, maxInt) }},
	{"batch_rows", "10000", "most rows in one set-based statement",
		func(o *options) kind { return integer(&o.BatchRows, 1, maxInt) }},
	{"group_max_changes", "20000", "consecutive small source transactions are applied as one target transaction until it holds this many row changes (1 turns grouping off)",
		func(o *options) kind { return integer(&o.GroupMaxChanges, 1, maxInt) }},
	{"group_max_bytes", "16MB", "... or this many bytes of values",
		func(o *options) kind { return size(&o.GroupMaxBytes, 1, false) }},
	{"group_max_delay", "200ms", "... or has been open this long; a group is also committed whenever the stream has nothing more waiting",
		func(o *options) kind { return duration(&o.GroupMaxDelay, false) }},
	{"sequences", "owned", "publisher sequences brought to the target (never moved backwards there): owned (those of the published tables' serial and identity columns, and of their partitioned roots and inheritance parents), all (every sequence of the database) or none",
		func(o *options) kind { return choice(&o.Sequences, sequences.Modes, sequences.ParseMode) }},
	{"sequence_sync_interval", "30s", "how often sequences are synced while streaming (also after the initial copy, and with parapply sync-sequences); 0: only then",
		func(o *options) kind { return duration(&o.SequenceSyncInterval, true) }},
	{"lock_timeout", "10s", "the target sessions' lock_timeout: a wait this long on a lock ends in a retry of the transaction after the earlier ones, or, for the oldest, in a new run from what the target recorded (a lock held by a session outside parapply); 0 turns it off",
		func(o *options) kind { return duration(&o.LockTimeout, true) }},
	{"reconnect_timeout", "5min", "how long to ride out faults (a lost connection, a server restart, the slot still held by a dying walsender): each one starts a new run from what the target recorded, until this long has passed without a run that streamed for 10s (a target that lacks a resource or takes no writes is waited for without this bound); 0 stops at the first fault or wait",
		func(o *options) kind { return duration(&o.ReconnectTimeout, true) }},
	{"status_interval", "10s", "most time between status updates to the publisher and progress log lines",
		func(o *options) kind { return duration(&o.StatusInterval, false) }},
	{"metrics_addr", "", "host:port to serve Prometheus metrics on (/metrics); empty turns them off",
		func(o *options) kind { return str(&o.MetricsAddr) }},
	{"cpu_profile", "", "file to write a CPU profile of the whole run to when it ends (Go's pprof format: go tool pprof -top parapply FILE), for finding where parapply's own CPU goes; empty turns it off",
		func(o *options) kind { return str(&o.CPUProfile) }},
	{"log_format", "text", "log format: text or json",
		func(o *options) kind { return choice(&o.LogFormat, logFormats, parseLogFormat) }},
	{"log_level", "info", "log level: debug, info, warn or error",
		func(o *options) kind { return level(&o.LogLevel) }},
}

// read reads every setting once into its typed field, refusing what a
// run would refuse: the settings a run cannot start without come first,
// named even when another one is bad as well; then the first bad value, in
// the order of settings. What it returns is the one
// typed value run, check and the pre-flight gate start from (through
// subscriberConfig).
func (c config) read() (options, error) {
	o, err := c.options()
	if verr := o.validate(); verr != nil {
		return options{}, verr
	}
	return o, err
}

// loadOptions resolves the settings a command takes (loadConfig; names as
// there) and reads them typed (options): the one value the command starts
// from. A command that names a missing setting before a bad one calls the
// two itself, as cutover does.
func loadOptions(fs *flag.FlagSet, args []string, names ...string) (options, error) {
	c, err := loadConfig(fs, args, names...)
	if err != nil {
		return options{}, err
	}
	return c.options(names...)
}

// subscriberConfig reads the settings (read) into a subscriber
// configuration: what run starts with, and what parapply check and the
// pre-flight gate judge.
func subscriberConfig(c config, log *slog.Logger) (subscriber.Config, error) {
	o, err := c.read()
	if err != nil {
		return subscriber.Config{}, err
	}
	return o.subscriberConfig(log)
}

// subscriberConfig turns the typed settings into a subscriber
// configuration, rejecting combinations it refuses with a message that
// names the settings.
func (o options) subscriberConfig(log *slog.Logger) (subscriber.Config, error) {
	cfg := subscriber.Config{
		Source: source.Config{DSN: o.Source, Slot: o.Slot, Publications: o.Publications, Streaming: o.Streaming,
			AppName: o.ApplicationName, StatusInterval: o.StatusInterval, TwoPhase: o.TwoPhase, Origin: o.Origin, Failover: o.Failover},
		Target: apply.Config{DSN: o.Target, AppName: o.ApplicationName + " apply", Slot: o.Slot, SynchronousCommit: o.SynchronousCommit,
			BatchRows: o.BatchRows, LockTimeout: fmt.Sprintf("%dms", o.LockTimeout.Milliseconds()),
			Prefetch: o.Prefetch, PrefetchConns: o.PrefetchConnections},
		Log:      log,
		CopyData: o.CopyData, CopyWorkers: o.CopyWorkers, ExistingData: o.ExistingData, CopyDeferIndexes: o.CopyDeferIndexes,
		Group:   subscriber.GroupLimits{MaxChanges: o.GroupMaxChanges, MaxBytes: o.GroupMaxBytes, MaxDelay: o.GroupMaxDelay},
		Workers: o.Workers, AutoWorkers: o.AutoWorkers, StreamWorkers: o.StreamWorkers, SpillDir: o.SpillDirectory,
		CommitOrder: o.CommitOrder, ReconnectTimeout: o.ReconnectTimeout,
		Sequences: o.Sequences, SequenceSyncInterval: o.SequenceSyncInterval,
		DetectConflicts: o.DetectConflicts, DetectConflictsAsked: o.DetectConflictsAsked, Conflicts: o.Conflicts, OnError: o.OnError, DDL: o.DDL,
		DetectUpdateDeleted: o.DetectUpdateDeleted, MaxRetention: o.MaxRetention, MaxClockSkew: o.MaxClockSkew,
		SharedTables: o.SharedTables, Binary: o.Binary,
		Schema: o.Schema, PGDump: o.PGDump,
	}
	if o.AutoWorkers {
		cfg.Workers = o.MaxWorkers
	}
	if o.DecodingWorkMem > 0 {
		cfg.Source.DecodingWorkMem = fmt.Sprintf("%dkB", o.DecodingWorkMem>>10)
	}
	return cfg, cfg.Validate()
}

// logger is the logger log_format and log_level ask for, writing to w.
func (o options) logger(w io.Writer) *slog.Logger {
	opts := &slog.HandlerOptions{Level: o.LogLevel}
	if o.LogFormat == logJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// config holds resolved setting values by name.
type config map[string]string

func flagName(name string) string { return strings.ReplaceAll(name, "_", "-") }

// settingFlag is a setting's flag. It keeps the text given, read by the
// setting's kind with the other sources once they are merged, so that a bad
// value gets the same error from a flag as from the environment or the file
// (and flag's usage dump is not printed on top of it).
type settingFlag struct{ v string }

func (f *settingFlag) String() string {
	if f == nil {
		return ""
	}
	return f.v
}

func (f *settingFlag) Set(v string) error { f.v = v; return nil }

// usage is a setting's help for -h: the help, then how a value is written,
// its kind's word in backquotes so that flag.PrintDefaults shows it after
// the flag's name (and the default after it).
func (s setting) usage() string {
	return s.help + " (" + s.kind(&options{}).note() + ")"
}

// loadConfig resolves settings from defaults, --config file, environment and
// flags, in that order of precedence. names are the settings the command
// takes as flags (every one if none is named); a configuration file may
// hold the others, for the commands that read the same file.
func loadConfig(fs *flag.FlagSet, args []string, names ...string) (config, error) {
	for _, s := range settings {
		if len(names) == 0 || contains(names, s.name) {
			fs.Var(&settingFlag{s.def}, flagName(s.name), s.usage())
		}
	}
	file := fs.String("config", os.Getenv("PARAPPLY_CONFIG"), "configuration file in postgresql.conf syntax (name = value lines)")
	if err := parseFlags(fs, args); err != nil {
		return nil, err
	}
	c := config{}
	for _, s := range settings {
		c[s.name] = s.def
	}
	if *file != "" {
		fileVals, err := readConfigFile(*file)
		if err != nil {
			return nil, err
		}
		for k, v := range fileVals {
			c[k] = v
		}
	}
	for _, s := range settings {
		if v, ok := os.LookupEnv("PARAPPLY_" + strings.ToUpper(s.name)); ok {
			c[s.name] = v
		}
	}
	warnUnknownEnv(os.Environ(), warnings)
	fs.Visit(func(f *flag.Flag) {
		if _, ok := f.Value.(*settingFlag); ok {
			c[strings.ReplaceAll(f.Name, "-", "_")] = f.Value.String()
		}
	})
	for _, side := range []string{"source", "target"} {
		if err := checkDSN(side, c[side]); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// helpOut is where -h prints a command's usage (standard output, so that
// "parapply run -h | less" shows it); warnings is where settings that
// cannot be right are reported.
var (
	helpOut  io.Writer = os.Stdout
	warnings io.Writer = os.Stderr
)

// parseFlags parses a command's flags. -h prints the usage to helpOut
// (flag.ErrHelp: exit 0); a flag that is not the command's, or a bad
// value, is a usage error that says where the command's flags are listed,
// without the whole list.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var out bytes.Buffer
	fs.SetOutput(&out)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		_, _ = io.Copy(helpOut, &out)
		return err
	case err != nil:
		return usageError{fmt.Errorf("%w (parapply %s -h lists its flags)", err, fs.Name())}
	case fs.NArg() > 0:
		return usageError{fmt.Errorf("unexpected argument %q: every value is given with its flag (parapply %s -h lists them)", fs.Arg(0), fs.Name())}
	}
	return nil
}

// usageError is a command line that asks for something no command takes:
// the exit status is 2, as for any usage error.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// otherEnv are the PARAPPLY_ variables that are no setting: the
// configuration file, the developer aids of run (paced reads, the
// allocation profile), and, by prefix, those of parapply's tests and
// benchmark.
var (
	otherEnv       = []string{"PARAPPLY_CONFIG", "PARAPPLY_PACED", "PARAPPLY_TRICKLE", "PARAPPLY_ALLOC_PROFILE"}
	otherEnvPrefix = []string{"PARAPPLY_TEST_", "PARAPPLY_BENCH_", "PARAPPLY_PG_", "PARAPPLY_CITUS_", "PARAPPLY_FAULT", "PARAPPLY_DEMO_", "PARAPPLY_READ_DELAY"}
)

// warnUnknownEnv reports each PARAPPLY_ variable of env that is no
// setting but is near the name of one (PARAPPLY_WOKERS), naming it: set,
// it would otherwise be ignored without a word. A variable near no name of
// parapply's (PARAPPLY_BIN, PARAPPLY_ARGS) is taken as one of the scripts
// around parapply and passed over in silence.
func warnUnknownEnv(env []string, w io.Writer) {
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		rest, ok := strings.CutPrefix(name, "PARAPPLY_")
		if !ok || contains(otherEnv, name) || known(strings.ToLower(rest)) || slices.ContainsFunc(otherEnvPrefix, func(p string) bool { return strings.HasPrefix(name, p) }) {
			continue
		}
		if near := nearestEnv(strings.ToUpper(name)); near != "" {
			fmt.Fprintf(w, "parapply: warning: %s is set in the environment but is no setting of parapply; it is ignored (did you mean %s?)\n", name, near)
		}
	}
}

// nearestEnv is the variable parapply reads (a setting's PARAPPLY_NAME or
// one of otherEnv) nearest to name, if within one edit for a name of up to
// four letters after PARAPPLY_ and two for a longer one; else "". The bound
// is tight so that a script's own PARAPPLY_DIR is not taken for
// PARAPPLY_DDL.
func nearestEnv(name string) string {
	limit := 2
	if len(name)-len("PARAPPLY_") <= 4 {
		limit = 1
	}
	best, bestD := "", limit+1
	try := func(cand string) {
		if d := nearest.Distance(name, cand); d < bestD {
			best, bestD = cand, d
		}
	}
	for _, s := range settings {
		try("PARAPPLY_" + strings.ToUpper(s.name))
	}
	for _, o := range otherEnv {
		try(o)
	}
	return best
}

func known(name string) bool {
	for _, s := range settings {
		if s.name == name {
			return true
		}
	}
	return false
}

// readConfigFile parses "name = value" lines; values may be single-quoted,
// a quote inside written twice, and # starts a comment, as in
// postgresql.conf.
func readConfigFile(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("configuration file: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		// The name ends at the first '=' or blank, as in postgresql.conf.
		end := strings.IndexAny(line, "= \t")
		if end < 0 {
			return nil, fmt.Errorf("%s:%d: expected name = value", path, n)
		}
		name, rest := line[:end], strings.TrimLeft(line[end:], " \t")
		rest = strings.TrimPrefix(rest, "=")
		name = strings.ToLower(strings.TrimSpace(name))
		if name == "" {
			return nil, fmt.Errorf("%s:%d: expected name = value", path, n)
		}
		if !known(name) {
			return nil, fmt.Errorf("%s:%d: unrecognized configuration parameter %q", path, n, name)
		}
		v, err := parseValue(strings.TrimSpace(rest))
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %s: %w", path, n, name, err)
		}
		out[name] = v
	}
	return out, sc.Err()
}

func parseValue(s string) (string, error) {
	if strings.HasPrefix(s, "'") {
		var b strings.Builder
		for i := 1; i < len(s); i++ {
			if s[i] == '\'' {
				if i+1 < len(s) && s[i+1] == '\'' {
					b.WriteByte('\'')
					i++
					continue
				}
				rest := strings.TrimSpace(s[i+1:])
				if rest != "" && rest[0] != '#' {
					return "", fmt.Errorf("unexpected text after quoted value")
				}
				return b.String(), nil
			}
			b.WriteByte(s[i])
		}
		return "", fmt.Errorf("unterminated quoted value")
	}
	if i := strings.IndexByte(s, '#'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s), nil
}
