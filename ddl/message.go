package ddl

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Message is a captured DDL statement as the publisher sent it.
type Message struct {
	// SQL is the statement string the client sent (every statement of
	// it), or parapply.replicate_ddl's argument.
	SQL string `json:"sql"`
	// SearchPath is the schemas the statement's unqualified names
	// resolved in on the publisher (current_schemas(false)).
	SearchPath []string `json:"search_path"`
	// Role ran the statement on the publisher (for logs: the target runs
	// it as parapply's own role).
	Role string `json:"role"`
	// Tag is the command tag of the statement that sent it
	// ("replicate_ddl" for the function).
	Tag string `json:"tag"`
	// Objects are the published tables and indexes the DDL touched.
	Objects []Object `json:"objects"`
}

// Object is a relation a captured DDL touched, as PostgreSQL names it in
// pg_event_trigger_ddl_commands and pg_event_trigger_dropped_objects.
type Object struct {
	Type     string `json:"type"`
	Identity string `json:"identity"`
}

// Parse decodes a message's content; an error names what is wrong, since
// anyone who may call pg_logical_emit_message could have written it.
func Parse(content []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(content, &m); err != nil {
		return m, fmt.Errorf("a %s message that is not parapply's JSON: %w", Prefix, err)
	}
	if strings.TrimSpace(m.SQL) == "" {
		return m, fmt.Errorf("a %s message without a statement", Prefix)
	}
	return m, nil
}

// SetSearchPath is the SET LOCAL that gives the target the search_path the
// statement ran with.
func (m Message) SetSearchPath() string {
	if len(m.SearchPath) == 0 {
		return "SET LOCAL search_path TO ''"
	}
	q := make([]string, len(m.SearchPath))
	for i, s := range m.SearchPath {
		q[i] = quoteIdent(s)
	}
	return "SET LOCAL search_path TO " + strings.Join(q, ", ")
}

// DroppedIndexes returns the indexes a DROP INDEX dropped: the publisher
// no longer knows their tables, so the target runs the drop only where it
// has them.
func (m Message) DroppedIndexes() []string {
	if m.Tag != "DROP INDEX" {
		return nil
	}
	return m.objects("index")
}

// CreatedTables returns the tables a CREATE TABLE made: their rows follow
// in the stream, so the target takes them as synced from the start.
func (m Message) CreatedTables() []string {
	switch m.Tag {
	case "CREATE TABLE", "CREATE TABLE AS", "SELECT INTO", "replicate_ddl":
	default:
		return nil
	}
	return m.objects("table")
}

// objects returns the identities of the objects of one type.
func (m Message) objects(typ string) []string {
	var out []string
	for _, o := range m.Objects {
		if o.Type == typ {
			out = append(out, o.Identity)
		}
	}
	return out
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
