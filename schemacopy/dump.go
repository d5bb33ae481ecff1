package schemacopy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// DumpTimeout bounds one run of pg_dump: it reads catalogs only, but
// waits for the locks of the tables it dumps.
const DumpTimeout = 10 * time.Minute

// versionTimeout bounds pg_dump --version.
const versionTimeout = 10 * time.Second

// Find returns the pg_dump to run for a publisher of major version need:
// the setting's (path, if set), else the first new enough of Candidates.
func Find(ctx context.Context, path string, need int) (string, error) {
	var tried []Found
	if path != "" {
		tried = []Found{try(ctx, path)}
	} else {
		onPath, _ := exec.LookPath("pg_dump")
		installed, _ := filepath.Glob(filepath.Join(DebianDirs, "pg_dump"))
		for _, p := range Candidates(onPath, installed) {
			tried = append(tried, try(ctx, p))
		}
	}
	if p, ok := Pick(tried, need); ok {
		return p, nil
	}
	return "", Missing(tried, need, path != "")
}

// try runs pg_dump --version.
func try(ctx context.Context, path string) Found {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			err = errors.New(msg)
		}
		return Found{Path: path, Err: err}
	}
	v, err := ParseVersion(out.String())
	return Found{Path: path, Version: v, Err: err}
}

// Dump runs pg_dump (path) with args and, beside parapply's environment,
// env (see Connection), within DumpTimeout, and returns its script; a
// failure carries pg_dump's own message.
func Dump(ctx context.Context, path string, args, env []string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, DumpTimeout)
	defer cancel()
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	// The child inherits parapply's environment (cmd.Environ: PATH, the
	// locale, libpq's own variables), plus its name and env.
	cmd.Env = append(append(cmd.Environ(), "PGAPPNAME=parapply schema copy"), env...)
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("not done in %s", DumpTimeout)
		}
		return "", fmt.Errorf("%s %s: %w: %s", path, args[1], err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}
