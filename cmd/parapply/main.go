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
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

const usage = `parapply: apply a PostgreSQL publication to a target database, fast and exactly once

usage:
  parapply run --source DSN --target DSN --publication NAME [flags]   replicate until stopped
  parapply status --target DSN [--source DSN] [--watch] [--json]     show progress, lag and workers of running or past runs
  parapply sync-sequences --source DSN --target DSN --publication NAME   bring the publisher's sequences to the target (cut-over)
  parapply demo [--duration 10s] [--clients 4]                        run a demo on embedded servers
  parapply version                                                    print the version

Run "parapply run -h" for every setting.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintln(os.Stderr, "parapply:", oneLine(err.Error()))
		os.Exit(1)
	}
}

// oneLine folds a multi-line error (pgx lists every address it tried) into
// one line, so the last line of output is always the whole error.
func oneLine(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "run":
		return runCommand(ctx, args[1:])
	case "status":
		return statusCommand(ctx, args[1:], os.Stdout)
	case "sync-sequences":
		return syncSequencesCommand(ctx, args[1:], os.Stdout)
	case "demo":
		return demoCommand(ctx, args[1:])
	case "version", "--version":
		fmt.Println("parapply", version)
		return nil
	case "help", "-h", "--help":
		fmt.Print(usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}
