package preflight

import (
	"fmt"
	"slices"
	"strings"
)

// Column is one column as a server's catalog describes it, for the
// comparison of a published column with the target's.
type Column struct {
	Name string
	// Type is format_type(atttypid, atttypmod) (character varying(50));
	// Base is the type's name without its modifier (character varying),
	// Mod the modifier's numbers (50; 10,2 for numeric(10,2)), empty when
	// unbounded.
	Type, Base string
	Mod        []int
	// Enum holds the labels of an enum type; Category is pg_type's
	// typcategory (S string, N numeric, ...).
	Enum     []string
	Category string
}

// Fit is how a publisher's column lands in the target's.
type Fit struct {
	// Fails: some publisher values cannot be stored (the fix widens the
	// target's column); Warns: they are cast or rounded, and a value the
	// target refuses stops the apply. Neither: every value is stored as
	// it is.
	Fails, Warns bool
	Why          string
	// Labels are the publisher's enum labels the target's enum lacks.
	Labels []string
}

// lengthTypes hold at most their modifier's characters or bits.
var lengthTypes = []string{"character varying", "character", "bit", "bit varying"}

// timeTypes keep their modifier's digits of fractional seconds.
var timeTypes = []string{"timestamp without time zone", "timestamp with time zone", "time without time zone", "time with time zone", "interval"}

// integerRank orders the integer types by width: a wider target holds
// every value.
var integerRank = map[string]int{"smallint": 1, "integer": 2, "bigint": 3}

// stringTypes take every value of any of them.
var stringTypes = []string{"text", "character varying", "character"}

// Compare tells whether every value of the publisher's column pub can be
// stored in the target's column tgt, as PostgreSQL would cast it there.
func Compare(pub, tgt Column) Fit {
	if pub.Type == tgt.Type && len(pub.Enum) == 0 {
		return Fit{}
	}
	for _, r := range fitRules {
		if r.applies(pub, tgt) {
			return r.fit(pub, tgt)
		}
	}
	return castFit(pub, tgt)
}

// fitRule is how one pair of column kinds compares: the first rule that
// applies to a pair decides its fit.
type fitRule struct {
	applies func(pub, tgt Column) bool
	fit     func(pub, tgt Column) Fit
}

// fitRules are Compare's cases in order; a pair none applies to is cast
// (castFit).
var fitRules = []fitRule{
	// An enum into an enum: the target's must have every label.
	{func(pub, tgt Column) bool { return len(pub.Enum) > 0 && len(tgt.Enum) > 0 }, compareEnums},
	// An enum into unbounded text.
	{func(pub, tgt Column) bool { return len(pub.Enum) > 0 && unboundedText(tgt) }, fits},
	// The same type limited in characters or bits.
	{func(pub, tgt Column) bool { return pub.Base == tgt.Base && slices.Contains(lengthTypes, pub.Base) }, compareLength},
	{func(pub, tgt Column) bool { return pub.Base == "numeric" && tgt.Base == "numeric" }, compareNumeric},
	// The same time type, limited in digits of a second.
	{func(pub, tgt Column) bool { return pub.Base == tgt.Base && slices.Contains(timeTypes, pub.Base) }, compareTime},
	{func(pub, tgt Column) bool { return integerRank[pub.Base] > 0 && integerRank[tgt.Base] > 0 }, compareIntegers},
	// An integer into numeric: an unbounded one holds it, a bounded one
	// is cast.
	{func(pub, tgt Column) bool { return integerRank[pub.Base] > 0 && tgt.Base == "numeric" }, integerToNumeric},
	// A string into unbounded text.
	{func(pub, tgt Column) bool { return slices.Contains(stringTypes, pub.Base) && unboundedText(tgt) }, fits},
	// A string into a type limited in length.
	{func(pub, tgt Column) bool {
		return slices.Contains(stringTypes, pub.Base) && slices.Contains(lengthTypes, tgt.Base)
	}, compareStringLength},
}

// unboundedText reports whether c holds any string: text, or character
// varying without a length.
func unboundedText(c Column) bool {
	return c.Base == "text" || (c.Base == "character varying" && len(c.Mod) == 0)
}

// fits is the fit of a pair whose every value is stored as it is.
func fits(_, _ Column) Fit { return Fit{} }

// castFit is the fit of a pair Compare has no rule for: values are cast,
// and one the target refuses stops the apply.
func castFit(pub, tgt Column) Fit {
	return Fit{Warns: true, Why: fmt.Sprintf("values are cast from the publisher's %s to the target's %s; one the target refuses stops the apply", pub.Type, tgt.Type)}
}

// compareEnums fails when the target's enum lacks some of the publisher's
// labels, and names them.
func compareEnums(pub, tgt Column) Fit {
	var missing []string
	for _, l := range pub.Enum {
		if !slices.Contains(tgt.Enum, l) {
			missing = append(missing, "'"+l+"'")
		}
	}
	if len(missing) == 0 {
		return Fit{}
	}
	labels := make([]string, len(missing))
	for i, m := range missing {
		labels[i] = strings.Trim(m, "'")
	}
	return Fit{Fails: true, Why: fmt.Sprintf("the target's enum %s lacks the publisher's labels %s", tgt.Type, strings.Join(missing, ", ")), Labels: labels}
}

// compareLength compares two columns of one length-limited type: the
// target's limit must be as long as the publisher's.
func compareLength(pub, tgt Column) Fit {
	switch {
	case len(tgt.Mod) == 0:
		return Fit{}
	case len(pub.Mod) == 0:
		return Fit{Warns: true, Why: fmt.Sprintf("the publisher's %s has no length limit; a value longer than the target's %s is refused", pub.Type, tgt.Type)}
	case tgt.Mod[0] < pub.Mod[0]:
		return Fit{Fails: true, Why: fmt.Sprintf("the target's %s is shorter than the publisher's %s", tgt.Type, pub.Type)}
	}
	return Fit{}
}

// compareTime compares two columns of one time type: fewer digits of a
// second on the target round the values.
func compareTime(pub, tgt Column) Fit {
	if len(tgt.Mod) > 0 && (len(pub.Mod) == 0 || tgt.Mod[len(tgt.Mod)-1] < pub.Mod[len(pub.Mod)-1]) {
		return Fit{Warns: true, Why: fmt.Sprintf("the target's %s keeps fewer digits of a second than the publisher's %s: values are rounded", tgt.Type, pub.Type)}
	}
	return Fit{}
}

// compareIntegers fails when the target's integer type is narrower.
func compareIntegers(pub, tgt Column) Fit {
	if integerRank[tgt.Base] < integerRank[pub.Base] {
		return Fit{Fails: true, Why: fmt.Sprintf("the target's %s is narrower than the publisher's %s", tgt.Type, pub.Type)}
	}
	return Fit{}
}

// integerToNumeric: an unbounded numeric holds every integer; a bounded
// one takes them cast.
func integerToNumeric(pub, tgt Column) Fit {
	if len(tgt.Mod) == 0 {
		return Fit{}
	}
	return castFit(pub, tgt)
}

// compareStringLength compares a string into a length-limited type: it
// fails when the target's limit is shorter, and warns when the
// publisher's has none.
func compareStringLength(pub, tgt Column) Fit {
	if len(pub.Mod) > 0 && len(tgt.Mod) > 0 && tgt.Mod[0] < pub.Mod[0] {
		return Fit{Fails: true, Why: fmt.Sprintf("the target's %s is shorter than the publisher's %s", tgt.Type, pub.Type)}
	}
	if len(pub.Mod) == 0 {
		return Fit{Warns: true, Why: fmt.Sprintf("the publisher's %s has no length limit; a value longer than the target's %s is refused", pub.Type, tgt.Type)}
	}
	return Fit{}
}

// compareNumeric compares numeric(p,s) columns: the target must have as
// many digits before the point, and as many after it or values are
// rounded.
func compareNumeric(pub, tgt Column) Fit {
	if len(tgt.Mod) == 0 {
		return Fit{}
	}
	tp, ts := tgt.Mod[0], scale(tgt.Mod)
	if len(pub.Mod) == 0 {
		return Fit{Warns: true, Why: fmt.Sprintf("the publisher's numeric has no precision limit; a value beyond the target's %s is refused", tgt.Type)}
	}
	pp, ps := pub.Mod[0], scale(pub.Mod)
	switch {
	case tp-ts < pp-ps:
		return Fit{Fails: true, Why: fmt.Sprintf("the target's %s holds fewer digits before the decimal point than the publisher's %s", tgt.Type, pub.Type)}
	case ts < ps:
		return Fit{Warns: true, Why: fmt.Sprintf("the target's %s keeps fewer decimal digits than the publisher's %s: values are rounded", tgt.Type, pub.Type)}
	}
	return Fit{}
}

func scale(mod []int) int {
	if len(mod) > 1 {
		return mod[1]
	}
	return 0
}

// splitType reads format_type's text into its name without the modifier
// and the modifier's numbers: "character varying(50)" is character
// varying and 50, "timestamp(3) with time zone" timestamp with time zone
// and 3, "numeric(10,2)" numeric and 10, 2.
func splitType(t string) (base string, mod []int) {
	open := strings.IndexByte(t, '(')
	end := strings.IndexByte(t, ')')
	if open < 0 || end < open {
		return t, nil
	}
	for _, f := range strings.Split(t[open+1:end], ",") {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d", &n); err != nil {
			return t, nil
		}
		mod = append(mod, n)
	}
	return strings.TrimSpace(t[:open]) + t[end+1:], mod
}
