// Command allotd is the Allot control plane: the admin API for experiment
// owners, the xDS server for Envoy proxies, and the embedded store; "allotd
// migrate" copies the embedded store into etcd. Main (flags.go) parses the
// command line into a server.Config, opens the store (bbolt, or etcd with
// etcdflags.go) and calls server.Run; Migrate (migrate.go) is "allotd
// migrate".
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Main(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "allotd:", err)
		os.Exit(1)
	}
}
