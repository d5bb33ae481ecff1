package subscriber

import (
	"errors"

	"github.com/parapply/parapply/apply"
	"github.com/parapply/parapply/internal/pgerr"
)

// goOnInText tells whether err ended a run for values that came in binary
// and cannot go on so, and if so makes the process's later runs read in
// text (textOnly), saying so once: a published column that cannot take
// binary values (apply.ErrBinaryUnfit, found before anything of its table
// was applied), or a value whose binary form the target refused
// (pgerr.BinaryInput: an empty tsquery, which PostgreSQL sends in binary
// but does not read back). The refused value's transaction was rolled
// back with its group, so the next run, reading again from the target's
// record, applies it in text, nothing lost or applied twice. pgoutput's
// binary option is the whole stream's: one such value puts every table
// in text.
func (s *Subscriber) goOnInText(err error) bool {
	if s.runs.textOnly.Load() {
		return false
	}
	if errors.Is(err, apply.ErrBinaryUnfit) {
		s.runs.textOnly.Store(true)
		s.log.Info("values go on in text: a published column cannot take them in binary", "reason", err)
		return true
	}
	if !s.runs.binary.Load() {
		return false
	}
	column, ok := pgerr.BinaryInput(err)
	if !ok {
		return false
	}
	s.runs.textOnly.Store(true)
	s.log.Warn("values go on in text for every table, from the target's last commit: the target refused a value in binary (PostgreSQL's binary input does not take every value its binary output writes; the stream's binary option is the whole stream's)",
		"column", column, "error", pgerr.Text(err))
	return true
}
