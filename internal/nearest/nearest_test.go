package nearest

import "testing"

func TestName(t *testing.T) {
	for _, c := range []struct {
		name       string
		candidates []string
		want       string
	}{
		{"app_pubb", []string{"app_pub", "other"}, "app_pub"},
		{"App_Pub", []string{"app_pub"}, "app_pub"},                        // case folded
		{"app_pub", []string{"app_pub", "app_pubb"}, ""},                   // it exists
		{"sales", []string{"app_pub", "orders_pub"}, ""},                   // nothing near
		{"ab", []string{"ac"}, ""},                                         // one edit of two letters is no misspelling
		{"itemz", []string{"items", "itemx"}, "items"},                     // ties: the first in order
		{"parapply_tset", []string{"parapply_test", "x"}, "parapply_test"}, // a transposition is two edits
		{"x", nil, ""},
	} {
		if got := Name(c.name, c.candidates); got != c.want {
			t.Errorf("Name(%q, %q) = %q, want %q", c.name, c.candidates, got, c.want)
		}
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"a", "", 1}, {"kitten", "sitting", 3}, {"app_pub", "app_pubb", 1}, {"é", "e", 1},
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
