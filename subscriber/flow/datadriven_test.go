package flow

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/pgoutput"
)

// TestScripts runs the scripts in testdata/. Each feeds a Core the
// messages of a stream through shell, a model of the subscriber's loop
// (it calls the core as loop.go, streams.go, twophase.go and ddl.go do,
// applies on one connection, the reader's, and keeps a model target), and
// prints what the loop does. Commands:
//
//	new [skip-below=N] [ahead=(F-L,...)] [skips=(N,N:ddl,N:reason,...)]
//	    [one-by-one=N] [max-changes=N] [max-bytes=N] [max-delay=D]
//	                    a new run, on a new model target
//	restart [one-by-one=N] [ahead=(F-L,...)]
//	                    a crash: what was not committed is lost; a new run
//	                    starts from the model target's record
//	stream [name=S]     feed the messages, one a line (below); name keeps
//	                    them for replay and crash-each
//	define S            keep the messages as S, for replay and crash-each
//	replay S            feed the messages of stream S again
//	flush               the loop has nothing more waiting: the open group
//	                    commits (stream.go's batch)
//	target              what the model target holds
//	crash-each S        for each position in stream S: a new run from the
//	                    given start, S fed up to it, a crash, a restart and
//	                    S fed whole; prints what the target holds and every
//	                    transaction applied twice
//
// Messages: begin X L (xid, commit LSN), origin NAME, insert|update|delete
// [sub=X] [bytes=N], ddl [alone], commit E [age=D] (end LSN; the group's
// age), begin-prepare X L [on-target], prepare X E, commit-prepared X L E,
// rollback-prepared X L E, stream-start X, stream-stop, stream-abort X SUB,
// stream-commit X L E [inflight], stream-prepare X L E. LSNs are numbers.
func TestScripts(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var sh *shell
		saved := map[string]string{}
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			switch d.Cmd {
			case "new":
				s := startOf(t, d)
				sh = newShell(s, &target{count: map[parapply.LSN]int{}, prepared: map[parapply.XID]bool{}})
				return fmt.Sprintf("run from progress row %d; ahead %v; skips %s; one-by-one %d; %+v\n", s.SkipBelow, s.Ahead, skipList(s.Skips), s.OneByOne, sh.c.Limits())
			case "restart":
				sh = sh.restart(startOf(t, d))
				return sh.out()
			case "stream":
				for _, a := range d.CmdArgs {
					if a.Key == "name" {
						saved[a.Vals[0]] = d.Input
					}
				}
				sh.feed(d.Input)
				return sh.out()
			case "define":
				saved[d.CmdArgs[0].Key] = d.Input
				return ""
			case "replay":
				sh.feed(saved[d.CmdArgs[0].Key])
				return sh.out()
			case "flush":
				sh.commitTaken()
				return sh.out()
			case "target":
				return sh.tgt.String()
			case "crash-each":
				return crashEach(startOf(t, d), saved[d.CmdArgs[0].Key])
			}
			d.Fatalf(t, "no command %s", d.Cmd)
			return ""
		})
	})
}

// crashEach crashes a run after each message of input, restarts it and
// feeds input whole: every transaction must be applied once.
func crashEach(start Start, input string) string {
	lines := strings.Split(strings.TrimSpace(input), "\n")
	var out []string
	for k := 0; k <= len(lines); k++ {
		sh := newShell(start, &target{count: map[parapply.LSN]int{}, prepared: map[parapply.XID]bool{}})
		sh.feed(strings.Join(lines[:k], "\n"))
		oneByOne := start.OneByOne
		if sh.ended {
			oneByOne = 0 // the run passed the failed group
		}
		sh = sh.restart(Start{OneByOne: oneByOne, Limits: start.Limits})
		sh.feed(input)
		for sh.ended {
			// Past the failed group: the next run groups again.
			sh = sh.restart(Start{Limits: start.Limits})
			sh.feed(input)
		}
		sh.commitTaken()
		out = append(out, fmt.Sprintf("crash after %d: %s%s", k, sh.tgt.applied(), sh.tgt.twice()))
	}
	return strings.Join(out, "\n") + "\n"
}

// target is the model target: what its committed target transactions
// recorded.
type target struct {
	row      parapply.LSN // the progress row's commit LSN
	count    map[parapply.LSN]int
	skips    []SkipRequest // pending requests
	prepared map[parapply.XID]bool
	order    []parapply.LSN
}

func (t *target) commit(txns []Txn) {
	for _, x := range txns {
		t.count[x.CommitLSN]++
		if t.count[x.CommitLSN] == 1 {
			t.order = append(t.order, x.CommitLSN)
		}
		t.row = x.CommitLSN
		if x.Skip || x.Failed != "" {
			t.skips = slices.DeleteFunc(t.skips, func(r SkipRequest) bool { return r.LSN == x.CommitLSN })
		}
	}
}

func (t *target) applied() string {
	var s []string
	for _, l := range t.order {
		s = append(s, strconv.FormatUint(uint64(l), 10))
	}
	return "applied " + strings.Join(s, ",")
}

func (t *target) twice() string {
	var s []string
	for _, l := range t.order {
		if t.count[l] > 1 {
			s = append(s, fmt.Sprintf("%d (%d times)", l, t.count[l]))
		}
	}
	if len(s) == 0 {
		return ""
	}
	return "; TWICE: " + strings.Join(s, ", ")
}

func (t *target) String() string {
	var p []string
	for x := range t.prepared {
		p = append(p, strconv.FormatUint(uint64(x), 10))
	}
	slices.Sort(p)
	return fmt.Sprintf("progress row %d; %s%s; prepared (%s); skips %s\n", t.row, t.applied(), t.twice(), strings.Join(p, ","), skipList(t.skips))
}

func skipList(rs []SkipRequest) string {
	var s []string
	for _, r := range rs {
		switch r.Reason {
		case "":
			s = append(s, strconv.FormatUint(uint64(r.LSN), 10))
		case SkipDDLReason:
			s = append(s, fmt.Sprintf("%d:ddl", r.LSN))
		default:
			s = append(s, fmt.Sprintf("%d:%s", r.LSN, r.Reason))
		}
	}
	return "(" + strings.Join(s, ",") + ")"
}

// shell models the subscriber's loop around a Core, on the reader's
// connection: one group at a time.
type shell struct {
	c     *Core
	tgt   *target
	lines []string
	// The open group: the transactions taken, their changes and bytes.
	group   []Txn
	changes int
	bytes   int
	open    bool // a transaction is begun in the sink
	streams map[parapply.XID]*spilled
	ended   bool // the run ended (one-by-one passed the failed group)
}

// spilled is a stream's model spill file: its changes, by offset.
type spilled struct {
	*Stream
	recs []string
}

func newShell(s Start, tgt *target) *shell {
	if s.Limits == (Limits{}) {
		s.Limits = Limits{MaxChanges: 1000, MaxBytes: 1 << 20, MaxDelay: time.Second}
	}
	if len(s.Skips) > 0 {
		tgt.skips = slices.Clone(s.Skips)
	}
	return &shell{c: New(s), tgt: tgt, streams: map[parapply.XID]*spilled{}}
}

// restart starts a new run from what the target recorded (s gives the
// one-by-one mark and the ranges committed ahead).
func (sh *shell) restart(s Start) *shell {
	sh.say("restart at progress row %d", sh.tgt.row)
	s.SkipBelow = sh.tgt.row
	for _, r := range sh.tgt.skips {
		if r.LSN > sh.tgt.row {
			s.Skips = append(s.Skips, r)
		}
	}
	sh.tgt.skips = slices.Clone(s.Skips)
	if s.Limits == (Limits{}) {
		s.Limits = sh.c.Limits()
	}
	n := newShell(s, sh.tgt)
	n.lines = sh.lines
	return n
}

func (sh *shell) say(format string, args ...any) {
	sh.lines = append(sh.lines, fmt.Sprintf(format, args...))
}

func (sh *shell) out() string {
	if len(sh.lines) == 0 {
		return ""
	}
	s := strings.Join(sh.lines, "\n") + "\n"
	sh.lines = nil
	return s
}

func (sh *shell) feed(input string) {
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		if line = strings.TrimSpace(line); line == "" || sh.ended {
			continue
		}
		m, args := message(line)
		if err := sh.frame(m, args); err != nil {
			sh.say("%s: error: %v; the run stops", line, err)
			sh.ended = true
		}
	}
}

// The model sink.

func (sh *shell) commitGroup() {
	if len(sh.group) == 0 {
		return
	}
	var l []string
	for _, x := range sh.group {
		l = append(l, strconv.FormatUint(uint64(x.CommitLSN), 10))
	}
	sh.say("  commit group (%s)", strings.Join(l, ","))
	sh.tgt.commit(sh.group)
	sh.group, sh.changes, sh.bytes = nil, 0, 0
}

// commitTaken is the loop's commitTaken: the group commits unless a
// transaction is open in it.
func (sh *shell) commitTaken() {
	if !sh.open {
		sh.commitGroup()
	}
}

func (sh *shell) begin(txn Txn) {
	txn, skip, err := sh.c.Begin(txn)
	sh.noted()
	if err != nil {
		sh.say("  error: %v; the run stops", err)
		sh.ended = true
		return
	}
	if skip {
		sh.say("  skip %d (the target has it)", txn.CommitLSN)
		return
	}
	sh.open = true
	sh.say("  begin %d%s", txn.CommitLSN, marks(txn))
}

func marks(t Txn) string {
	s := ""
	if t.Origin != "" {
		s += " origin=" + t.Origin
	}
	if t.Skip {
		s += " skip"
	}
	if t.SkipDDL {
		s += " skip-ddl"
	}
	if t.Failed != "" {
		s += " failed=" + t.Failed
	}
	return s
}

func (sh *shell) noted() {
	for _, n := range sh.c.Notes() {
		switch n.Kind {
		case NoteSkipMissed:
			sh.say("  warn: no transaction committed at skip LSN %d (next commits at %d)", n.Skip, n.Txn.CommitLSN)
		case NoteSkipDDL:
			sh.say("  warn: skipping the DDL of %d", n.Txn.CommitLSN)
		case NoteSkipped:
			sh.say("  count skip; warn: skipping %d", n.Txn.CommitLSN)
		case NoteSkippedFailed:
			sh.say("  count skip; warn: skipping %d that failed: %s", n.Txn.CommitLSN, n.Txn.Failed)
		}
	}
}

// message parses a script line into the message it stands for and its
// other words (key=value, or a flag).
func message(line string) (pgoutput.Message, map[string]string) {
	f := strings.Fields(line)
	args := map[string]string{}
	var n []uint64
	for _, w := range f[1:] {
		if k, v, ok := strings.Cut(w, "="); ok {
			args[k] = v
		} else if u, err := strconv.ParseUint(w, 10, 64); err == nil {
			n = append(n, u)
		} else {
			args[w] = w
		}
	}
	num := func(i int) uint64 {
		if i < len(n) {
			return n[i]
		}
		return 0
	}
	x, l, e := parapply.XID(num(0)), parapply.LSN(num(1)), parapply.LSN(num(2))
	switch f[0] {
	case "begin":
		return &pgoutput.Begin{XID: x, FinalLSN: l}, args
	case "origin":
		return &pgoutput.Origin{Name: f[1]}, args
	case "insert":
		return &pgoutput.Insert{}, args
	case "update":
		return &pgoutput.Update{}, args
	case "delete":
		return &pgoutput.Delete{}, args
	case "ddl":
		return &pgoutput.LogicalMessage{Transactional: true}, args
	case "commit":
		return &pgoutput.Commit{EndLSN: parapply.LSN(num(0))}, args
	case "begin-prepare":
		return &pgoutput.BeginPrepare{XID: x, PrepareLSN: l}, args
	case "prepare":
		return &pgoutput.Prepare{XID: x, EndLSN: parapply.LSN(num(1))}, args
	case "commit-prepared":
		return &pgoutput.CommitPrepared{XID: x, CommitLSN: l, EndLSN: e}, args
	case "rollback-prepared":
		return &pgoutput.RollbackPrepared{XID: x, PrepareEndLSN: l, RollbackEndLSN: e}, args
	case "stream-start":
		return &pgoutput.StreamStart{XID: x}, args
	case "stream-stop":
		return &pgoutput.StreamStop{}, args
	case "stream-abort":
		return &pgoutput.StreamAbort{XID: x, SubXID: parapply.XID(num(1))}, args
	case "stream-commit":
		return &pgoutput.StreamCommit{XID: x, CommitLSN: l, EndLSN: e}, args
	case "stream-prepare":
		return &pgoutput.StreamPrepare{XID: x, PrepareLSN: l, EndLSN: e}, args
	}
	panic("no message " + f[0])
}

func (sh *shell) frame(m pgoutput.Message, args map[string]string) error {
	if sh.c.InStream() {
		return sh.streamed(m, args)
	}
	return sh.dispatch(m, args)
}

// dispatch is loop.dispatch.
func (sh *shell) dispatch(m pgoutput.Message, args map[string]string) error {
	if o, ok := m.(*pgoutput.Origin); ok && sh.c.Holding() != HoldNone {
		return sh.beginHeld(o.Name)
	}
	if _, ok := m.(*pgoutput.LogicalMessage); ok && sh.c.Holding() == HoldBegin && args["alone"] != "" && sh.c.MayRunAlone() {
		sh.commitTaken()
		sh.say("run DDL alone, outside a transaction")
		return sh.beginHeld("")
	}
	if err := sh.beginHeld(""); err != nil {
		return err
	}
	switch m := m.(type) {
	case *pgoutput.Insert, *pgoutput.Update, *pgoutput.Delete:
		if !sh.c.Change() {
			sh.say("drop change")
			return nil
		}
		b := 10
		if v, ok := args["bytes"]; ok {
			b, _ = strconv.Atoi(v)
		}
		sh.changes, sh.bytes = sh.changes+1, sh.bytes+b
		sh.say("take change")
		return nil
	case *pgoutput.Begin:
		sh.c.Hold(HoldBegin, Txn{XID: m.XID, CommitLSN: m.FinalLSN})
		sh.say("hold BEGIN of %d", m.FinalLSN)
		return nil
	case *pgoutput.Commit:
		sh.say("commit")
		return sh.commit(m.EndLSN, args)
	case *pgoutput.LogicalMessage:
		if sh.c.InTxn() {
			return sh.ddl(args)
		}
		return nil
	case *pgoutput.Origin:
		return nil
	}
	return sh.dispatchEnds(m, args)
}

func (sh *shell) dispatchEnds(m pgoutput.Message, args map[string]string) error {
	switch m := m.(type) {
	case *pgoutput.StreamStart:
		sh.c.StreamStart(m.XID)
		st := sh.streams[m.XID]
		if st == nil {
			st = &spilled{Stream: NewStream()}
			sh.streams[m.XID] = st
		}
		st.Settled = false
		sh.say("open a block of stream %d", m.XID)
		return nil
	case *pgoutput.StreamCommit:
		return sh.streamCommit(m, args)
	case *pgoutput.StreamAbort:
		st := sh.streams[m.XID]
		switch {
		case st == nil:
		case WholeAbort(m):
			delete(sh.streams, m.XID)
			sh.say("drop stream %d", m.XID)
		default:
			if cut, ok := st.Cut(m.SubXID); ok {
				st.recs = st.recs[:cut]
				sh.say("cut stream %d at subtransaction %d: %d changes left", m.XID, m.SubXID, len(st.recs))
			}
		}
		return nil
	case *pgoutput.BeginPrepare:
		sh.c.Hold(HoldPrepare, Txn{XID: m.XID, CommitLSN: m.PrepareLSN})
		sh.say("hold BEGIN PREPARE of %d", m.PrepareLSN)
		return nil
	case *pgoutput.Prepare:
		sh.prepare(m.XID)
		return nil
	case *pgoutput.StreamPrepare:
		return sh.streamPrepare((*pgoutput.Prepare)(m))
	case *pgoutput.CommitPrepared:
		sh.finishPrepared(true, Txn{XID: m.XID, CommitLSN: m.CommitLSN}, m.EndLSN)
		return nil
	case *pgoutput.RollbackPrepared:
		sh.finishPrepared(false, Txn{XID: m.XID, CommitLSN: m.PrepareEndLSN}, m.RollbackEndLSN)
		return nil
	}
	return fmt.Errorf("unexpected %T message (protocol error)", m)
}

func (sh *shell) beginHeld(origin string) error {
	if sh.c.Holding() == HoldNone {
		return nil
	}
	txn, h := sh.c.Release(origin)
	if h == HoldPrepare {
		return sh.beginPrepare(txn)
	}
	sh.begin(txn)
	return nil
}

// commit is loop.commit and commitTxn.
func (sh *shell) commit(end parapply.LSN, args map[string]string) error {
	step := sh.c.Commit()
	sh.end(step, end, args)
	if sh.c.PastOneByOne() {
		sh.commitTaken()
		sh.say("  past the failed group: the run ends, the next one groups again")
		sh.ended = true
	}
	return nil
}

// end is loop.commitTxn.
func (sh *shell) end(step EndStep, end parapply.LSN, args map[string]string) {
	if step == EndSkipped {
		sh.commitTaken()
		sh.say("  tracker reached %d", end)
		return
	}
	sh.open = false
	sh.group = append(sh.group, sh.c.Txn())
	switch step {
	case EndDDLBack:
		sh.say("  the reader commits it; the workers take the stream back")
		sh.commitGroup()
	case EndCommitGroup:
		sh.say("  it ran DDL")
		sh.commitGroup()
	default:
		age, _ := time.ParseDuration(args["age"])
		if sh.c.Full(sh.changes, sh.bytes, age, sh.c.Limits().MaxChanges) {
			sh.commitGroup()
		} else {
			sh.say("  group open: %d transactions, %d changes, %d bytes", len(sh.group), sh.changes, sh.bytes)
		}
	}
}

// ddl is loop.ddl (and ddlToReader when moved is given).
func (sh *shell) ddl(args map[string]string) error {
	switch sh.c.DDL() {
	case DDLDrop:
		sh.say("drop DDL")
	case DDLPassOver:
		sh.say("warn: pass over DDL (skip --ddl)")
	case DDLNotRun:
		sh.say("warn: DDL of a transaction on_error skips is not run")
	case DDLRun:
		if args["alone"] != "" {
			return fmt.Errorf("a DDL that cannot run in a transaction, among other changes")
		}
		if args["moved"] != "" {
			sh.c.MovedToReader()
			sh.say("move the transaction from the workers to the reader")
		}
		sh.c.DDLRan()
		sh.say("run DDL")
	}
	return nil
}

// streamed is loop.streamed and spillChange.
func (sh *shell) streamed(m pgoutput.Message, args map[string]string) error {
	st := sh.streams[sh.c.StreamXID()]
	spill := func(line string) error {
		sub := sh.c.StreamXID()
		if v, ok := args["sub"]; ok {
			u, _ := strconv.ParseUint(v, 10, 32)
			sub = parapply.XID(u)
		}
		st.recs = append(st.recs, line)
		st.Spilled(sub, int64(len(st.recs)-1), 1)
		sh.say("spill %s of subtransaction %d", line, sub)
		return nil
	}
	switch m := m.(type) {
	case *pgoutput.StreamStop:
		sh.c.StreamStop()
		sh.say("close the block")
		return nil
	case *pgoutput.Insert:
		return spill("insert")
	case *pgoutput.Update:
		return spill("update")
	case *pgoutput.Delete:
		return spill("delete")
	case *pgoutput.Origin:
		st.Origin = m.Name
		return nil
	case *pgoutput.LogicalMessage:
		st.MarkDDL()
		return spill("ddl")
	}
	return fmt.Errorf("unexpected %T inside a streamed transaction (protocol error)", m)
}

// streamCommit is loop.streamCommit.
func (sh *shell) streamCommit(m *pgoutput.StreamCommit, args map[string]string) error {
	st := sh.streams[m.XID]
	txn := Txn{XID: m.XID, CommitLSN: m.CommitLSN}
	if st == nil {
		sh.begin(txn)
		sh.say("commit")
		return sh.commit(m.EndLSN, args)
	}
	delete(sh.streams, m.XID)
	txn.Origin = st.Origin
	if args["inflight"] != "" && !st.AtCommit {
		sh.commitTaken()
		keep := sh.c.KeepInflight(&txn)
		sh.noted()
		if keep {
			sh.say("commit in flight %d%s", txn.CommitLSN, marks(txn))
			sh.tgt.commit([]Txn{txn})
			return nil
		}
		sh.say("abort the in-flight copy")
	}
	sh.begin(txn)
	sh.replay(st)
	sh.say("commit")
	return sh.commit(m.EndLSN, args)
}

func (sh *shell) replay(st *spilled) {
	for _, r := range st.recs {
		m, args := message(r)
		if err := sh.dispatch(m, args); err != nil {
			sh.say("%s: error: %v", r, err)
		}
	}
}

// beginPrepare is loop.beginPrepare: the target is asked whether an
// earlier run prepared it.
func (sh *shell) beginPrepare(txn Txn) error {
	sh.commitTaken()
	skip := sh.c.Applied(txn.CommitLSN)
	if !skip {
		skip = sh.tgt.prepared[txn.XID]
	}
	if err := sh.c.BeginPrepared(txn, skip); err != nil {
		return err
	}
	if skip {
		sh.say("  skip prepared %d (the target has it)", txn.CommitLSN)
		return nil
	}
	sh.open = true
	sh.say("  begin prepared %d on the reader%s", txn.CommitLSN, marks(txn))
	return nil
}

func (sh *shell) prepare(xid parapply.XID) {
	sh.open = false
	if sh.c.Prepare() {
		sh.say("  tracker reached the PREPARE's end")
		return
	}
	sh.group, sh.changes, sh.bytes = nil, 0, 0
	sh.tgt.prepared[xid] = true
	sh.say("  PREPARE TRANSACTION of %d on the target", xid)
}

func (sh *shell) streamPrepare(m *pgoutput.Prepare) error {
	st := sh.streams[m.XID]
	txn := Txn{XID: m.XID, CommitLSN: m.PrepareLSN}
	if st != nil {
		txn.Origin = st.Origin
	}
	if err := sh.beginPrepare(txn); err != nil {
		return err
	}
	if st != nil {
		delete(sh.streams, m.XID)
		if !sh.c.Skipping() {
			sh.replay(st)
		}
	}
	sh.prepare(m.XID)
	return nil
}

func (sh *shell) finishPrepared(commit bool, txn Txn, end parapply.LSN) {
	sh.commitTaken()
	if !sh.c.FinishPrepared(commit, txn.CommitLSN) {
		sh.say("  tracker reached %d (the target has it)", end)
		return
	}
	delete(sh.tgt.prepared, txn.XID)
	if !commit {
		sh.say("  ROLLBACK PREPARED %d; tracker reached %d", txn.XID, end)
		return
	}
	sh.say("  COMMIT PREPARED %d", txn.XID)
	sh.tgt.commit([]Txn{txn})
}

// startOf reads a run's start from a command's arguments.
func startOf(t *testing.T, d *datadriven.TestData) Start {
	var s Start
	for _, a := range d.CmdArgs {
		switch a.Key {
		case "skip-below":
			s.SkipBelow = lsnArg(t, d, a.Vals[0])
		case "one-by-one":
			s.OneByOne = lsnArg(t, d, a.Vals[0])
		case "ahead":
			for _, v := range a.Vals {
				f, l, _ := strings.Cut(v, "-")
				s.Ahead = append(s.Ahead, Range{lsnArg(t, d, f), lsnArg(t, d, l)})
			}
		case "skips":
			for _, v := range a.Vals {
				l, reason, _ := strings.Cut(v, ":")
				if reason == "ddl" {
					reason = SkipDDLReason
				}
				s.Skips = append(s.Skips, SkipRequest{lsnArg(t, d, l), reason})
			}
		case "max-changes":
			s.Limits.MaxChanges = int(lsnArg(t, d, a.Vals[0]))
		case "max-bytes":
			s.Limits.MaxBytes = int(lsnArg(t, d, a.Vals[0]))
		case "max-delay":
			s.Limits.MaxDelay, _ = time.ParseDuration(a.Vals[0])
		}
	}
	if s.Limits != (Limits{}) {
		def := Limits{MaxChanges: 1000, MaxBytes: 1 << 20, MaxDelay: time.Second}
		if s.Limits.MaxChanges == 0 {
			s.Limits.MaxChanges = def.MaxChanges
		}
		if s.Limits.MaxBytes == 0 {
			s.Limits.MaxBytes = def.MaxBytes
		}
		if s.Limits.MaxDelay == 0 {
			s.Limits.MaxDelay = def.MaxDelay
		}
	}
	return s
}

func lsnArg(t *testing.T, d *datadriven.TestData, v string) parapply.LSN {
	u, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		d.Fatalf(t, "%s: %v", v, err)
	}
	return parapply.LSN(u)
}
