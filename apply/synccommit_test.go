package apply

import "testing"

// TestSynchronousCommit: every value parses to itself and is taken as
// durable or not as the appliers always took it; a boolean spelling is
// refused with the setting's message.
func TestSynchronousCommit(t *testing.T) {
	for _, tt := range []struct {
		in      string
		durable bool
		wantErr string
	}{
		{in: "on", durable: true},
		{in: "off"},
		{in: "local"},
		{in: "remote_write", durable: true},
		{in: "remote_apply", durable: true},
		{in: "true", wantErr: `synchronous_commit = "true" is not valid: choose on, off, local, remote_write or remote_apply`},
		{in: "", wantErr: `synchronous_commit = "" is not valid: choose on, off, local, remote_write or remote_apply`},
	} {
		got, err := ParseSynchronousCommit(tt.in)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("ParseSynchronousCommit(%q) = %q, %v; want error %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || string(got) != tt.in {
			t.Errorf("ParseSynchronousCommit(%q) = %q, %v", tt.in, got, err)
		}
		if got.durable() != tt.durable {
			t.Errorf("%s: durable %v, want %v", got, got.durable(), tt.durable)
		}
	}
}
