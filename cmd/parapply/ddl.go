package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/parapply/parapply/ddl"
)

// DDLCommand installs or removes, on the publisher, the capture that sends
// DDL on published tables to parapply (applied with ddl = apply), or shows
// whether it is there.
type DDLCommand struct {
	out io.Writer
}

// Run is parapply ddl install, uninstall or status: args starts with
// which.
func (cmd *DDLCommand) Run(ctx context.Context, args []string) error {
	out := cmd.out
	if len(args) == 0 || (args[0] != "install" && args[0] != "uninstall" && args[0] != "status") {
		return usageError{fmt.Errorf("ddl needs install, uninstall or status: parapply ddl install --source DSN --publication NAME")}
	}
	what := args[0]
	fs := flag.NewFlagSet("ddl "+what, flag.ContinueOnError)
	triggers := fs.Bool("event-triggers", true, "install: capture DDL with event triggers (needs a superuser); false installs only parapply.replicate_ddl(text), which any role that may run the DDL can call")
	var grantTo roleList
	synopsis := "parapply ddl " + what + " --source DSN [--config FILE]"
	if what == "install" {
		fs.Var(&grantTo, "grant-to", "install: a `role` (repeatable, or a comma-separated list) to grant the reading of the capture: parapply's replication role, for parapply check, run and ddl status (without it, the GRANT statements are printed)")
		synopsis = "parapply ddl install --source DSN --publication NAME [--event-triggers=false] [--grant-to ROLE] [--config FILE]"
	}
	usageFor(fs, synopsis)
	o, err := loadOptions(fs, args[1:], "source", "publication", "application_name")
	if err != nil {
		return err
	}
	if o.Source == "" {
		return fmt.Errorf("ddl %s needs --source, the publisher (as a superuser for install and uninstall: event triggers need one)", what)
	}
	connect := connector("parapply ddl "+what, what != "status")
	conn, err := connect(ctx, o.Source, "source", o.ApplicationName+" ddl")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	switch what {
	case "install":
		pubs := o.Publications
		if err := ddl.Install(ctx, conn, pubs, *triggers); err != nil {
			return err
		}
		if !*triggers {
			fmt.Fprintln(out, "publisher: parapply.replicate_ddl(text) is installed (no event triggers): DDL sent through it reaches parapply; set ddl = apply for parapply to run it on the target")
		} else {
			fmt.Fprintf(out, "publisher: DDL on the tables of publication %s is sent to parapply from now on (event triggers %s and %s; parapply.replicate_ddl(text) for DDL run inside functions); set ddl = apply for parapply to run it on the target\n", strings.Join(pubs, ", "), ddl.TriggerEnd, ddl.TriggerDrop)
		}
		return grantReaders(ctx, conn, grantTo, out)
	case "uninstall":
		if err := ddl.Uninstall(ctx, conn); err != nil {
			return err
		}
		fmt.Fprintln(out, "publisher: the DDL capture is removed; DDL is no longer sent to parapply (what was sent before is still applied with ddl = apply)")
	case "status":
		st, err := ddl.Inspect(ctx, conn)
		if err != nil {
			return err
		}
		followed := "publication " + strings.Join(st.Publications, ", ")
		if st.Unreadable {
			followed = "the publications it follows (which this role may not read)"
		}
		switch {
		case st.Triggers:
			fmt.Fprintf(out, "publisher: DDL on the tables of %s is sent to parapply (event triggers %s and %s)\n", followed, ddl.TriggerEnd, ddl.TriggerDrop)
		case st.Function:
			fmt.Fprintln(out, "publisher: no event triggers (or they are disabled): only DDL run through parapply.replicate_ddl(text) is sent to parapply")
		default:
			fmt.Fprintln(out, "publisher: no DDL capture installed (parapply ddl install --source DSN --publication NAME)")
		}
		for _, w := range ddlWarnings(st) {
			fmt.Fprintln(out, "WARNING: "+w)
		}
		if st.Unreadable {
			var role string
			if err := conn.QueryRow(ctx, "SELECT pg_catalog.quote_ident(current_user)").Scan(&role); err != nil {
				return err
			}
			fmt.Fprintf(out, "WARNING: role %s may not read which publications the capture follows (parapply check cannot tell them either): as the capture's installer, run %s or parapply ddl install ... --grant-to %s\n", role, strings.Join(ddl.Grants(role), " "), role)
		}
	}
	return nil
}

// ddlWarnings are what an operator should know of a capture's state.
func ddlWarnings(st ddl.State) []string {
	var out []string
	if st.EventTriggersOff && st.Triggers {
		out = append(out, "event_triggers is off on the publisher: no DDL is captured until it is on again")
	}
	if st.PublicMessages && (st.Triggers || st.Function) {
		out = append(out, "every role may call pg_logical_emit_message on the publisher, and so send a statement parapply would run on the target (with ddl = apply); where publisher roles are trusted less than parapply's target role: revoke EXECUTE on each form of pg_catalog.pg_logical_emit_message from PUBLIC, as docs/ddl.md shows (the capture runs as its owner and keeps working)")
	}
	return out
}

// roleList is --grant-to: repeatable, each a role or a comma-separated
// list of them.
type roleList []string

func (l *roleList) String() string { return strings.Join(*l, ",") }

func (l *roleList) Set(v string) error {
	*l = append(*l, splitList(v)...)
	return nil
}

// grantReaders grants the roles of --grant-to the reading of the capture,
// or, without it, prints the statements for the replication roles that
// lack them (parapply check and ddl status as that role need them).
func grantReaders(ctx context.Context, conn *pgx.Conn, roles roleList, out io.Writer) error {
	if len(roles) > 0 {
		if err := ddl.Grant(ctx, conn, roles); err != nil {
			return err
		}
		fmt.Fprintf(out, "publisher: role %s may read the capture (schema parapply, parapply.ddl_followed()), as parapply check, run and ddl status do\n", strings.Join(roles, ", "))
		return nil
	}
	need, err := ddl.Ungranted(ctx, conn)
	if err != nil {
		return err
	}
	if len(need) == 0 {
		fmt.Fprintln(out, "parapply's replication role, if it is not a superuser, reads the capture once granted (as this command does with --grant-to ROLE):")
		need = []string{"ROLE"}
	} else {
		fmt.Fprintf(out, "replication role %s may not read the capture, as parapply check, run and ddl status do: grant it with --grant-to, or run on the publisher:\n", strings.Join(need, ", "))
	}
	for _, r := range need {
		for _, s := range ddl.Grants(r) {
			fmt.Fprintln(out, "  "+s)
		}
	}
	return nil
}

// connectWritable is connectPlain for a command that writes (what, e.g.
// "parapply ddl uninstall"): a database made read-only for a cut-over
// (ALTER DATABASE ... SET default_transaction_read_only = on) takes its
// writes once the session turns that default off for itself, which any
// role may; a hot standby takes none, which the error says.
func connectWritable(ctx context.Context, dsn, side, app, what string) (*pgx.Conn, error) {
	conn, err := connectPlain(ctx, dsn, side, app)
	if err != nil {
		return nil, err
	}
	if err := writable(ctx, conn, side, what); err != nil {
		conn.Close(context.Background())
		return nil, err
	}
	return conn, nil
}

// connector is connectWritable for the command what when it writes, else
// connectPlain.
func connector(what string, writes bool) func(ctx context.Context, dsn, side, app string) (*pgx.Conn, error) {
	if !writes {
		return connectPlain
	}
	return func(ctx context.Context, dsn, side, app string) (*pgx.Conn, error) {
		return connectWritable(ctx, dsn, side, app, what)
	}
}

// writable makes conn's session read-write (see connectWritable).
func writable(ctx context.Context, conn *pgx.Conn, side, what string) error {
	var standby bool
	if err := conn.QueryRow(ctx, "SELECT pg_catalog.pg_is_in_recovery()").Scan(&standby); err != nil {
		return fmt.Errorf("asking the %s whether it is a standby: %w", side, err)
	}
	cfg := conn.Config()
	if standby {
		return fmt.Errorf("the %s (host %s port %d database %s) is a hot standby, in recovery, which takes no writes: run %s against its primary", side, cfg.Host, cfg.Port, cfg.Database, what)
	}
	if _, err := conn.Exec(ctx, "SET default_transaction_read_only = off"); err != nil {
		return fmt.Errorf("making this session of the %s read-write (SET default_transaction_read_only = off), as %s needs: %w", side, what, err)
	}
	return nil
}
