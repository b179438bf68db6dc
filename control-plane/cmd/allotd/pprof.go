package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// servePprof serves Go's profiles (/debug/pprof/) on addr until ctx ends.
// The address must be loopback: the profiles carry no experiment data, but
// a CPU profile costs the replica while it runs, and the endpoint has no
// authentication of its own (reach it through the host, e.g. kubectl
// port-forward).
func servePprof(ctx context.Context, addr string, log *slog.Logger) error {
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-pprof-addr %q: want a loopback host:port (127.0.0.1:6060): the profiles are unauthenticated", addr)
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-pprof-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	h := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		h.Close()
	}()
	go func() {
		if err := h.Serve(lis); !errors.Is(err, http.ErrServerClosed) {
			log.Warn("pprof listener", "error", err)
		}
	}()
	log.Info("serving Go profiles", "addr", lis.Addr().String())
	return nil
}
