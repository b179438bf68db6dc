// Command allot-upstream is the benchmark's proxied variants' upstream (a,
// p): a minimal HTTP/1.1 server on 127.0.0.1 that answers every request 200
// with a two-byte body, doing no other work, so that what Envoy spends
// forwarding a request stands beside the least an upstream spends. allot-bench
// starts it pinned to the load generator's CPU; it stops on SIGTERM or
// SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/allotmesh/allot/internal/command"
)

func main() { command.Main("allot-upstream", run) }

// run serves until ctx ends.
func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("allot-upstream", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address (loopback only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	body := []byte("ok")
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header()["Content-Type"] = []string{"text/plain"}
		w.Write(body)
	})}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}
