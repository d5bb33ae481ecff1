// Package pgerr words PostgreSQL and connection errors for those who read
// parapply's messages: a failed connection's one reason (pgconn lists every
// address and TLS attempt it made), a server error's DETAIL and HINT (which
// pgconn's text leaves out), and a connection string that cannot be parsed,
// without the string (it may hold a password).
package pgerr

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Text is err's message with the DETAIL and HINT of the server error it
// wraps, where the message does not already hold them: the hint of a
// conflict stop names the skip command.
func Text(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if pe.Detail != "" && !strings.Contains(s, pe.Detail) {
			s += "; DETAIL: " + pe.Detail
		}
		if pe.Hint != "" && !strings.Contains(s, pe.Hint) {
			s += "; HINT: " + pe.Hint
		}
	}
	return s
}

// Short wraps a connection error so that its text is the one reason the
// connection failed: the server's error when it answered (a password
// refused, a database missing), else the last attempt's (TLS first, then
// plain, with sslmode=prefer; each address of a host name), whose reason
// is the one that ended it. errors.Is and errors.As see the original.
func Short(err error) error {
	if err == nil {
		return nil
	}
	return short{reason(err), err}
}

type short struct {
	msg string
	err error
}

func (e short) Error() string { return e.msg }
func (e short) Unwrap() error { return e.err }

func reason(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return Text(pe)
	}
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) {
		return err.Error()
	}
	inner := ce.Unwrap()
	for {
		j, ok := inner.(interface{ Unwrap() []error })
		if !ok {
			break
		}
		errs := j.Unwrap()
		if len(errs) == 0 {
			break
		}
		inner = errs[len(errs)-1]
	}
	if inner == nil {
		return err.Error()
	}
	return inner.Error()
}

// Parse is the error of a connection string that cannot be parsed, for
// side (source, target): what is wrong, never the string itself.
func Parse(side string, err error) error {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return parseError{"the " + side + " connection string cannot be parsed", err}
	}
	// pgconn's text is "cannot parse `<the string, password blanked when
	// it can tell>`: <why>": only the why.
	why := "malformed"
	if msg := pe.Error(); strings.LastIndex(msg, "`: ") >= 0 {
		why = msg[strings.LastIndex(msg, "`: ")+3:]
	}
	return parseError{"the " + side + " connection string cannot be parsed: " + why + " (write it as libpq does: host=... dbname=... user=..., quoting values with single quotes, or as a postgres:// URI)", err}
}

type parseError struct {
	msg string
	err error
}

func (e parseError) Error() string { return e.msg }
func (e parseError) Unwrap() error { return e.err }
