package main

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode"

	"github.com/parapply/parapply/internal/nearest"
)

// libpqKeywords are the connection keywords libpq knows (PostgreSQL 18's,
// as PQconndefaults lists them), and servicefile, which pgx reads as well.
// pgx passes any other keyword on to the server as a runtime parameter,
// where a typo (hostt=) is ignored or fails far from its cause (a unix
// socket not found): checkDSN refuses it first, as libpq does.
var libpqKeywords = []string{
	"service", "servicefile", "user", "password", "passfile", "channel_binding", "connect_timeout",
	"dbname", "host", "hostaddr", "port", "client_encoding", "options", "application_name",
	"fallback_application_name", "keepalives", "keepalives_idle", "keepalives_interval",
	"keepalives_count", "tcp_user_timeout", "sslmode", "sslnegotiation", "sslcompression",
	"sslcert", "sslkey", "sslcertmode", "sslpassword", "sslrootcert", "sslcrl", "sslcrldir",
	"sslsni", "requirepeer", "require_auth", "min_protocol_version", "max_protocol_version",
	"ssl_min_protocol_version", "ssl_max_protocol_version", "gssencmode", "krbsrvname", "gsslib",
	"gssdelegation", "replication", "target_session_attrs", "load_balance_hosts",
	"scram_client_key", "scram_server_key", "oauth_issuer", "oauth_client_id",
	"oauth_client_secret", "oauth_scope", "sslkeylogfile",
}

// keywordAliases are names other clients use for a libpq keyword, too far
// from it for the edit distance to find.
var keywordAliases = map[string]string{
	"database": "dbname", "db": "dbname", "username": "user", "hostname": "host",
	"pass": "password", "pwd": "password", "timeout": "connect_timeout", "ssl": "sslmode",
}

// checkDSN refuses a connection string of setting (source, target) that
// holds a keyword libpq does not know, in keyword/value form or as a
// URI's query parameter, naming it and the nearest known keyword. A string
// it cannot split is left to the connection's own parser, whose error
// says what is wrong.
func checkDSN(setting, dsn string) error {
	keys, ok := dsnKeywords(dsn)
	if !ok {
		return nil
	}
	for _, k := range keys {
		if slices.Contains(libpqKeywords, k) {
			continue
		}
		msg := fmt.Sprintf("unknown connection keyword %s in %s", k, setting)
		if near := nearestKeyword(k); near != "" {
			return fmt.Errorf("%s (did you mean %s?)", msg, near)
		}
		return fmt.Errorf("%s: libpq knows no such keyword (server settings go in options='-c name=value')", msg)
	}
	return nil
}

// nearestKeyword is the libpq keyword name stands for (keywordAliases) or
// is within two edits of (one for a name of up to four letters), or "".
func nearestKeyword(name string) string {
	if k, ok := keywordAliases[name]; ok {
		return k
	}
	limit := 2
	if len(name) <= 4 {
		limit = 1
	}
	best, bestD := "", limit+1
	for _, k := range libpqKeywords {
		if d := nearest.Distance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// dsnPair is one keyword of a connection string and, in keyword/value
// form, the pair's text as written.
type dsnPair struct{ key, text string }

// isURI reports whether dsn is written as a postgres:// URI.
func isURI(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// dsnKeywords are the keywords of dsn: a URI's query parameters, or the
// keywords of keyword/value pairs. ok is false when dsn cannot be split so.
func dsnKeywords(dsn string) (keys []string, ok bool) {
	if isURI(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, false
		}
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return nil, false
		}
		for k := range q {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return keys, true
	}
	pairs, ok := dsnPairs(dsn)
	for _, p := range pairs {
		keys = append(keys, p.key)
	}
	return keys, ok
}

// dsnPairs splits a keyword/value connection string into its pairs
// (values quoted with single quotes, \ escaping a quote or a backslash, as
// libpq reads them); ok is false when it cannot.
func dsnPairs(dsn string) (pairs []dsnPair, ok bool) {
	s := dsn
	for {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
		if s == "" {
			return pairs, true
		}
		start := s
		end := strings.IndexFunc(s, func(r rune) bool { return r == '=' || unicode.IsSpace(r) })
		if end <= 0 {
			return nil, false
		}
		key := s[:end]
		s = strings.TrimLeftFunc(s[end:], unicode.IsSpace)
		if !strings.HasPrefix(s, "=") {
			return nil, false
		}
		s = strings.TrimLeftFunc(s[1:], unicode.IsSpace)
		quoted := strings.HasPrefix(s, "'")
		if quoted {
			s = s[1:]
		}
		i := 0
		for ; i < len(s); i++ {
			if s[i] == '\\' {
				i++
				continue
			}
			if quoted && s[i] == '\'' || !quoted && unicode.IsSpace(rune(s[i])) {
				break
			}
		}
		if quoted {
			if i >= len(s) {
				return nil, false
			}
			i++
		}
		s = s[min(i, len(s)):]
		pairs = append(pairs, dsnPair{key, start[:len(start)-len(s)]})
	}
}

// secretKeywords are the connection keywords whose values are secrets.
var secretKeywords = []string{"password", "sslpassword", "oauth_client_secret", "scram_client_key", "scram_server_key"}

// withoutSecrets is dsn without its password and other secrets (see
// secretKeywords), to be printed in a command a DBA copies: the command
// then reads them where libpq does without them in the string (~/.pgpass,
// PGPASSWORD). A string that cannot be split is not printed at all.
func withoutSecrets(dsn string) string {
	if isURI(dsn) {
		u, err := url.Parse(dsn)
		if err != nil {
			return "DSN"
		}
		if _, set := u.User.Password(); set {
			u.User = url.User(u.User.Username())
		}
		q := u.Query()
		for _, k := range secretKeywords {
			q.Del(k)
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	pairs, ok := dsnPairs(dsn)
	if !ok {
		return "DSN"
	}
	var kept []string
	for _, p := range pairs {
		if !slices.Contains(secretKeywords, p.key) {
			kept = append(kept, p.text)
		}
	}
	return strings.Join(kept, " ")
}
