// Package conflict names the conflicts a replicated change can meet on the
// target and the policies that resolve them, and parses the
// conflict_resolution setting. It holds no connection: package apply detects
// conflicts and carries out the policies in the statements it builds.
package conflict

import (
	"fmt"
	"slices"
	"strings"
)

// Type is a kind of conflict, named as PostgreSQL's subscriptions name them.
type Type string

// The conflict types (PostgreSQL 18's and 19's).
const (
	// InsertExists: an insert meets a row with the same value in a unique
	// index.
	InsertExists Type = "insert_exists"
	// UpdateExists: an update gives a row the value of another row in a
	// unique index.
	UpdateExists Type = "update_exists"
	// UpdateMissing: the row an update names is not on the target.
	UpdateMissing Type = "update_missing"
	// UpdateDeleted: the row an update names was deleted on the target by
	// someone else than this subscription (a local session, another
	// origin), recently enough that the delete may not have seen the
	// update (see detect_update_deleted).
	UpdateDeleted Type = "update_deleted"
	// UpdateOriginDiffers: the row an update names was last changed by
	// someone else than this subscription (a local session, another
	// origin); needs track_commit_timestamp on the target.
	UpdateOriginDiffers Type = "update_origin_differs"
	// DeleteMissing: the row a delete names is not on the target.
	DeleteMissing Type = "delete_missing"
	// DeleteOriginDiffers: as UpdateOriginDiffers, for a delete.
	DeleteOriginDiffers Type = "delete_origin_differs"
	// MultipleUniqueConflicts: an insert or update meets different rows in
	// several unique indexes.
	MultipleUniqueConflicts Type = "multiple_unique_conflicts"
)

// Types lists every type, in the order documentation and metrics use.
var Types = []Type{InsertExists, UpdateExists, UpdateMissing, UpdateDeleted, UpdateOriginDiffers, DeleteMissing, DeleteOriginDiffers, MultipleUniqueConflicts}

// Policy is what is done when a conflict is met.
type Policy string

// The policies.
const (
	// Error stops, naming the source transaction (the transaction rolls
	// back; parapply skip or a fix on the target gets past it).
	Error Policy = "error"
	// ApplyRemote applies the remote change: an insert or update meeting an
	// existing row overwrites it; an update whose row is missing inserts the
	// remote row when the change carries every column.
	ApplyRemote Policy = "apply_remote"
	// KeepLocal keeps the target's row and drops the remote change.
	KeepLocal Policy = "keep_local"
	// LastUpdateWins applies the remote change when its source commit is
	// later than the local row's commit (origin name breaks a tie).
	LastUpdateWins Policy = "last_update_wins"
	// FirstUpdateWins applies it when it is earlier.
	FirstUpdateWins Policy = "first_update_wins"
	// Skip drops the remote change (as KeepLocal; the name reads better
	// for a row that is missing).
	Skip Policy = "skip"
)

// Policies lists every policy.
var Policies = []Policy{Error, ApplyRemote, KeepLocal, LastUpdateWins, FirstUpdateWins, Skip}

// allowed lists the policies each type takes; the first is its default,
// which is what the built-in subscription does.
var allowed = map[Type][]Policy{
	InsertExists:            {Error, ApplyRemote, KeepLocal, Skip, LastUpdateWins, FirstUpdateWins},
	UpdateExists:            {Error, KeepLocal, Skip},
	UpdateMissing:           {Skip, ApplyRemote, Error},
	UpdateDeleted:           {Skip, ApplyRemote, KeepLocal, LastUpdateWins, FirstUpdateWins, Error},
	UpdateOriginDiffers:     {ApplyRemote, KeepLocal, Skip, LastUpdateWins, FirstUpdateWins, Error},
	DeleteMissing:           {Skip, Error},
	DeleteOriginDiffers:     {ApplyRemote, KeepLocal, Skip, LastUpdateWins, FirstUpdateWins, Error},
	MultipleUniqueConflicts: {Error, KeepLocal, Skip},
}

// Default is the policy a type has when no setting names it.
func Default(t Type) Policy { return allowed[t][0] }

// NeedsCommitTimestamps reports whether a policy compares commit times.
func (p Policy) NeedsCommitTimestamps() bool { return p == LastUpdateWins || p == FirstUpdateWins }

// Rules hold the policies in force: by type, and by table and type.
type Rules struct {
	global map[Type]Policy
	tables map[string]map[Type]Policy // by schema.name as written (unquoted)
}

// For returns the policy for a conflict of type t on table (schema.name,
// unquoted).
func (r *Rules) For(table string, t Type) Policy {
	if r != nil {
		if p, ok := r.tables[table][t]; ok {
			return p
		}
		if p, ok := r.global[t]; ok {
			return p
		}
	}
	return Default(t)
}

// Tables lists the tables that have entries of their own, sorted.
func (r *Rules) Tables() []string {
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.tables))
	for t := range r.tables {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// NeedsCommitTimestamps names an entry whose policy compares commit times
// ("" when none does).
func (r *Rules) NeedsCommitTimestamps() string {
	if r == nil {
		return ""
	}
	for _, t := range Types {
		if p := r.global[t]; p.NeedsCommitTimestamps() {
			return fmt.Sprintf("%s=%s", t, p)
		}
	}
	for _, tab := range r.Tables() {
		for _, t := range Types {
			if p := r.tables[tab][t]; p.NeedsCommitTimestamps() {
				return fmt.Sprintf("%s:%s=%s", tab, t, p)
			}
		}
	}
	return ""
}

// Parse reads the conflict_resolution setting: comma-separated entries
// type=policy or schema.table:type=policy (a table without a schema is in
// public). Later entries win over earlier ones for the same type and table.
func Parse(s string) (*Rules, error) {
	r := &Rules{global: map[Type]Policy{}, tables: map[string]map[Type]Policy{}}
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		lhs, pol, ok := strings.Cut(e, "=")
		if !ok {
			return nil, fmt.Errorf("conflict_resolution entry %q: write type=policy or schema.table:type=policy, e.g. update_origin_differs=last_update_wins", e)
		}
		lhs, pol = strings.TrimSpace(lhs), strings.TrimSpace(pol)
		table, typ := "", lhs
		if i := strings.LastIndex(lhs, ":"); i >= 0 {
			table, typ = strings.TrimSpace(lhs[:i]), strings.TrimSpace(lhs[i+1:])
			if table == "" {
				return nil, fmt.Errorf("conflict_resolution entry %q: the table before ':' is empty", e)
			}
			if !strings.Contains(table, ".") {
				table = "public." + table
			}
		}
		t := Type(typ)
		pols, ok := allowed[t]
		if !ok {
			return nil, fmt.Errorf("conflict_resolution entry %q: unknown conflict type %q; use one of %s", e, typ, join(Types))
		}
		p := Policy(pol)
		if !slices.Contains(pols, p) {
			if !slices.Contains(Policies, p) {
				return nil, fmt.Errorf("conflict_resolution entry %q: unknown policy %q; use one of %s", e, pol, join(pols))
			}
			return nil, fmt.Errorf("conflict_resolution entry %q: %s does not apply to %s; use one of %s", e, p, t, join(pols))
		}
		if table == "" {
			r.global[t] = p
			continue
		}
		if r.tables[table] == nil {
			r.tables[table] = map[Type]Policy{}
		}
		r.tables[table][t] = p
	}
	return r, nil
}

// String gives the rules back in the setting's form, defaults left out.
func (r *Rules) String() string {
	if r == nil {
		return ""
	}
	var out []string
	for _, t := range Types {
		if p, ok := r.global[t]; ok {
			out = append(out, fmt.Sprintf("%s=%s", t, p))
		}
	}
	for _, tab := range r.Tables() {
		for _, t := range Types {
			if p, ok := r.tables[tab][t]; ok {
				out = append(out, fmt.Sprintf("%s:%s=%s", tab, t, p))
			}
		}
	}
	return strings.Join(out, ", ")
}

func join[T ~string](v []T) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}
