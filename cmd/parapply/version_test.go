package main

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
		if rev != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.revision", Value: rev})
		}
		if modified != "" {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: "vcs.modified", Value: modified})
		}
		return bi
	}
	tests := []struct {
		release string
		info    *debug.BuildInfo
		ok      bool
		want    string
	}{
		{"v1.4.0", vcs("78bcbd9aaaaaaaaaaaaa", "true"), true, "v1.4.0"}, // -ldflags -X main.version wins
		{"", &debug.BuildInfo{Main: debug.Module{Version: "v1.3.2"}}, true, "v1.3.2"},
		{"", vcs("78bcbd9aaaaaaaaaaaaa", "false"), true, "devel-78bcbd9aaaaa"},
		{"", vcs("78bcbd9aaaaaaaaaaaaa", "true"), true, "devel-78bcbd9aaaaa-modified"},
		{"", vcs("", ""), true, "devel"}, // built with -buildvcs=false
		{"", nil, false, "devel"},
	}
	for _, tt := range tests {
		if got := versionOf(tt.release, tt.info, tt.ok); got != tt.want {
			t.Errorf("versionOf(%q, %+v) = %q, want %q", tt.release, tt.info, got, tt.want)
		}
	}
}
