// Command parapply is a standalone PostgreSQL logical replication subscriber:
// it reads a publication's pgoutput stream and applies it to a target
// database, set-based and exactly once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errUsage
	}
	switch args[0] {
	case "run":
		return runCommand(ctx, args[1:])
	case "check":
		return checkCommand(ctx, args[1:], os.Stdout)
	case "status":
		return statusCommand(ctx, args[1:], os.Stdout)
	case "sync-sequences":
		return syncSequencesCommand(ctx, args[1:], os.Stdout)
	case "verify":
		return verifyCommand(ctx, args[1:], os.Stdout)
	case "cutover":
		return cutoverCommand(ctx, args[1:], os.Stdout)
	case "skip":
		return skipCommand(ctx, args[1:], os.Stdout)
	case "drop":
		return dropCommand(ctx, args[1:], os.Stdout)
	case "ddl":
		return ddlCommand(ctx, args[1:], os.Stdout)
	case "demo":
		return demoCommand(ctx, args[1:])
	case "version", "--version":
		fmt.Println(versionLine())
		return nil
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	return usageError{fmt.Errorf("unknown command %q (parapply help lists the commands)", args[0])}
}
