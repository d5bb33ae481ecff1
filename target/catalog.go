package target

import (
	"errors"
	"fmt"

	"github.com/parapply/parapply"
)

// ErrSchema marks a published table the target cannot take as it is.
var ErrSchema = errors.New("target schema does not match the publication")

// GeneratedOnTarget is the error for a published column that is generated
// on the target: the target computes such a column and cannot take the
// publisher's value, so the built-in subscription refuses it too
// (PostgreSQL 18: "has incompatible generated column"; before: "is missing
// replicated column"), and so does parapply, in the copy and the stream.
func GeneratedOnTarget(table, column string) error {
	col := parapply.QuoteIdent(column)
	return fmt.Errorf("%w: column %s of published table %s is generated on the target, but the publisher sends its values (the built-in subscription refuses this too); make it a plain column on the target (ALTER TABLE %s ALTER COLUMN %s DROP EXPRESSION), or leave it out of the publication (a column list, or publish_generated_columns = none where it is generated on the publisher)",
		ErrSchema, col, table, table, col)
}
