// Package server assembles allotd: it opens the store, serves the admin API
// and xDS on separate listeners, and keeps every connected proxy's
// configuration in step with the store and the experiments' schedules.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/store/bolt"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/control-plane/xds"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// Config is allotd's configuration.
type Config struct {
	// AdminAddr is the admin API's listen address (HTTP/JSON).
	AdminAddr string
	// XDSAddr is the xDS listen address (gRPC: ADS and ECDS).
	XDSAddr string
	// DBPath is the bbolt store's file.
	DBPath string
	// Tokens authenticates the admin API's callers.
	Tokens *admin.Tokens
	// Mesh shapes what proxies receive.
	Mesh translate.Mesh
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Ready, if set, receives the bound addresses once serving.
	Ready func(adminAddr, xdsAddr net.Addr)
}

// Run serves until ctx is done, then shuts down gracefully.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	if cfg.Tokens == nil {
		return errors.New("no admin tokens configured")
	}
	db, err := bolt.Open(cfg.DBPath)
	if err != nil {
		return err
	}
	defer db.Close()

	adminLn, err := net.Listen("tcp", cfg.AdminAddr)
	if err != nil {
		return fmt.Errorf("listen admin %s: %w", cfg.AdminAddr, err)
	}
	xdsLn, err := net.Listen("tcp", cfg.XDSAddr)
	if err != nil {
		adminLn.Close()
		return fmt.Errorf("listen xds %s: %w", cfg.XDSAddr, err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b := &builder{store: db, mesh: cfg.Mesh, now: now}
	xsrv := xds.New(ctx, b.build, xds.WithLogger(log.With("component", "xds")))
	g := grpc.NewServer(
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	)
	xsrv.Register(g)

	mux := http.NewServeMux()
	mux.Handle("/v1/", admin.NewHTTP(admin.NewService(db, log.With("component", "admin")), cfg.Tokens, log.With("component", "admin")))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if _, err := db.Revision(r.Context()); err != nil {
			http.Error(w, "store unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Add(3)
	go func() { defer wg.Done(); errc <- g.Serve(xdsLn) }()
	go func() {
		defer wg.Done()
		if err := hsrv.Serve(adminLn); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	go func() { defer wg.Done(); syncLoop(ctx, db, xsrv, b, log) }()
	log.Info("allotd serving", "admin_addr", adminLn.Addr().String(), "xds_addr", xdsLn.Addr().String(), "db", cfg.DBPath)
	if cfg.Ready != nil {
		cfg.Ready(adminLn.Addr(), xdsLn.Addr())
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	log.Info("allotd shutting down")
	cancel()
	shutCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	hsrv.Shutdown(shutCtx)
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-shutCtx.Done():
		g.Stop() // xDS streams never end by themselves
	}
	wg.Wait()
	return runErr
}

// syncLoop refreshes proxies after every store write and at every schedule
// boundary (an experiment's start or end time), with no write needed.
func syncLoop(ctx context.Context, st store.Store, x *xds.Server, b *builder, log *slog.Logger) {
	revs := st.Watch(ctx)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-revs:
			if !ok {
				return
			}
		case <-timer.C:
		}
		if err := x.Refresh(ctx); err != nil {
			log.Error("refresh proxies", "error", err)
		}
		next := b.nextBoundary()
		d := time.Hour
		if !next.IsZero() {
			d = max(next.Sub(b.now()), 0)
		}
		timer.Reset(d)
	}
}

// builder builds each cluster's ECDS resource from the store.
type builder struct {
	store store.Store
	mesh  translate.Mesh
	now   func() time.Time
}

func (b *builder) experiments() ([]*experimentv1.Experiment, error) {
	items, _, err := b.store.List(context.Background())
	if err != nil {
		return nil, err
	}
	out := make([]*experimentv1.Experiment, 0, len(items))
	for _, se := range items {
		e, err := admin.FromStore(se)
		if err != nil {
			return nil, fmt.Errorf("stored experiment %q: %w", se.Key, err)
		}
		out = append(out, e)
	}
	return out, nil
}

func (b *builder) build(cluster string) (string, *corev3.TypedExtensionConfig, error) {
	exps, err := b.experiments()
	if err != nil {
		return "", nil, err
	}
	cfg, err := translate.FilterConfig(exps, cluster, b.now(), b.mesh)
	if err != nil {
		return "", nil, err
	}
	ext, err := translate.ExtensionConfig(cfg, b.mesh)
	if err != nil {
		return "", nil, err
	}
	return cfg.Version, ext, nil
}

// nextBoundary is the earliest start or end time after now (zero if none).
func (b *builder) nextBoundary() time.Time {
	exps, err := b.experiments()
	if err != nil {
		return b.now().Add(time.Second) // retry soon
	}
	now := b.now()
	var next time.Time
	for _, e := range exps {
		for _, ts := range []*timestamppb.Timestamp{e.GetStartTime(), e.GetEndTime()} {
			if ts == nil {
				continue
			}
			t := ts.AsTime()
			if t.After(now) && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
	}
	return next
}
