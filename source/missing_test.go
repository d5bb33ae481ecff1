package source

import "testing"

// TestMissingPublication: a start whose publication is missing names the
// one meant, else the CREATE PUBLICATION.
func TestMissingPublication(t *testing.T) {
	for _, c := range []struct {
		pub      string
		existing []string
		want     string
	}{
		{"app_pubb", []string{"app_pub"}, "publication app_pubb does not exist in source database db; did you mean app_pub? (set --publication app_pub; or, if app_pubb is meant, create it there with CREATE PUBLICATION app_pubb FOR TABLE ...)"},
		{"Sales", []string{"app_pub"}, `publication "Sales" does not exist in source database db; create it there with CREATE PUBLICATION "Sales" FOR TABLE ...`},
	} {
		if got := missingPublication(c.pub, "db", c.existing).Error(); got != c.want {
			t.Errorf("missingPublication(%q) =\n  %s\nwant\n  %s", c.pub, got, c.want)
		}
	}
}
