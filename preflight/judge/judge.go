// Package judge holds the pre-flight judgements: pure functions over values
// read from the publisher or the target that say what is wrong and its
// exact fix. parapply check (package preflight) and a run's own start
// (packages source, target and subscriber) both call them, so that a
// problem reads the same, with the same fix, wherever it is met. Nothing
// here does I/O: each caller reads the values on its own connection (a
// replication connection for source, a plain one for preflight).
package judge

import (
	"fmt"
	"strings"

	"github.com/parapply/parapply"
	"github.com/parapply/parapply/internal/nearest"
)

// Finding is one problem: what is wrong, and the fix. As an error it
// reads as the pre-flight gate lists a failed check: what, then the fix.
type Finding struct {
	What, Fix string
	// cause is the server's refusal the finding stems from, if any, for
	// errors.As (a fault is told from a refusal by it).
	cause error
}

// Error words the finding as a refusal.
func (f *Finding) Error() string {
	if f.Fix == "" {
		return f.What
	}
	return f.What + " (fix: " + f.Fix + ")"
}

// Unwrap returns the server's refusal the finding stems from.
func (f *Finding) Unwrap() error { return f.cause }

// The first PostgreSQL versions (server_version_num) parapply and some of
// its settings need of the publisher.
const (
	// minVersion is the oldest parapply is tested on (15 to 19): 14's
	// pgoutput (protocol 2) has no two_phase, and no test runs it.
	minVersion        = 150000
	originNoneVersion = 160000 // pgoutput's origin option
)

// major is a server_version_num's major version.
func major(version int) int { return version / 10000 }

// PublisherVersion judges the publisher's version against what parapply and
// the settings (origin = none) need; nil when it serves
// them.
func PublisherVersion(version int, originNone bool) *Finding {
	switch {
	case version < minVersion:
		return &Finding{What: fmt.Sprintf("parapply needs PostgreSQL 15 or newer on the publisher (it is tested on 15 to 19), which runs %d", major(version)), Fix: "upgrade the publisher"}
	case originNone && version < originNoneVersion:
		return &Finding{What: fmt.Sprintf("origin = none needs PostgreSQL 16 or newer on the publisher (pgoutput's origin option), which runs %d", major(version)),
			Fix: "set origin = any, or upgrade the publisher"}
	}
	return nil
}

// TargetVersion judges the target's version; nil when parapply can apply
// to it.
func TargetVersion(version int) *Finding {
	if version < minVersion {
		return &Finding{What: fmt.Sprintf("parapply needs PostgreSQL 15 or newer on the target (it is tested on 15 to 19), which runs %d", major(version)), Fix: "upgrade the target"}
	}
	return nil
}

// WALLevel judges whether the publisher can decode logically, from its
// wal_level and, from PostgreSQL 19 on, its effective_wal_level (effective
// is "" where the server has no such setting). wal_level = logical always
// serves. On 19, wal_level = replica serves too: the server turns logical
// decoding on by itself while a logical slot exists (effective_wal_level
// then says logical), and parapply's start creates its slot. Only minimal
// fails there.
func WALLevel(level, effective string) *Finding {
	if level == "logical" || effective == "logical" || (effective != "" && level == "replica") {
		return nil
	}
	fix := "ALTER SYSTEM SET wal_level = logical; then restart the publisher"
	if effective == "" {
		return &Finding{What: "wal_level is " + level + "; logical decoding needs logical", Fix: fix}
	}
	return &Finding{What: "wal_level is " + level + " and effective_wal_level " + effective +
		"; logical decoding needs wal_level = logical, or replica (under which it turns on with the first logical slot)", Fix: fix}
}

// WALLevelDetail is what parapply check shows of a wal_level WALLevel
// passes: on 19 under wal_level = replica, that logical decoding is on
// (a logical slot exists) or turns on with the slot parapply creates.
func WALLevelDetail(level, effective string) string {
	switch {
	case level == "logical" || effective == "":
		return level
	case effective == "logical":
		return "wal_level " + level + ", effective_wal_level logical: a logical slot has turned logical decoding on"
	}
	return "wal_level " + level + ", effective_wal_level " + effective + ": logical decoding turns on when parapply creates its slot"
}

// Replication is the problem of a role that may not open a replication
// connection (no REPLICATION attribute, not a superuser).
func Replication(role string) *Finding {
	return &Finding{What: "role " + role + " may not open a replication connection", Fix: "ALTER ROLE " + parapply.Ident(role) + " REPLICATION;"}
}

// Publications judges the publications asked for against those the
// publisher has (existing): none given, or the first missing one, worded
// by MissingPublication; nil when each exists.
func Publications(asked, existing []string) *Finding {
	if len(asked) == 0 {
		return NoPublication()
	}
	for _, pub := range asked {
		found := false
		for _, e := range existing {
			found = found || e == pub
		}
		if !found {
			what, fix := MissingPublication(pub, existing)
			return &Finding{What: what, Fix: fix}
		}
	}
	return nil
}

// NoPublication is the problem of a run given no publication.
func NoPublication() *Finding {
	return &Finding{What: "no publication given", Fix: "set publication to the publication(s) to subscribe to"}
}

// MissingPublication words a publication the publisher lacks: the one of
// existing it was likely meant to be, first, else the CREATE PUBLICATION.
func MissingPublication(pub string, existing []string) (what, fix string) {
	ident := parapply.Ident
	create := "CREATE PUBLICATION " + ident(pub) + " FOR TABLE ...; (or FOR ALL TABLES) on the publisher"
	if near := nearest.Name(pub, existing); near != "" {
		return "publication " + ident(pub) + " does not exist; did you mean " + ident(near) + "?", "set publication = " + near + " (or, if " + ident(pub) + " is meant: " + create + ")"
	}
	what = "publication " + ident(pub) + " does not exist"
	switch {
	case len(existing) == 0:
		what += " (the publisher has none)"
	case len(existing) <= 5:
		what += " (the publisher has " + strings.Join(existing, ", ") + ")"
	}
	return what, create
}

// Slot judges an existing slot of the name the run is to stream from: of
// type slotType ("logical" or "physical"), with plugin ("" for none), in
// database (of the publisher's, current). nil when the run may go on
// from it.
func Slot(slot, slotType, plugin, database, current string) *Finding {
	const fix = "use another slot name (slot = ...)"
	switch {
	case slotType != "logical":
		return &Finding{What: "slot " + slot + " is a " + slotType + " slot, not a logical slot of pgoutput", Fix: fix}
	case plugin != "pgoutput":
		return &Finding{What: "slot " + slot + " is a logical slot of plugin " + plugin + ", not of pgoutput", Fix: fix}
	case database != current:
		return &Finding{What: "slot " + slot + " belongs to database " + database + ", not " + current, Fix: "use another slot name, or connect to database " + database}
	}
	return nil
}

// SlotInUse is the problem of a slot a walsender (pid, of application
// app, "" when unknown) streams from: parapply cannot stream from it too.
func SlotInUse(slot string, pid int, app string) *Finding {
	by := fmt.Sprintf("walsender pid %d", pid)
	if app != "" {
		by += " (application_name " + app + ")"
	}
	return &Finding{What: "slot " + slot + " is in use by " + by, Fix: "stop what streams from it, or start with another --slot"}
}

// PreparedTransactions judges the target's max_prepared_transactions for
// two_phase = on: parapply applies each prepared transaction as one there.
func PreparedTransactions(limit int) *Finding {
	if limit > 0 {
		return nil
	}
	return &Finding{What: "two_phase = on applies prepared transactions as prepared transactions on the target, but its max_prepared_transactions is 0",
		Fix: "ALTER SYSTEM SET max_prepared_transactions = 10; then restart the target (or turn two_phase off)"}
}

// ReplicaRole is the problem of a target role refused
// session_replication_role = replica (refusal, the server's error), which
// parapply's sessions apply under, as the built-in apply worker does.
func ReplicaRole(role string, refusal error) *Finding {
	return &Finding{What: "role " + role + " may not set session_replication_role: " + refusal.Error(),
		Fix: "GRANT SET ON PARAMETER session_replication_role TO " + parapply.Ident(role) + "; (PostgreSQL 15 or later; before it, a superuser)", cause: refusal}
}

// CommitTimestamps judges track_commit_timestamp (on) on the target for
// the conflict_resolution entry that compares commit times (need, as
// conflict.Rules.NeedsCommitTimestamps names it; "" for none). It returns
// the refusal when need is set, else with on off the warning that
// conflicts with rows others changed go undetected; nil when on.
func CommitTimestamps(need string, on bool) (refusal, warning *Finding) {
	switch {
	case on:
		return nil, nil
	case need != "":
		return &Finding{What: "conflict_resolution entry " + need + " compares commit times, but track_commit_timestamp is off on the target",
			Fix: "ALTER SYSTEM SET track_commit_timestamp = on; then restart the target (or choose another policy)"}, nil
	}
	return nil, &Finding{What: "track_commit_timestamp is off on the target: update_origin_differs and delete_origin_differs (a row last changed by another session or origin) are not detected",
		Fix: "ALTER SYSTEM SET track_commit_timestamp = on; then restart the target (not needed for a one-way migration, whose target no one else writes)"}
}
