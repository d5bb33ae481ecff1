package schemacopy

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Connection is how pg_dump reaches the publisher (dsn, parapply's source
// setting): dbname, for --dbname, is dsn without its password, and env
// hands the password to pg_dump's environment alone (PGPASSWORD): a
// command line is there for anyone on the host to read (ps), a process's
// environment for its user alone.
func Connection(dsn string) (dbname string, env []string, err error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return "", nil, fmt.Errorf("schema = copy: reading the source connection string for pg_dump: %w", err)
	}
	if dbname, err = withoutPassword(dsn); err != nil {
		return "", nil, err
	}
	if cfg.Password != "" {
		env = []string{"PGPASSWORD=" + cfg.Password}
	}
	return dbname, env, nil
}

// withoutPassword is a connection string, URI or keyword/value, without
// its password (a URI's user information or password parameter, the
// password keyword), the rest as written.
func withoutPassword(dsn string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("schema = copy: reading the source connection string for pg_dump: %w", err)
		}
		if _, set := u.User.Password(); set {
			u.User = url.User(u.User.Username())
		}
		if q := u.Query(); q.Has("password") {
			q.Del("password")
			u.RawQuery = q.Encode()
		}
		return u.String(), nil
	}
	var kept []string
	for rest := strings.TrimSpace(dsn); rest != ""; rest = strings.TrimSpace(rest) {
		pair, key, n, err := keyValue(rest)
		if err != nil {
			return "", err
		}
		if key != "password" {
			kept = append(kept, pair)
		}
		rest = rest[n:]
	}
	return strings.Join(kept, " "), nil
}

// keyValue reads the first keyword = value pair of s (libpq's syntax: a
// value single-quoted, or up to the next space; a backslash escapes the
// next character): the pair as written, its keyword, and its length.
func keyValue(s string) (pair, key string, n int, err error) {
	eq := strings.IndexByte(s, '=')
	if eq <= 0 {
		return "", "", 0, fmt.Errorf("schema = copy: reading the source connection string for pg_dump: %q is not keyword = value", s)
	}
	key = strings.TrimSpace(s[:eq])
	i := eq + 1
	for i < len(s) && s[i] == ' ' {
		i++
	}
	quoted := i < len(s) && s[i] == '\''
	if quoted {
		i++
	}
	for ; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			i++
		case quoted && c == '\'':
			return s[:i+1], key, i + 1, nil
		case !quoted && (c == ' ' || c == '\t' || c == '\n'):
			return s[:i], key, i, nil
		}
	}
	if quoted {
		return "", "", 0, fmt.Errorf("schema = copy: reading the source connection string for pg_dump: unterminated quoted value of %s", key)
	}
	return s, key, len(s), nil
}
