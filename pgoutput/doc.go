// Package pgoutput decodes PostgreSQL's pgoutput logical replication protocol:
// the payload of each XLogData message a walsender streams to a subscriber
// (Begin, Relation, Insert, Update, Delete, Truncate, Commit and the rest)
// into plain Go values built on the root package's LSN, XID, Relation and
// Tuple types. It does no I/O and depends on nothing outside the standard
// library and the root package.
//
// # Protocol versions
//
// The subscriber chooses proto_version when it starts replication; each
// version adds to the previous one:
//
//   - 1 (PostgreSQL 10): whole transactions, sent after they commit: Begin,
//     Commit, Origin, Relation, Type, Insert, Update, Delete, Truncate (11+)
//     and logical decoding Message (14+, with the messages option).
//   - 2 (PostgreSQL 14): streaming of large in-progress transactions: Stream
//     Start, Stream Stop, Stream Commit and Stream Abort. Between Stream Start
//     and Stream Stop, Relation, Type, Insert, Update, Delete, Truncate and
//     Message carry the streamed transaction's XID before their fields.
//   - 3 (PostgreSQL 15): two-phase commit: Begin Prepare, Prepare, Commit
//     Prepared, Rollback Prepared and Stream Prepare.
//   - 4 (PostgreSQL 16): parallel apply of streamed transactions. With
//     streaming = parallel the publisher appends the abort LSN and abort
//     time to Stream Abort, so a parallel apply worker can record where the
//     aborted (sub)transaction ended.
//
// The Decoder does not refuse a message because the negotiated version is
// too old to send it; ProtoVersion only decides how Stream Abort is read.
//
// # Bounds checking
//
// Decode never panics and never trusts the input: every fixed-size field is
// checked against the bytes that remain, strings must be NUL-terminated
// within the message, and every declared length or count (tuple columns,
// relation columns, truncated relations, value and content lengths) is
// checked against the remaining bytes before anything is allocated for it,
// so the memory a message can make Decode allocate is proportional to the
// message's own size. Bytes left over after a complete message are an error,
// which catches corrupt framing. All such errors wrap ErrMalformed.
//
// # Aliasing
//
// To keep the hot Insert/Update/Delete path to one allocation per tuple,
// Decode does not copy column values: Value.Data of every text or binary
// value, and LogicalMessage.Content, are subslices of the buffer passed to
// Decode (with their capacity clipped, so appending to them never writes
// into the buffer). A caller that reuses or frees that buffer while still
// holding a decoded message must copy those byte slices first. Strings
// (names, prefixes, GIDs) are always copied.
package pgoutput
