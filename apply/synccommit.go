package apply

import "github.com/parapply/parapply/internal/enum"

// SynchronousCommit is the target sessions' synchronous_commit, typed so
// that what it means for parapply (whether a commit waits for the
// target's synchronous standbys) is decided here, not by comparing words.
type SynchronousCommit string

// The values of SynchronousCommit, as PostgreSQL takes them (without its
// boolean spellings, which parapply never took).
const (
	SyncCommitOn          SynchronousCommit = "on"
	SyncCommitOff         SynchronousCommit = "off"
	SyncCommitLocal       SynchronousCommit = "local"
	SyncCommitRemoteWrite SynchronousCommit = "remote_write"
	SyncCommitRemoteApply SynchronousCommit = "remote_apply"
)

// SynchronousCommits lists synchronous_commit's values, for
// ParseSynchronousCommit and the help text.
var SynchronousCommits = []SynchronousCommit{SyncCommitOn, SyncCommitOff, SyncCommitLocal, SyncCommitRemoteWrite, SyncCommitRemoteApply}

// ParseSynchronousCommit reads the synchronous_commit setting, naming it
// and its values when s is none of them.
func ParseSynchronousCommit(s string) (SynchronousCommit, error) {
	return enum.Parse("synchronous_commit", s, SynchronousCommits)
}

// durable is what Applier.SyncCommit reports under s: a commit under off
// or local is not taken as durable when it returns, one under the others is.
func (s SynchronousCommit) durable() bool {
	return s != SyncCommitOff && s != SyncCommitLocal
}
