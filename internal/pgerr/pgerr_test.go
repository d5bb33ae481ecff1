package pgerr

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestText(t *testing.T) {
	pe := &pgconn.PgError{Severity: "ERROR", Message: "conflict update_exists on public.t", Code: "PC002", Detail: "key (id)=(1)", Hint: "parapply skip --slot s --lsn 0/1"}
	tests := []struct {
		err  error
		want string
	}{
		{nil, ""},
		{errors.New("plain"), "plain"},
		{fmt.Errorf("applying: %w", pe), "applying: ERROR: conflict update_exists on public.t (SQLSTATE PC002); DETAIL: key (id)=(1); HINT: parapply skip --slot s --lsn 0/1"},
		// Already in the message: not repeated.
		{fmt.Errorf("applying (key (id)=(1)): %w", pe), "applying (key (id)=(1)): ERROR: conflict update_exists on public.t (SQLSTATE PC002); HINT: parapply skip --slot s --lsn 0/1"},
	}
	for _, tt := range tests {
		if got := Text(tt.err); got != tt.want {
			t.Errorf("Text(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}

// TestShortConnect: a refused connection, tried with and without TLS
// (sslmode=prefer), is one reason, and the original error is still there.
func TestShortConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := pgconn.Connect(ctx, "host=127.0.0.1 port=1 user=u dbname=d sslmode=prefer connect_timeout=5")
	if err == nil {
		t.Skip("something listens on port 1")
	}
	s := Short(err)
	if strings.Count(s.Error(), "connection refused") != 1 || strings.Contains(s.Error(), "\n") || !strings.Contains(s.Error(), "127.0.0.1:1") {
		t.Errorf("Short(%q) = %q, want the one attempt's reason", err, s)
	}
	var ce *pgconn.ConnectError
	if !errors.As(s, &ce) {
		t.Errorf("Short hides the ConnectError")
	}
	if Short(nil) != nil {
		t.Errorf("Short(nil) is not nil")
	}
}

// TestParse: a connection string that cannot be parsed is named, what is
// wrong with it said, and no part of it shown.
func TestParse(t *testing.T) {
	for _, dsn := range []string{"host=pub password='s3cret-pw user=x", "postgres://u:s3cret-pw@pub:notaport/db", "host=pub port=s3cret-pw"} {
		_, err := pgconn.ParseConfig(dsn)
		if err == nil {
			t.Fatalf("%q parsed", dsn)
		}
		got := Parse("source", err).Error()
		if strings.Contains(got, "s3cret") || !strings.HasPrefix(got, "the source connection string cannot be parsed: ") {
			t.Errorf("Parse(%q) = %q", dsn, got)
		}
		var pe *pgconn.ParseConfigError
		if !errors.As(Parse("source", err), &pe) {
			t.Errorf("Parse hides the ParseConfigError")
		}
	}
}
