// Command allot-authz is benchmark variant D's ext_authz service: a gRPC
// server on 127.0.0.1 that runs Allot's engine for every Check (see
// bench/authz). allot-bench starts it; it stops on SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"

	"github.com/allotmesh/allot/bench/authz"
	"github.com/allotmesh/allot/internal/command"
)

func main() { command.Main("allot-authz", run) }

// run serves the ext_authz service for the FilterConfig in -config until
// ctx ends.
func run(ctx context.Context, args []string) error {
	var addr, config string
	fs := flag.NewFlagSet("allot-authz", flag.ContinueOnError)
	fs.StringVar(&addr, "addr", "127.0.0.1:0", "listen address (loopback only)")
	fs.StringVar(&config, "config", "", "FilterConfig JSON file with the experiments")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := os.ReadFile(config)
	if err != nil {
		return fmt.Errorf("read -config: %w", err)
	}
	srv, err := authz.New(b)
	if err != nil {
		return fmt.Errorf("%s: %w", config, err)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	g := grpc.NewServer()
	authv3.RegisterAuthorizationServer(g, srv)
	fmt.Println("listening", lis.Addr())
	go func() { <-ctx.Done(); g.Stop() }()
	return g.Serve(lis)
}
