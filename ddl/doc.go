// Package ddl carries schema changes from the publisher to the target.
//
// PostgreSQL's logical replication sends no DDL. parapply's opt-in answer
// (the ddl setting, and `parapply ddl install` on the publisher) has two
// halves, both here:
//
//   - On the publisher (install.go): event triggers on ddl_command_end and
//     sql_drop that write each DDL statement touching a followed
//     publication's tables into the WAL as a transactional logical message
//     (prefix "parapply.ddl"), in the transaction that ran it, so it reaches
//     parapply in commit order, at its place among the row changes. A
//     function, parapply.replicate_ddl(text), does the same for DDL run
//     inside functions, where the statement text is not the client's. The
//     capture never fails or blocks the user's DDL: its errors are warnings.
//   - On the target (message.go, split.go): the message decoded, and its
//     statement text cut into the statements to run there: DDL only (the
//     rows a DML statement changed arrive as row changes), never
//     transaction control, settings, roles or grants.
//
// Applying them, in order and as a barrier for the workers, is package
// subscriber's work (ddl.go there).
package ddl
