// Command allot-echo serves the echo upstream (package internal/echo): every
// request is answered with a JSON description of itself. It is the demo
// upstream behind Envoy for `make run` and in the e2e tests.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/allotmesh/allot/internal/command"
	"github.com/allotmesh/allot/internal/echo"
)

func main() { command.Main("allot-echo", run) }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("allot-echo", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8081", "listen address")
	if err := fs.Parse(args); err != nil {
		return err
	}
	s, err := echo.Start(*addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "allot-echo listening on %s\n", s.Addr())
	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.Shutdown(shutdownCtx)
}
