//go:build !demo

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
)

// demoMissing says how to get the demo: it is built only with the build
// tag demo, so that the embedded servers it starts stay out of the
// production binary.
const demoMissing = "this parapply was built without the demo; run it with: go run -tags demo ./cmd/parapply demo"

// DemoCommand stands for the demo in a build without it: it says how to
// get it.
type DemoCommand struct{}

// newDemoCommand is the demo command; without the demo, it prints nothing
// to out.
func newDemoCommand(io.Writer) *DemoCommand { return &DemoCommand{} }

// Run says the demo is not built in (with -h, on standard error, and
// exit 0).
func (cmd *DemoCommand) Run(_ context.Context, args []string) error {
	if slices.Contains(args, "-h") || slices.Contains(args, "--help") || slices.Contains(args, "-help") {
		fmt.Fprintln(os.Stderr, demoMissing)
		return flag.ErrHelp
	}
	return errors.New(demoMissing)
}
