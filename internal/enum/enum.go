// Package enum reads the settings that take one of a fixed set of words
// (commit_order, on_error, existing_data, ...), so that every package that
// owns such a choice refuses a bad value with the same message: the
// setting, the value, and the words it takes.
package enum

import (
	"fmt"
	"strings"
)

// Parse returns the value of values that s is, exactly (case and blanks
// included, as parapply always read them), or an error naming the setting,
// the value and the choices: commit_order = "fast" is not valid: choose
// preserve or dependency.
func Parse[T ~string](setting, s string, values []T) (T, error) {
	for _, v := range values {
		if string(v) == s {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s = %q is not valid: choose %s", setting, s, Join(values))
}

// Join lists values as a sentence does ("a, b or c"), for messages and
// help texts.
func Join[T ~string](values []T) string {
	s := make([]string, len(values))
	for i, v := range values {
		s[i] = string(v)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
