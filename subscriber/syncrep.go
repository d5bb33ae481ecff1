package subscriber

import (
	"context"
	"strings"
	"time"
	"unicode"

	"github.com/jackc/pgx/v5"
)

// namedSynchronous reports whether a synchronous_standby_names value names
// app (or '*'): forms "s1, s2", "N (s1, s2)", "FIRST N (...)", "ANY N
// (...)", names double-quoted or not, compared case-insensitively as the
// publisher compares them.
func namedSynchronous(setting, app string) bool {
	s := strings.TrimSpace(setting)
	if s == "" || app == "" {
		return false
	}
	if open := strings.IndexByte(s, '('); open >= 0 && strings.HasSuffix(s, ")") {
		head := strings.Fields(s[:open])
		numeric := len(head) > 0 && strings.IndexFunc(head[len(head)-1], func(r rune) bool { return !unicode.IsDigit(r) }) < 0
		if numeric && (len(head) == 1 || len(head) == 2 && (strings.EqualFold(head[0], "first") || strings.EqualFold(head[0], "any"))) {
			s = s[open+1 : len(s)-1]
		}
	}
	for _, name := range splitNames(s) {
		if name == "*" || strings.EqualFold(name, app) {
			return true
		}
	}
	return false
}

// splitNames splits a comma-separated list whose items may be
// double-quoted (with "" for a quote).
func splitNames(s string) []string {
	var out []string
	var b strings.Builder
	quoted := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' && quoted && i+1 < len(s) && s[i+1] == '"':
			b.WriteByte('"')
			i++
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			out = append(out, strings.TrimSpace(b.String()))
			b.Reset()
		default:
			b.WriteByte(c)
		}
	}
	return append(out, strings.TrimSpace(b.String()))
}

// watchSyncStandby keeps s.syncStandby true while the publisher's
// synchronous_standby_names names parapply's application_name: its commits
// then wait for parapply's flush report, so the target commits
// synchronously and every advance is reported at once. The setting is read
// every two seconds on an ordinary connection (it can change at any
// reload); if that connection fails, parapply carries on as it was.
func (s *Subscriber) watchSyncStandby(ctx context.Context) {
	app := s.cfg.Source.AppName
	if app == "" {
		app = "parapply"
	}
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	warned := false
	for {
		if conn == nil {
			cfg, err := pgx.ParseConfig(s.cfg.Source.DSN)
			if err == nil {
				cfg.RuntimeParams["application_name"] = app + " watch"
				conn, err = pgx.ConnectConfig(ctx, cfg)
			}
			if err != nil && !warned && ctx.Err() == nil {
				s.log.Warn("cannot read the publisher's synchronous_standby_names; parapply will not know if it is a synchronous standby", "error", err)
				warned = true
			}
		}
		if conn != nil {
			var setting string
			if err := conn.QueryRow(ctx, "SELECT pg_catalog.current_setting('synchronous_standby_names')").Scan(&setting); err != nil {
				conn.Close(context.Background())
				conn = nil
			} else if named := namedSynchronous(setting, app); named != s.runs.syncStandby.Load() {
				s.runs.syncStandby.Store(named)
				if named {
					s.log.Info("the publisher names parapply in synchronous_standby_names: target commits are now synchronous and reported at once", "application_name", app)
				} else {
					s.log.Info("the publisher no longer names parapply in synchronous_standby_names", "application_name", app)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}
