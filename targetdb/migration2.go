package targetdb

// migration2 adds the list of what a schema copy (schema = copy) runs
// after the initial copy: the foreign keys, triggers, rules and policies
// of the tables it made, each row deleted in the transaction that runs
// it, so that a restart runs only what is left.
const migration2 = `CREATE TABLE IF NOT EXISTS parapply.deferred_ddl (
	slot_name text NOT NULL,
	ord       int NOT NULL,
	kind      text NOT NULL,
	name      text NOT NULL,
	statement text NOT NULL,
	PRIMARY KEY (slot_name, ord)
);
COMMENT ON TABLE parapply.deferred_ddl IS 'parapply: the definitions schema = copy runs once the initial copy is done (foreign keys, triggers, rules, policies); do not edit';`
