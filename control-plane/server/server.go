// Package server assembles allotd from a Config: Run serves the admin API
// (HTTP/JSON, gRPC, the web console at /ui/, /metrics and health checks on
// one listener, optionally gRPC on a dedicated one too) and xDS on
// another, optionally all over TLS, over any store.Store. It is wiring:
// the command line is parsed and the store opened by
// control-plane/cmd/allotd; reconcile keeps the proxies' configuration in
// step with the store and the schedules (and publishes a replica's
// proxies), rollout answers where a write stands.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/console"
	"github.com/allotmesh/allot/control-plane/guardian"
	"github.com/allotmesh/allot/control-plane/outcomes"
	"github.com/allotmesh/allot/control-plane/reconcile"
	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/control-plane/xds"
)

// Config is allotd's configuration.
type Config struct {
	// AdminAddr is the admin HTTP listen address: the HTTP/JSON admin API,
	// /metrics, /healthz and /readyz.
	AdminAddr string
	// AdminGRPCAddr, when set, adds a dedicated listener for the gRPC admin
	// API. The gRPC admin API (allot.admin.v1.AdminService and server
	// reflection) is always served on AdminAddr too: HTTP/2 requests with a
	// gRPC content type go to gRPC, everything else to HTTP.
	AdminGRPCAddr string
	// XDSAddr is the xDS listen address (gRPC: ADS and ECDS).
	XDSAddr string
	// XDSClusterGrace is how long a cluster no proxy is connected for
	// keeps its snapshots (xds.WithClusterGrace; 0: xds.DefaultClusterGrace).
	XDSClusterGrace time.Duration
	// XDSMaxStreams is how many xDS streams allotd serves at once
	// (xds.WithMaxStreams; 0: xds.DefaultMaxStreams).
	XDSMaxStreams int
	// Tokens authenticates the admin API's callers.
	Tokens *admin.Tokens
	// Mesh shapes what proxies receive.
	Mesh translate.Mesh
	// Logger receives structured logs; nil discards them.
	Logger *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// TLS, when set, serves every listener (admin HTTP, admin gRPC, xDS)
	// over TLS only; plaintext connections are refused.
	TLS *tls.Config
	// XDSTLS, when set, is the xDS listener's TLS configuration in place of
	// TLS: mtls.Reloader.XDSTLS, which can require client certificates.
	XDSTLS *tls.Config
	// XDSStreamInterceptor, when set, wraps every xDS stream:
	// mtls.Reloader.StreamInterceptor, which authorizes each request's node
	// against the client certificate's identity.
	XDSStreamInterceptor grpc.StreamServerInterceptor
	// XDSUnaryInterceptor, when set, wraps every unary call of the xDS
	// listener (the outcomes sink's exports): mtls.Reloader.UnaryInterceptor,
	// which checks the client certificate is still valid.
	XDSUnaryInterceptor grpc.UnaryServerInterceptor
	// Collectors are extra Prometheus collectors exposed on /metrics
	// beside allotd's own (Go runtime, process, admin API, experiments).
	Collectors []prometheus.Collector
	// Ready, if set, receives the bound addresses once serving.
	Ready func(Addrs)
	// Registry, when set, makes this allotd one replica of several sharing
	// a store: it publishes its proxies there, and rollouts and waited
	// writes cover every replica's proxies.
	Registry reconcile.Registry
	// ReplicaID names this replica in the registry.
	ReplicaID string
	// Outcomes, when set, is where the replicas share their outcome
	// figures (outcomes/etcd.Records): this allotd publishes its proxies'
	// there, and its outcome reports sum every replica's.
	Outcomes outcomes.Shared
	// AdminReadTimeout bounds the reading of a request's headers and
	// body on the admin listener (0: DefaultAdminReadTimeout).
	AdminReadTimeout time.Duration
	// GuardianInterval is how often the guardian checks the guardrails and
	// ramps of running experiments (0: guardian.DefaultInterval).
	GuardianInterval time.Duration
}

// Limits of the admin listener (docs/operators.md, "Listeners"). A
// request body is bounded by admin.MaxBodyBytes (413).
const (
	// DefaultAdminReadTimeout bounds the reading of a request: its headers
	// and its body (admin.MaxBodyBytes at 35 KB/s). It is not the whole
	// request's bound (http.Server.ReadTimeout), which would cancel a
	// waited write still waiting once it passed.
	DefaultAdminReadTimeout = 30 * time.Second
	// adminWriteTimeout bounds a request from its headers to the end of
	// its response: the longest wait a write accepts, and time to spare.
	adminWriteTimeout = admin.MaxWait + 30*time.Second
	// adminIdleTimeout closes a keep-alive connection idle this long.
	adminIdleTimeout = 2 * time.Minute
	// adminMaxHeaderBytes bounds a request's headers (a token is 100
	// bytes).
	adminMaxHeaderBytes = 64 << 10
)

// Both rollouts answer the admin API's writes that wait and its rollout
// status.
var (
	_ admin.Rollouts = (*rollout.Local)(nil)
	_ admin.Rollouts = (*rollout.Mesh)(nil)
)

// Addrs are the addresses allotd listens on.
type Addrs struct {
	// Admin serves the HTTP/JSON admin API, /metrics and the health checks.
	Admin net.Addr
	// AdminGRPC is the dedicated gRPC admin listener; nil without
	// Config.AdminGRPCAddr (gRPC is served on Admin then).
	AdminGRPC net.Addr
	// XDS serves xDS to the proxies.
	XDS net.Addr
}

// Run serves the experiments of db until ctx is done, then shuts down
// gracefully. The caller opens and closes db.
func Run(ctx context.Context, db store.Store, cfg Config) error {
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
	lns, err := listen(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := assemble(ctx, db, cfg, log, now)
	if err != nil {
		closeAll(lns)
		return err
	}
	return s.serve(ctx, cancel, lns, cfg, log)
}

// servers are the parts of a running allotd, assembled before any of them
// serves: the configuration builder, the xDS server and its gRPC server,
// the admin API's gRPC server and the admin listener's HTTP server.
type servers struct {
	db              store.Store
	b               *reconcile.Builder
	xds             *xds.Server
	xdsGRPC         *grpc.Server
	adminGRPC       *grpc.Server
	http            *http.Server
	publishFailures prometheus.Counter
	guardian        *guardian.Guardian
	outcomes        *outcomes.Aggregator
}

// assemble builds every part of allotd over db and registers their
// metrics; the xDS server lives until ctx is done.
func assemble(ctx context.Context, db store.Store, cfg Config, log *slog.Logger, now func() time.Time) (*servers, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := admin.NewMetrics(reg, db)
	if err != nil {
		return nil, fmt.Errorf("register admin metrics: %w", err)
	}
	for _, c := range cfg.Collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register collector: %w", err)
		}
	}
	lists := store.NewLists(db) // one read of the experiments after a write, for the builder, the outcomes and the admin API
	s := &servers{db: db, b: reconcile.NewBuilder(db, lists, cfg.Mesh, now), publishFailures: reconcile.NewPublishFailures()}
	s.xds = xds.NewArtifacts(ctx, s.b.Build, xds.WithLogger(log.With("component", "xds")), xds.WithClusterGrace(cfg.XDSClusterGrace),
		xds.WithMaxStreams(cfg.XDSMaxStreams))
	for _, c := range s.xds.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register xds collector: %w", err)
		}
	}
	s.xdsGRPC = newXDSGRPC(cfg, s.xds)
	oc, err := serveOutcomes(ctx, s.xdsGRPC, db, lists, s.xds, reg, cfg.Outcomes, log.With("component", "outcomes"))
	if err != nil {
		return nil, err
	}
	s.outcomes = oc

	adminLog := log.With("component", "admin")
	var ro admin.Rollouts = rollout.NewLocal(s.xds)
	if cfg.Registry != nil {
		ro = rollout.NewMesh(s.xds, cfg.Registry, s.b, db)
		if err := errors.Join(reg.Register(reconcile.NewReplicaCollector(cfg.Registry, s.b, db)), reg.Register(s.publishFailures)); err != nil {
			return nil, fmt.Errorf("register replica collector: %w", err)
		}
	}
	svc := admin.NewService(db, adminLog, admin.WithMesh(cfg.Mesh), admin.WithClock(now), admin.WithRollouts(ro), admin.WithOutcomes(outcomeReports{oc}),
		admin.WithLists(lists))
	s.adminGRPC = newAdminGRPC(cfg, svc, adminLog, metrics)
	s.guardian, err = guardian.New(svc, oc, ro, reg, guardian.WithLogger(log.With("component", "guardian")),
		guardian.WithClock(now), guardian.WithInterval(cmp.Or(cfg.GuardianInterval, guardian.DefaultInterval)))
	if err != nil {
		return nil, fmt.Errorf("guardian: %w", err)
	}
	ui, err := console.Handler()
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle(console.Prefix, ui)
	mux.Handle("GET /{$}", http.RedirectHandler(console.Prefix, http.StatusFound))
	mux.Handle("/v1/", admin.NewHTTP(svc, cfg.Tokens, admin.WithLogger(adminLog), admin.WithMetrics(metrics)))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelError)}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := reconcile.Ready(r.Context(), db, s.b); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	s.http = newAdminHTTP(cfg, grpcOrHTTP(s.adminGRPC, mux), log)
	return s, nil
}

// newXDSGRPC is the xDS listener's gRPC server, with its TLS (Config.XDSTLS,
// else Config.TLS) and stream interceptor, serving x.
func newXDSGRPC(cfg Config, x *xds.Server) *grpc.Server {
	opts := xds.ServerOptions()
	switch {
	case cfg.XDSTLS != nil:
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.XDSTLS)))
	case cfg.TLS != nil:
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	if cfg.XDSUnaryInterceptor != nil {
		opts = append(opts, grpc.UnaryInterceptor(cfg.XDSUnaryInterceptor))
	}
	if cfg.XDSStreamInterceptor != nil {
		opts = append(opts, grpc.StreamInterceptor(cfg.XDSStreamInterceptor))
	}
	g := grpc.NewServer(opts...)
	x.Register(g)
	return g
}

// newAdminGRPC is the gRPC admin API's server (with server reflection),
// over TLS when configured, with the admin listener's connection bounds.
func newAdminGRPC(cfg Config, svc *admin.Service, log *slog.Logger, metrics *admin.Metrics) *grpc.Server {
	agrpc := admin.NewGRPC(svc, cfg.Tokens, admin.WithLogger(log), admin.WithMetrics(metrics))
	opts := agrpc.ServerOptions()
	if cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg.TLS)))
	}
	opts = append(opts, grpc.ConnectionTimeout(10*time.Second),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: adminIdleTimeout, Time: time.Minute, Timeout: 20 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second}))
	ag := grpc.NewServer(opts...)
	agrpc.Register(ag)
	reflection.Register(ag)
	return ag
}

// newAdminHTTP is the admin listener's HTTP server around h, with the
// listener's limits (DefaultAdminReadTimeout and the constants beside it):
// HTTP/1.1 and HTTP/2, over TLS when configured (h2c otherwise).
func newAdminHTTP(cfg Config, h http.Handler, log *slog.Logger) *http.Server {
	readTimeout := cfg.AdminReadTimeout
	if readTimeout <= 0 {
		readTimeout = DefaultAdminReadTimeout
	}
	hsrv := &http.Server{
		Handler:           bodyDeadline(h, readTimeout),
		ReadHeaderTimeout: min(10*time.Second, readTimeout),
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		Protocols:         new(http.Protocols),
		TLSConfig:         cfg.TLS,
	}
	hsrv.Protocols.SetHTTP1(true)
	if cfg.TLS != nil {
		hsrv.Protocols.SetHTTP2(true)
	} else {
		hsrv.Protocols.SetUnencryptedHTTP2(true) // h2c with prior knowledge, as gRPC clients speak it
	}
	return hsrv
}

// serve runs every part on its listener (lns: admin, xDS, then the
// dedicated admin gRPC one if configured), the loop that keeps the
// proxies in step with the store and, for a replica, the publishing of its
// proxies; it returns when ctx is done or a server fails, after shutting
// everything down.
func (s *servers) serve(ctx context.Context, cancel context.CancelFunc, lns []net.Listener, cfg Config, log *slog.Logger) error {
	adminLn, xdsLn := lns[0], lns[1]
	var grpcLn net.Listener
	if len(lns) > 2 {
		grpcLn = lns[2]
	}
	var wg sync.WaitGroup
	errc := make(chan error, 3)
	wg.Add(3)
	go func() { defer wg.Done(); errc <- s.xdsGRPC.Serve(xdsLn) }()
	if grpcLn != nil {
		wg.Add(1)
		go func() { defer wg.Done(); errc <- s.adminGRPC.Serve(grpcLn) }()
	}
	go func() {
		defer wg.Done()
		serve := func() error { return s.http.Serve(adminLn) }
		if cfg.TLS != nil {
			serve = func() error { return s.http.ServeTLS(adminLn, "", "") }
		}
		if err := serve(); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	go func() { defer wg.Done(); reconcile.Sync(ctx, s.db, s.xds, s.b, log) }()
	wg.Go(func() { s.guardian.Run(ctx) })
	wg.Go(func() { s.outcomes.Run(ctx) }) // publishes to the shared records, if any
	addrs := Addrs{Admin: adminLn.Addr(), XDS: xdsLn.Addr()}
	if cfg.Registry != nil {
		self := rollout.Replica{ID: cfg.ReplicaID, AdminAddr: addrs.Admin.String(), XDSAddr: addrs.XDS.String()}
		wg.Add(1)
		go func() {
			defer wg.Done()
			reconcile.Publish(ctx, cfg.Registry, s.xds, s.b, self, s.publishFailures, log.With("component", "mesh"))
		}()
	}
	attrs := []any{"admin_addr", addrs.Admin.String(), "xds_addr", addrs.XDS.String(), "tls", cfg.TLS != nil,
		"xds_client_certs", cfg.XDSStreamInterceptor != nil}
	if grpcLn != nil {
		addrs.AdminGRPC = grpcLn.Addr()
		attrs = append(attrs, "admin_grpc_addr", addrs.AdminGRPC.String())
	}
	log.Info("allotd serving", attrs...)
	if cfg.Ready != nil {
		cfg.Ready(addrs)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	log.Info("allotd shutting down")
	cancel()
	s.shutdown()
	wg.Wait()
	return runErr
}

// shutdown stops the servers: gracefully within 5 seconds, then at once
// (xDS streams never end by themselves, nor do gRPC streams on the admin
// listener).
func (s *servers) shutdown() {
	shutCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	if err := s.http.Shutdown(shutCtx); err != nil {
		s.http.Close() // open gRPC streams on the admin listener
	}
	stopped := make(chan struct{})
	go func() { s.xdsGRPC.GracefulStop(); s.adminGRPC.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-shutCtx.Done():
		s.xdsGRPC.Stop() // xDS streams never end by themselves
		s.adminGRPC.Stop()
	}
}

// grpcOrHTTP sends HTTP/2 requests with a gRPC content type to g and
// everything else to h, so one listener serves both admin transports.
func grpcOrHTTP(g *grpc.Server, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			g.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// bodyDeadline gives a request with a body until d from its start to have
// sent it all, then lifts the deadline: a slow body is cut (its connection
// closed), a waited write keeps its connection while it waits.
// http.Server.ReadTimeout cannot do this: its deadline stays on the
// connection while the handler runs, and the server cancels the request's
// context when it passes.
func bodyDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err == nil {
			r.Body = &liftAtEOF{ReadCloser: r.Body, lift: func() { rc.SetReadDeadline(time.Time{}) }}
		}
		h.ServeHTTP(w, r)
	})
}

// liftAtEOF calls lift once its body has been read to the end.
type liftAtEOF struct {
	io.ReadCloser
	lift func()
	done bool
}

func (b *liftAtEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.lift()
	}
	return n, err
}

// listen opens the admin, xDS and (if configured) dedicated admin gRPC
// listeners, in that order. TLS is added by the servers.
func listen(cfg Config) ([]net.Listener, error) {
	ls := []struct{ name, addr string }{{"admin", cfg.AdminAddr}, {"xds", cfg.XDSAddr}}
	if cfg.AdminGRPCAddr != "" {
		ls = append(ls, struct{ name, addr string }{"admin grpc", cfg.AdminGRPCAddr})
	}
	var lns []net.Listener
	for _, l := range ls {
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			closeAll(lns)
			return nil, fmt.Errorf("listen %s %s: %w", l.name, l.addr, err)
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

func closeAll(lns []net.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
}
