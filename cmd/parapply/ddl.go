package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/parapply/parapply/ddl"
)

// ddlCommand installs or removes, on the publisher, the capture that sends
// DDL on published tables to parapply (applied with ddl = apply), or shows
// whether it is there.
func ddlCommand(ctx context.Context, args []string, out io.Writer) error {
	if len(args) == 0 || (args[0] != "install" && args[0] != "uninstall" && args[0] != "status") {
		return usageError{fmt.Errorf("ddl needs install, uninstall or status: parapply ddl install --source DSN --publication NAME")}
	}
	what := args[0]
	fs := flag.NewFlagSet("ddl "+what, flag.ContinueOnError)
	triggers := fs.Bool("event-triggers", true, "install: capture DDL with event triggers (needs a superuser); false installs only parapply.replicate_ddl(text), which any role that may run the DDL can call")
	usageFor(fs, "parapply ddl "+what+" --source DSN [--publication NAME] [--event-triggers=false] [--config FILE]")
	c, err := loadConfig(fs, args[1:], "source", "publication", "application_name")
	if err != nil {
		return err
	}
	if c["source"] == "" {
		return fmt.Errorf("ddl %s needs --source, the publisher (as a superuser for install and uninstall: event triggers need one)", what)
	}
	conn, err := connectPlain(ctx, c["source"], "source", c["application_name"]+" ddl")
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	switch what {
	case "install":
		pubs := splitList(c["publication"])
		if err := ddl.Install(ctx, conn, pubs, *triggers); err != nil {
			return err
		}
		if !*triggers {
			fmt.Fprintln(out, "publisher: parapply.replicate_ddl(text) is installed (no event triggers): DDL sent through it reaches parapply; set ddl = apply for parapply to run it on the target")
			return nil
		}
		fmt.Fprintf(out, "publisher: DDL on the tables of publication %s is sent to parapply from now on (event triggers %s and %s; parapply.replicate_ddl(text) for DDL run inside functions); set ddl = apply for parapply to run it on the target\n", strings.Join(pubs, ", "), ddl.TriggerEnd, ddl.TriggerDrop)
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
		switch {
		case st.Triggers:
			fmt.Fprintf(out, "publisher: DDL on the tables of publication %s is sent to parapply (event triggers %s and %s)\n", strings.Join(st.Publications, ", "), ddl.TriggerEnd, ddl.TriggerDrop)
		case st.Function:
			fmt.Fprintln(out, "publisher: no event triggers (or they are disabled): only DDL run through parapply.replicate_ddl(text) is sent to parapply")
		default:
			fmt.Fprintln(out, "publisher: no DDL capture installed (parapply ddl install --source DSN --publication NAME)")
		}
		for _, w := range ddlWarnings(st) {
			fmt.Fprintln(out, "WARNING: "+w)
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
