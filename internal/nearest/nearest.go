// Package nearest finds, among the names that exist, the one a misspelt
// name was most likely meant to be, so that an error about a missing
// object can say "did you mean ...?".
package nearest

import "strings"

// Name returns the candidate nearest to name by edit distance, ignoring
// case (an unquoted name is folded to lower case), if it is near enough to
// be a misspelling: within two edits, and fewer than half name's length;
// "" when none is, or name is itself a candidate.
func Name(name string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		if c == name {
			return ""
		}
		d := Distance(strings.ToLower(name), strings.ToLower(c))
		if best == "" || d < bestD || d == bestD && c < best {
			best, bestD = c, d
		}
	}
	if best == "" || bestD > 2 || 2*bestD >= len([]rune(name)) {
		return ""
	}
	return best
}

// Distance is the edit distance of a and b, in runes, counting an
// insertion, a deletion, a substitution or a swap of two neighbouring
// letters (hots for host) as one edit (optimal string alignment).
func Distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
