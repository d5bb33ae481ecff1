// Command parapply is a standalone PostgreSQL logical replication subscriber:
// it reads a publication's pgoutput stream and applies it to a target
// database, set-based and exactly once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/parapply/parapply/internal/pgerr"
	"github.com/parapply/parapply/subscriber"
)

// version is the release, set at build time with -ldflags
// "-X main.version=v1.2.3"; empty, versionLine takes the module's version
// and the VCS revision Go records in the binary.
var version = ""

const usage = `parapply: apply a PostgreSQL publication to a target database, fast and exactly once

usage:
  parapply run --source DSN --target DSN --publication NAME [flags]   replicate until stopped
  parapply check --source DSN --target DSN --publication NAME [flags] check, before a start, everything run needs of both servers
  parapply status --target DSN [--source DSN] [--watch] [--json]     show progress, lag and workers of running or past runs
  parapply verify --source DSN --target DSN --publication NAME        compare every published table, publisher against target
  parapply cutover --source DSN --target DSN --publication NAME       once writes stopped: wait for lag 0, sync sequences, verify
  parapply sync-sequences --source DSN --target DSN --publication NAME   bring the publisher's sequences to the target (cut-over)
  parapply skip --target DSN --slot NAME --lsn LSN [--ddl]           skip one source transaction (or only its DDL) at the next start
  parapply skip --target DSN --slot NAME --list                      list the skip requests: pending, skipped, passed
  parapply ddl install --source DSN --publication NAME               send the publisher's DDL on published tables to parapply (ddl = apply)
  parapply ddl uninstall|status --source DSN                         remove that capture, or show whether it is there
  parapply drop --target DSN --slot NAME [--source DSN]              retire a slot: its origins and rows on the target, the slot on the publisher
  parapply demo [--duration 10s] [--clients 4]                        run a demo on embedded servers (built with -tags demo)
  parapply version                                                    print the version

Run "parapply run -h" for every setting.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if code := exitCode(err); code != 0 && !errors.Is(err, errUsage) {
		fmt.Fprintln(os.Stderr, "parapply:", oneLine(pgerr.Text(err)))
		os.Exit(code)
	} else if code != 0 {
		os.Exit(code)
	}
}

// exitPermanent is the exit status of a run stopped for a reason a restart
// does not change (subscriber.ErrPermanent): a service manager told not to
// restart on it (systemd's RestartPreventExitStatus=3) does not loop.
const exitPermanent = 3

// exitCode maps what run returned to the process's exit status: 0 when it
// succeeded or the usage was asked for (-h, --help), 2 for a command line
// no command takes (none given, an unknown flag), 3 when parapply stopped
// for a reason a restart does not change, 1 for every other error (faults
// ridden out until reconnect_timeout, say); main prints the error.
func exitCode(err error) int {
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage), errors.As(err, new(usageError)):
		return 2
	case errors.Is(err, subscriber.ErrPermanent):
		return exitPermanent
	}
	return 1
}

// oneLine folds a multi-line error (pgx lists every address it tried) into
// one line, so the last line of output is always the whole error.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// errUsage means no command was given: the usage went to standard error,
// and the exit status is 2, as for any other usage error.
var errUsage = errors.New("no command given")

// command is one of parapply's commands, as each file of this package
// defines one: Run reads the command's own flags from args (what follows
// its name on the command line; -h prints its usage) and does its work.
type command interface {
	Run(ctx context.Context, args []string) error
}

// newCommand is the command called name, printing to stdout (run and
// demo log to standard error, as ever); nil when parapply has none of
// that name.
func newCommand(name string, stdout io.Writer) command {
	switch name {
	case "run":
		return &RunCommand{stderr: os.Stderr}
	case "check":
		return &CheckCommand{out: stdout}
	case "status":
		return &StatusCommand{out: stdout}
	case "sync-sequences":
		return &SyncSequencesCommand{out: stdout}
	case "verify":
		return &VerifyCommand{out: stdout}
	case "cutover":
		return &CutoverCommand{out: stdout}
	case "skip":
		return &SkipCommand{out: stdout}
	case "drop":
		return &DropCommand{out: stdout}
	case "ddl":
		return &DDLCommand{out: stdout}
	case "demo":
		return newDemoCommand(stdout)
	case "version", "--version":
		return &VersionCommand{out: stdout}
	}
	return nil
}

// run dispatches the command line to its command: the usage when none
// is named (or help is asked for), a usage error for a name no command
// has.
func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	if cmd := newCommand(args[0], os.Stdout); cmd != nil {
		return cmd.Run(ctx, args[1:])
	}
	return usageError{fmt.Errorf("unknown command %q (parapply help lists the commands)", args[0])}
}

// VersionCommand prints the version: parapply version (or --version),
// for bug reports and for checking what a host runs.
type VersionCommand struct {
	out io.Writer
}

// Run prints the version line, whatever follows the command's name.
func (cmd *VersionCommand) Run(_ context.Context, _ []string) error {
	fmt.Fprintln(cmd.out, versionLine())
	return nil
}
