package ddl

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
)

// Split cuts a statement string, as a client sends it, into its statements
// at the semicolons outside quotes, dollar quotes and comments; each keeps
// its own text, trimmed, and empty ones are dropped. A BEGIN ATOMIC body
// (SQL-standard function bodies) is kept whole.
func Split(sql string) []string {
	var out []string
	start, atomic := 0, 0
	emit := func(end int) {
		if s := strings.TrimSpace(sql[start:end]); s != "" {
			out = append(out, s)
		}
		start = end + 1
	}
	for i := 0; i < len(sql); {
		c := sql[i]
		switch {
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			i = skipTo(sql, i, "\n")
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			i = skipBlockComment(sql, i)
		case c == '\'':
			escapes := i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e') && (i < 2 || !isIdent(sql[i-2]))
			i = skipQuoted(sql, i, '\'', escapes)
		case c == '"':
			i = skipQuoted(sql, i, '"', false)
		case c == '$' && (i == 0 || !isIdent(sql[i-1])):
			if tag, ok := dollarTag(sql[i:]); ok {
				i = skipTo(sql, i+len(tag), tag)
			} else {
				i++
			}
		case isIdent(c) && (i == 0 || !isIdent(sql[i-1])):
			j := i
			for j < len(sql) && isIdent(sql[j]) {
				j++
			}
			switch w := strings.ToUpper(sql[i:j]); {
			case w == "ATOMIC" && precededBy(sql[:i], "BEGIN"):
				atomic++
			case w == "END" && atomic > 0:
				atomic--
			case w == "CASE" && atomic > 0:
				atomic++ // CASE ... END inside the body
			}
			i = j
		case c == ';' && atomic == 0:
			emit(i)
			i++
		default:
			i++
		}
	}
	emit(len(sql))
	return out
}

func isIdent(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// precededBy reports whether the last word of s is w (any case).
func precededBy(s, w string) bool {
	s = strings.TrimRightFunc(s, unicode.IsSpace)
	return len(s) >= len(w) && strings.EqualFold(s[len(s)-len(w):], w) && (len(s) == len(w) || !isIdent(s[len(s)-len(w)-1]))
}

// skipTo returns the index just past the first end at or after from+1 (the
// string's end if none).
func skipTo(s string, from int, end string) int {
	if k := strings.Index(s[from+1:], end); k >= 0 {
		return from + 1 + k + len(end)
	}
	return len(s)
}

func skipBlockComment(s string, i int) int {
	depth := 0
	for i < len(s) {
		switch {
		case strings.HasPrefix(s[i:], "/*"):
			depth++
			i += 2
		case strings.HasPrefix(s[i:], "*/"):
			depth--
			i += 2
			if depth == 0 {
				return i
			}
		default:
			i++
		}
	}
	return i
}

// skipQuoted returns the index past a quoted string or identifier starting
// at i; a doubled quote is one quote, and with escapes a backslash escapes
// the next byte (E'...').
func skipQuoted(s string, i int, q byte, escapes bool) int {
	for i++; i < len(s); i++ {
		switch {
		case escapes && s[i] == '\\':
			i++
		case s[i] == q:
			if i+1 < len(s) && s[i+1] == q {
				i++
				continue
			}
			return i + 1
		}
	}
	return i
}

// dollarTag returns the opening $tag$ at the start of s.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		if s[j] == '$' {
			return s[:j+1], true
		}
		if !isIdent(s[j]) || (j == 1 && s[j] >= '0' && s[j] <= '9') {
			return "", false
		}
	}
	return "", false
}

// runsOnTarget matches the statements the target runs: schema changes. Row
// changes arrive as row changes; transaction control, settings, roles,
// grants, databases, tablespaces, publications and subscriptions are the
// target's own business.
var (
	ddlStart   = regexp.MustCompile(`(?is)^(CREATE|ALTER|DROP|COMMENT|DO|SECURITY\s+LABEL)\b`)
	notForward = regexp.MustCompile(`(?is)^(CREATE|ALTER|DROP)\s+(OR\s+REPLACE\s+)?(ROLE|USER|GROUP|DATABASE|TABLESPACE|PUBLICATION|SUBSCRIPTION|EVENT\s+TRIGGER|SYSTEM|DEFAULT\s+PRIVILEGES|USER\s+MAPPING|SERVER|OWNED)\b`)
	concurrent = regexp.MustCompile(`(?is)^((CREATE\s+(UNIQUE\s+)?INDEX|DROP\s+INDEX|REINDEX(\s+\(.*?\))?\s+(INDEX|TABLE))\s+CONCURRENTLY\b|ALTER\s+TABLE\b.*\bDETACH\s+PARTITION\b.*\bCONCURRENTLY\s*$)`)
	leading    = regexp.MustCompile(`(?s)^(\s+|--[^\n]*\n?|/\*.*?\*/)+`)
)

// Statements returns the statements of a captured string the target is to
// run, in order; an error when none is (the DDL ran inside a function or a
// procedure, whose text the publisher did not send).
func (m Message) Statements() ([]string, error) {
	var out []string
	tableAs := false
	for _, s := range Split(m.SQL) {
		body := leading.ReplaceAllString(s, "")
		if CreatesTableAs(body) {
			// Its table's definition comes in a message of its own
			// (the target never runs the query: its rows arrive as
			// changes).
			tableAs = true
			continue
		}
		if ddlStart.MatchString(body) && !notForward.MatchString(body) {
			out = append(out, s)
		}
	}
	if len(out) == 0 && !tableAs {
		return nil, fmt.Errorf("the publisher sent %s (%s) with no DDL statement parapply can run: %.200q; DDL run inside a function or procedure is sent as the call: run it through parapply.replicate_ddl('...') instead", Prefix, m.Tag, m.SQL)
	}
	return out, nil
}

var createTable = regexp.MustCompile(`(?is)^CREATE\s+((GLOBAL|LOCAL)\s+)?((TEMP|TEMPORARY|UNLOGGED)\s+)?TABLE\b`)

// CreatesTableAs reports whether s is a CREATE TABLE ... AS (or ... AS
// EXECUTE): a word AS outside parentheses, quotes and comments after
// CREATE TABLE, where a plain CREATE TABLE has none.
func CreatesTableAs(s string) bool {
	s = leading.ReplaceAllString(s, "")
	loc := createTable.FindStringIndex(s)
	if loc == nil {
		return false
	}
	depth := 0
	for i := loc[1]; i < len(s); {
		c := s[i]
		switch {
		case c == '\'' || c == '"':
			i = skipQuoted(s, i, c, false)
		case c == '-' && strings.HasPrefix(s[i:], "--"):
			i = skipTo(s, i, "\n")
		case c == '/' && strings.HasPrefix(s[i:], "/*"):
			i = skipBlockComment(s, i)
		case c == '(':
			depth++
			i++
		case c == ')':
			depth--
			i++
		case isIdent(c) && !isIdent(s[i-1]):
			j := i
			for j < len(s) && isIdent(s[j]) {
				j++
			}
			if depth == 0 && strings.EqualFold(s[i:j], "AS") {
				return true
			}
			i = j
		default:
			i++
		}
	}
	return false
}

// Concurrently reports whether s must run outside a transaction block
// (CREATE INDEX CONCURRENTLY and the like).
func Concurrently(s string) bool {
	return concurrent.MatchString(leading.ReplaceAllString(s, ""))
}
