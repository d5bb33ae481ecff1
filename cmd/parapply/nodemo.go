//go:build !demo

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
)

// demoMissing says how to get the demo: it is built only with the build
// tag demo, so that the embedded servers it starts stay out of the
// production binary.
const demoMissing = "this parapply was built without the demo; run it with: go run -tags demo ./cmd/parapply demo"

func demoCommand(_ context.Context, args []string) error {
	if slices.Contains(args, "-h") || slices.Contains(args, "--help") || slices.Contains(args, "-help") {
		fmt.Fprintln(os.Stderr, demoMissing)
		return flag.ErrHelp
	}
	return errors.New(demoMissing)
}
