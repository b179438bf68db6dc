// Command allotctl is Allot's command-line tool. It only wires the process
// (arguments, streams, signals, exit status) to control-plane/cli, which
// implements the subcommands.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/allotmesh/allot/control-plane/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
