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

// Distance is the Levenshtein distance of a and b, counted in runes.
func Distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}
