package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"google.golang.org/protobuf/encoding/protojson"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

const whoamiUsage = `Usage: allotctl whoami

Prints who the token is to the server: its name (the actor the history
records), its role (admin, owner or reader) and, for an owner, the owner
namespaces whose experiments it may change.
`

func runWhoAmI(ctx context.Context, env *Env, args []string) error {
	b, err := getDocument(ctx, env, "whoami", whoamiUsage, "/v1/whoami", args)
	if b == nil {
		return err
	}
	var who adminv1.Caller
	if err := protojson.Unmarshal(b, &who); err != nil {
		return fmt.Errorf("decode response: %w", err)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tROLE\tNAMESPACES")
	fmt.Fprintf(tw, "%s\t%s\t%s\n", who.Name, who.Role, dash(strings.Join(who.Namespaces, ",")))
	return tw.Flush()
}

// getDocument runs a subcommand that takes no argument and reads one
// document: it parses args, GETs path, and prints the document itself when
// -o asks for json or yaml. It returns the body for the caller's table, or
// nil when nothing is left to do (help or the document printed, or an
// error).
func getDocument(ctx context.Context, env *Env, name, usage, path string, args []string) ([]byte, error) {
	fs, conn := newFlagSet(env, name, usage, true)
	if _, ok, err := parseFlags(fs, args, 0, 0); !ok {
		return nil, err
	}
	return conn.get(ctx, env, name, path)
}

// get reads the document at path: printed whole when -o asks for json or
// yaml (then it returns nil), else returned for the caller's table. what
// names the read in an error.
func (conn *connFlags) get(ctx context.Context, env *Env, what, path string) ([]byte, error) {
	c, err := conn.client()
	if err != nil {
		return nil, err
	}
	b, err := c.do(ctx, "GET", path, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if conn.output != "table" {
		return nil, writeData(env.Stdout, conn.output, b)
	}
	return b, nil
}
