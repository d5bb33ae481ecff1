package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// buildVersion names this binary's build where status records, metrics and
// version show it: the release given at build time, else the module's
// version (set when installed as module@version), else the VCS revision
// the build was made from (with "-modified" when the tree had changes),
// else "devel".
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	return versionOf(version, info, ok)
}

func versionOf(release string, info *debug.BuildInfo, ok bool) string {
	if release != "" {
		return release
	}
	if !ok {
		return "devel"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified {
		rev += "-modified"
	}
	return "devel-" + rev
}

// versionLine is what parapply version prints: the version, the commit
// time when known, and the Go release and platform it was built with.
func versionLine() string {
	line := "parapply " + buildVersion()
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.time" {
				line += " (committed " + s.Value + ")"
			}
		}
	}
	return fmt.Sprintf("%s, built with %s for %s/%s", line, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
