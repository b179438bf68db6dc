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
	"os/signal"
	"syscall"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"

	"github.com/allotmesh/allot/bench/authz"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "allot-authz:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("allot-authz", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	config := fs.String("config", "", "FilterConfig JSON file with the experiments")
	if err := fs.Parse(args); err != nil {
		return err
	}
	b, err := os.ReadFile(*config)
	if err != nil {
		return err
	}
	srv, err := authz.New(b)
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	authv3.RegisterAuthorizationServer(g, srv)
	fmt.Println("listening", lis.Addr())
	go func() { <-ctx.Done(); g.Stop() }()
	return g.Serve(lis)
}
