package schemacopy

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// versionLine matches pg_dump --version's answer, as "pg_dump (PostgreSQL)
// 18.1 (Debian 18.1-1)" or "pg_dump (PostgreSQL) 19devel".
var versionLine = regexp.MustCompile(`^pg_dump \(PostgreSQL\) (\d+)`)

// ParseVersion reads the major version from pg_dump --version's output.
func ParseVersion(out string) (int, error) {
	m := versionLine.FindStringSubmatch(strings.TrimSpace(out))
	if m == nil {
		return 0, fmt.Errorf("not a pg_dump version: %q", strings.TrimSpace(out))
	}
	return strconv.Atoi(m[1])
}

// DebianDirs is where Debian and Ubuntu install each major version's
// client programs (postgresql-client-NN), one directory per version.
const DebianDirs = "/usr/lib/postgresql/*/bin"

// Candidates orders the pg_dump programs to try when the pg_dump setting
// is empty: the one on PATH (onPath, "" if none) first, then those of
// Debian's per-version directories (installed: the paths DebianDirs
// globbed to pg_dump), newest version first.
func Candidates(onPath string, installed []string) []string {
	var out []string
	if onPath != "" {
		out = append(out, onPath)
	}
	sorted := slices.Clone(installed)
	slices.SortStableFunc(sorted, func(a, b string) int { return dirVersion(b) - dirVersion(a) })
	for _, p := range sorted {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// dirVersion is the major version a Debian directory
// /usr/lib/postgresql/NN/bin/pg_dump is named for, 0 if none.
func dirVersion(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// Found is a pg_dump program tried, with its major version (0 where
// --version failed, with the reason).
type Found struct {
	Path    string
	Version int
	Err     error
}

// Pick returns the first program tried whose major version is need (the
// publisher's) or newer: an older pg_dump refuses a newer server.
func Pick(tried []Found, need int) (string, bool) {
	for _, f := range tried {
		if f.Err == nil && f.Version >= need {
			return f.Path, true
		}
	}
	return "", false
}

// Missing is the refusal of a start that found no usable pg_dump: what was
// tried, and the fix.
func Missing(tried []Found, need int, set bool) error {
	var seen []string
	for _, f := range tried {
		switch {
		case f.Err != nil:
			seen = append(seen, f.Path+" ("+f.Err.Error()+")")
		default:
			seen = append(seen, fmt.Sprintf("%s (version %d)", f.Path, f.Version))
		}
	}
	where := "none on PATH or in " + DebianDirs
	if set {
		where = "pg_dump = " + seen[0]
	} else if len(seen) > 0 {
		where = "found " + strings.Join(seen, ", ")
	}
	return fmt.Errorf("schema = copy needs pg_dump of version %d or newer (the publisher's), and %s: install postgresql-client-%d or set pg_dump = /path/to/pg_dump of version %d or newer",
		need, where, need, need)
}
