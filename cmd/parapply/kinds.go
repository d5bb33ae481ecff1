package main

import (
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/parapply/parapply/conflict"
	"github.com/parapply/parapply/internal/enum"
)

// kind is how a setting's value is written and read: the word -h shows
// after the flag, a note after the help on how to write a value (the word
// in backquotes, for flag.PrintDefaults), and set, which reads a value into
// the setting's field of options or returns an error that names the
// setting, the value and what it takes.
type kind interface {
	note() string
	set(name, v string) error
}

const maxInt = math.MaxInt

// invalid is the error for a value a setting does not take: the setting,
// the value as given, and what it takes.
func invalid(name, v, want string) error {
	return fmt.Errorf("%s = %q is not valid: %s", name, v, want)
}

// boolKind is on or off, as postgresql.conf writes booleans (true, yes, 1
// and false, no, 0 too, in any case; empty is off).
type boolKind struct{ p *bool }

func boolean(p *bool) kind { return boolKind{p} }

func (boolKind) note() string { return "`on|off`" }

func (k boolKind) set(name, v string) error {
	b, ok := parseBool(v)
	if !ok {
		return invalid(name, v, "choose on or off")
	}
	*k.p = b
	return nil
}

func parseBool(v string) (b, ok bool) {
	switch strings.ToLower(v) {
	case "on", "true", "yes", "1":
		return true, true
	case "off", "false", "no", "0", "":
		return false, true
	}
	return false, false
}

// intKind is a whole number within bounds.
type intKind struct {
	p        *int
	min, max int
}

func integer(p *int, lo, hi int) kind { return intKind{p, lo, hi} }

func (k intKind) want() string {
	if k.max == maxInt {
		return fmt.Sprintf("an integer of at least %d", k.min)
	}
	return fmt.Sprintf("an integer from %d to %d", k.min, k.max)
}

func (k intKind) note() string { return strings.Replace(k.want(), "integer", "`integer`", 1) }

func (k intKind) set(name, v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < k.min || n > k.max {
		return invalid(name, v, k.want())
	}
	*k.p = n
	return nil
}

// workersKind is auto or a number of workers (0 to 64).
type workersKind struct {
	p    *int
	auto *bool
}

func workers(p *int, auto *bool) kind { return workersKind{p, auto} }

func (workersKind) note() string { return "`auto|integer`: auto, or 0 to 64" }

func (k workersKind) set(name, v string) error {
	if strings.EqualFold(strings.TrimSpace(v), "auto") {
		*k.p, *k.auto = 0, true
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > 64 {
		return invalid(name, v, "an integer from 0 to 64, or auto")
	}
	*k.p, *k.auto = n, false
	return nil
}

// detectionKind is detect_conflicts: auto (on, asked false: off for the
// tables Citus manages), or on or off as a boolean (asked true).
type detectionKind struct{ p, asked *bool }

func detection(p, asked *bool) kind { return detectionKind{p, asked} }

func (detectionKind) note() string { return "`auto|on|off`" }

func (k detectionKind) set(name, v string) error {
	if strings.EqualFold(strings.TrimSpace(v), "auto") {
		*k.p, *k.asked = true, false
		return nil
	}
	b, ok := parseBool(v)
	if !ok {
		return invalid(name, v, "choose auto, on or off")
	}
	*k.p, *k.asked = b, true
	return nil
}

// sizeKind is a byte count with PostgreSQL's memory units (see
// parseSize). optional lets it be empty (0).
type sizeKind struct {
	p        *int
	min      int
	optional bool
}

func size(p *int, least int, optional bool) kind { return sizeKind{p, least, optional} }

func (k sizeKind) note() string {
	n := "a `size` with its unit: B, kB, MB, GB or TB"
	if k.min > 1 {
		n += ", at least " + sizeText(k.min)
	}
	if k.optional {
		n += ", or empty"
	}
	return n
}

func (k sizeKind) set(name, v string) error {
	if k.optional && v == "" {
		*k.p = 0
		return nil
	}
	n, ok := parseSize(v)
	if !ok {
		return invalid(name, v, "a size with its unit, such as 16MB (units B, kB, MB, GB, TB; a bare number is refused: PostgreSQL's own settings read it in different units)")
	}
	if n < k.min {
		return invalid(name, v, "a size of at least "+sizeText(k.min)+", as on the publisher")
	}
	*k.p = n
	return nil
}

// parseSize reads a byte count with its unit (B, kB, MB, GB, TB), as
// PostgreSQL's memory settings are written. A bare number is refused:
// postgresql.conf reads one in each setting's own unit (kB for
// logical_decoding_work_mem), which a reader of parapply's file could not
// tell.
func parseSize(v string) (int, bool) {
	s := strings.TrimSpace(v)
	i := len(s)
	for i > 0 && (s[i-1] < '0' || s[i-1] > '9') {
		i--
	}
	n, err := strconv.Atoi(strings.TrimSpace(s[:i]))
	mult := map[string]int{"b": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30, "tb": 1 << 40}[strings.ToLower(strings.TrimSpace(s[i:]))]
	if err != nil || mult == 0 || n <= 0 {
		return 0, false
	}
	return n * mult, true
}

// sizeText writes n bytes in the largest unit that divides it, as
// PostgreSQL shows memory settings.
func sizeText(n int) string {
	for _, u := range []struct {
		name string
		b    int
	}{{"TB", 1 << 40}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"kB", 1 << 10}} {
		if n%u.b == 0 {
			return strconv.Itoa(n/u.b) + u.name
		}
	}
	return strconv.Itoa(n) + "B"
}

// durationKind is a time with PostgreSQL's units (or Go's, 1m30s); a bare
// number is refused (postgresql.conf reads one in each setting's own unit,
// seconds for some and milliseconds for others). off lets it be 0 (written
// exactly so), whose meaning each such setting's help gives.
type durationKind struct {
	p   *time.Duration
	off bool
}

func duration(p *time.Duration, off bool) kind { return durationKind{p, off} }

func (durationKind) note() string {
	return "a `duration` with its unit: ms, s, min or h, or as Go writes it (1m30s)"
}

func (k durationKind) set(name, v string) error {
	if k.off && strings.TrimSpace(v) == "0" {
		*k.p = 0
		return nil
	}
	d, ok := parseDuration(v)
	if !ok {
		if n := strings.TrimSpace(v); n != "0" && isNumber(n) {
			return invalid(name, v, "a duration with its unit, such as "+n+"ms or "+n+"s (a bare number is refused: PostgreSQL's own settings read it in different units)")
		}
		return invalid(name, v, "a duration above zero with its unit, such as 10s")
	}
	*k.p = d
	return nil
}

func isNumber(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

// parseDuration reads a positive duration with its unit: Go's form, and
// min for minutes as postgresql.conf writes them.
func parseDuration(v string) (time.Duration, bool) {
	s := strings.TrimSpace(v)
	if n, ok := strings.CutSuffix(s, "min"); ok {
		s = n + "m" // postgresql.conf's unit for minutes
	}
	d, err := time.ParseDuration(s)
	return d, err == nil && d > 0
}

// choiceKind is one of a fixed set of words, read by the function of the
// package that owns the choice.
type choiceKind[T ~string] struct {
	p      *T
	values []T
	parse  func(string) (T, error)
}

func choice[T ~string](p *T, values []T, parse func(string) (T, error)) kind {
	return choiceKind[T]{p, values, parse}
}

func (k choiceKind[T]) note() string {
	s := make([]string, len(k.values))
	for i, v := range k.values {
		s[i] = string(v)
	}
	return "`" + strings.Join(s, "|") + "`"
}

func (k choiceKind[T]) set(_, v string) error {
	c, err := k.parse(v)
	if err != nil {
		return err
	}
	*k.p = c
	return nil
}

// logFormat is log_format: how parapply writes its log lines.
type logFormat string

// The values of logFormat.
const (
	logText logFormat = "text"
	logJSON logFormat = "json"
)

// logFormats are log_format's values.
var logFormats = []logFormat{logText, logJSON}

func parseLogFormat(s string) (logFormat, error) { return enum.Parse("log_format", s, logFormats) }

// levelKind is a log level, as log/slog reads one (debug, info, warn,
// error, in any case, with an offset such as info+2).
type levelKind struct{ p *slog.Level }

func level(p *slog.Level) kind { return levelKind{p} }

func (levelKind) note() string { return "`debug|info|warn|error`" }

func (k levelKind) set(name, v string) error {
	if err := k.p.UnmarshalText([]byte(v)); err != nil {
		return invalid(name, v, "choose debug, info, warn or error")
	}
	return nil
}

// strKind is text taken as it is.
type strKind struct{ p *string }

func str(p *string) kind { return strKind{p} }

func (strKind) note() string { return "a `string`" }

func (k strKind) set(_, v string) error { *k.p = v; return nil }

// listKind is comma-separated names; blanks around them and empty entries
// are dropped.
type listKind struct{ p *[]string }

func list(p *[]string) kind { return listKind{p} }

func (listKind) note() string { return "a comma-separated `list`" }

func (k listKind) set(_, v string) error { *k.p = splitList(v); return nil }

// rulesKind is conflict_resolution's policies, read by package conflict.
type rulesKind struct{ p **conflict.Rules }

func rules(p **conflict.Rules) kind { return rulesKind{p} }

func (rulesKind) note() string { return "a comma-separated `list` of [schema.table:]type=policy" }

func (k rulesKind) set(_, v string) error {
	r, err := conflict.Parse(v)
	if err != nil {
		return err
	}
	*k.p = r
	return nil
}
