package subscriber

import (
	"strings"
	"testing"

	"github.com/parapply/parapply/conflict"
)

func TestConfigValidate(t *testing.T) {
	rules, err := conflict.Parse("insert_exists=skip")
	if err != nil {
		t.Fatal(err)
	}
	none, err := conflict.Parse("")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{name: "zero", cfg: Config{}},
		{name: "detection with everything", cfg: Config{DetectConflicts: true, DetectUpdateDeleted: true, Conflicts: rules}},
		{name: "no detection, empty rules", cfg: Config{Conflicts: none}},
		{name: "update_deleted without detection", cfg: Config{DetectUpdateDeleted: true},
			wantErr: "detect_update_deleted is on, but detect_conflicts is off: turn detect_conflicts on, or detect_update_deleted off"},
		{name: "rules without detection", cfg: Config{Conflicts: rules},
			wantErr: "conflict_resolution is set, but detect_conflicts is off: turn detect_conflicts on, or leave conflict_resolution empty"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("%s: Validate() = %v, want nil", tt.name, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: Validate() = %v, want %q", tt.name, err, tt.wantErr)
		}
	}
}

func TestParseEnums(t *testing.T) {
	for _, o := range OnErrors {
		if got, err := ParseOnError(string(o)); err != nil || got != o {
			t.Errorf("ParseOnError(%q) = %q, %v", o, got, err)
		}
	}
	for _, o := range CommitOrders {
		if got, err := ParseCommitOrder(string(o)); err != nil || got != o {
			t.Errorf("ParseCommitOrder(%q) = %q, %v", o, got, err)
		}
	}
	if _, err := ParseOnError("skip"); err == nil || err.Error() != `on_error = "skip" is not valid: choose stop or skip_transaction` {
		t.Errorf("ParseOnError(skip) = %v", err)
	}
	if _, err := ParseCommitOrder("fast"); err == nil || err.Error() != `commit_order = "fast" is not valid: choose preserve or dependency` {
		t.Errorf("ParseCommitOrder(fast) = %v", err)
	}
}
