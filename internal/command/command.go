// Package command is the main function of the repository's tools that run
// until told to stop (bench/cmd/allot-bench, bench/cmd/allot-authz, bench/cmd/allot-upstream,
// internal/echo/cmd/allot-echo): a thin main hands it its run function. It imports
// only the standard library.
package command

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Run is a command's body: it runs with the command line's arguments
// (without the program name) until it is done or ctx ends.
type Run func(ctx context.Context, args []string) error

// Main runs run with os.Args[1:] and a context that ends on SIGINT or
// SIGTERM. An error is printed to stderr as "name: error" and the process
// exits with status 1.
func Main(name string, run Run) {
	if err := main(name, run, os.Args[1:], os.Stderr); err != nil {
		os.Exit(1)
	}
}

// main is Main without the exit: it returns run's error after printing it
// to stderr.
func main(name string, run Run, args []string, stderr io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, args)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
	}
	return err
}
