package enum

import "testing"

type color string

var colors = []color{"red", "green", "blue"}

func TestParse(t *testing.T) {
	tests := []struct {
		in      string
		want    color
		wantErr string
	}{
		{in: "red", want: "red"},
		{in: "blue", want: "blue"},
		{in: "Red", wantErr: `paint = "Red" is not valid: choose red, green or blue`},
		{in: " red", wantErr: `paint = " red" is not valid: choose red, green or blue`},
		{in: "", wantErr: `paint = "" is not valid: choose red, green or blue`},
		{in: "yellow", wantErr: `paint = "yellow" is not valid: choose red, green or blue`},
	}
	for _, tt := range tests {
		got, err := Parse("paint", tt.in, colors)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("Parse(%q) = %q, %v; want error %q", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestJoin(t *testing.T) {
	tests := []struct {
		in   []color
		want string
	}{
		{nil, ""},
		{[]color{"a"}, "a"},
		{[]color{"a", "b"}, "a or b"},
		{[]color{"a", "b", "c"}, "a, b or c"},
	}
	for _, tt := range tests {
		if got := Join(tt.in); got != tt.want {
			t.Errorf("Join(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
