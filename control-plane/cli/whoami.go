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
	fs, conn := newFlagSet(env, "whoami", whoamiUsage, true)
	if _, ok, err := parseFlags(fs, args, 0, 0); !ok {
		return err
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	b, err := c.do(ctx, "GET", "/v1/whoami", nil)
	if err != nil {
		return fmt.Errorf("whoami: %w", err)
	}
	if conn.output != "table" {
		return writeData(env.Stdout, conn.output, b)
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
