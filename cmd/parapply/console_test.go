package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/parapply/parapply/status"
	"github.com/parapply/parapply/subscriber"
	"github.com/parapply/parapply/tablesync"
)

func TestConsoleBlanksPasswords(t *testing.T) {
	t.Setenv("PGPASSWORD", "from-the-env")
	var buf bytes.Buffer
	c := &console{w: &buf}
	c.secrets = passwords("host=a user=u password=Secret-1234", "postgres://u:uri-pass-99@h/db", "host=b password=abc", "")
	msg := "failed: password=Secret-1234 uri-pass-99 from-the-env abc\n"
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	for _, secret := range []string{"Secret-1234", "uri-pass-99", "from-the-env"} {
		if strings.Contains(got, secret) {
			t.Errorf("%q left in %q", secret, got)
		}
	}
	// Passwords shorter than four characters cannot be told from words.
	if !strings.Contains(got, "abc") {
		t.Errorf("short password blanked: %q", got)
	}
}

func TestConsoleKeepsLiveLineBelowLogs(t *testing.T) {
	var buf bytes.Buffer
	c := &console{w: &buf, tty: true}
	c.SetLive("streaming lag 0.1 s")
	buf.Reset()
	_, _ = c.Write([]byte("a log record\n"))
	if got, want := buf.String(), "\r\033[Ka log record\nstreaming lag 0.1 s"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	// Off a terminal, no live line and no escape codes.
	buf.Reset()
	plain := &console{w: &buf}
	plain.SetLive("x")
	_, _ = plain.Write([]byte("line\n"))
	if buf.String() != "line\n" {
		t.Errorf("off a terminal: %q", buf.String())
	}
}

func TestLiveLine(t *testing.T) {
	prev := subscriber.Status{Txns: 100, Rows: 1000, Workers: []subscriber.WorkerStatus{{Worker: 1}, {Worker: 2}}}
	st := subscriber.Status{State: subscriber.StateStreaming, Txns: 300, Rows: 5000, Applied: 0x10, SourceWALEnd: 0x10 + 20480,
		Lag: 1500 * time.Millisecond, Workers: []subscriber.WorkerStatus{{Worker: 1, Busy: time.Second}, {Worker: 2}}}
	got := liveLine(st, prev, 2*time.Second)
	for _, want := range []string{"streaming", "lag 1.5 s, 20 kB", "applied 0/10", "100 txn/s", "2000 rows/s", "workers 2, 25% busy"} {
		if !strings.Contains(got, want) {
			t.Errorf("live line %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "WAITING") {
		t.Errorf("live line %q says a wait while there is none", got)
	}
	st.Waiting = &subscriber.Wait{Reason: subscriber.WaitDiskFull, Since: time.Now().Add(-90 * time.Second), Fix: "free space on the target"}
	if got := liveLine(st, prev, 2*time.Second); !strings.Contains(got, "WAITING disk_full for 1m30s: free space on the target") {
		t.Errorf("waiting: live line %q", got)
	}
	st.Waiting = nil
	// workers = auto while the reader applies: the idle pool's figures are
	// not shown as workers at 0% busy.
	st.AutoWorkers, prev.AutoWorkers = true, true
	if got = liveLine(st, prev, 2*time.Second); !strings.Contains(got, "workers auto: reader applies") || strings.Contains(got, "busy") {
		t.Errorf("auto, reader applying: live line %q", got)
	}
	st.ActiveWorkers = 2
	if got = liveLine(st, prev, 2*time.Second); !strings.Contains(got, "workers 2, 25% busy") {
		t.Errorf("auto, workers applying: live line %q", got)
	}
	for _, tc := range []struct {
		a    status.Apply
		want string
	}{
		{status.Apply{}, "the stream reader's connection"},
		{status.Apply{WorkersActive: 4}, "4 workers"},
		{status.Apply{Auto: true, Switches: 3, ReadWaitShare: 0.42}, "the stream reader's connection (workers = auto: 3 switches; 42% of the appliers' active samples waited on data reads)"},
		{status.Apply{Auto: true, WorkersActive: 8, Switches: 1, ReadWaitShare: 0.9}, "8 workers (workers = auto: 1 switch; 90%"},
	} {
		if got := applyText(tc.a); !strings.Contains(got, tc.want) {
			t.Errorf("applyText(%+v) = %q, want it to contain %q", tc.a, got, tc.want)
		}
	}
	cp := subscriber.Status{State: subscriber.StateCopying, Copy: &tablesync.Progress{Tables: 4, TablesDone: 1, Rows: 50, EstRows: 100, Bytes: 1 << 20, Elapsed: time.Second}}
	got = liveLine(cp, subscriber.Status{}, time.Second)
	for _, want := range []string{"copying", "[##########..........]", " 50%", "1/4 tables", "1 MB/s"} {
		if !strings.Contains(got, want) {
			t.Errorf("copy line %q lacks %q", got, want)
		}
	}
}
