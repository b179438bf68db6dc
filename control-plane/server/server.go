// Package server assembles allotd from a Config: Run serves the admin API
// (HTTP/JSON, gRPC, the web console at /ui/, /metrics and health checks on
// one listener, optionally gRPC on a dedicated one too) and xDS on
// another, optionally all over TLS, over any store.Store, and keeps every
// connected proxy's configuration in step with the store and the
// experiments' schedules. It is wiring: the command line is parsed and the
// store opened by control-plane/cmd/allotd.
package server

import (
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

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/console"
	"github.com/allotmesh/allot/control-plane/mesh"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/control-plane/xds"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
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
	// Collectors are extra Prometheus collectors exposed on /metrics
	// beside allotd's own (Go runtime, process, admin API, experiments).
	Collectors []prometheus.Collector
	// Ready, if set, receives the bound addresses once serving.
	Ready func(Addrs)
	// Registry, when set, makes this allotd one replica of several sharing
	// a store: it publishes its proxies there, and rollouts and waited
	// writes cover every replica's proxies.
	Registry Registry
	// ReplicaID names this replica in the registry.
	ReplicaID string
	// AdminReadTimeout bounds the reading of a request's headers and
	// body on the admin listener (0: DefaultAdminReadTimeout).
	AdminReadTimeout time.Duration
}

// Limits of the admin listener (control-plane/README.md, Listeners). A
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
	b               *builder
	xds             *xds.Server
	xdsGRPC         *grpc.Server
	adminGRPC       *grpc.Server
	http            *http.Server
	publishFailures prometheus.Counter
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
	s := &servers{db: db, b: &builder{store: db, mesh: cfg.Mesh, now: now}, publishFailures: newPublishFailures()}
	s.xds = xds.NewArtifacts(ctx, s.b.build, xds.WithLogger(log.With("component", "xds")), xds.WithClusterGrace(cfg.XDSClusterGrace),
		xds.WithMaxStreams(cfg.XDSMaxStreams))
	for _, c := range s.xds.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register xds collector: %w", err)
		}
	}
	s.xdsGRPC = newXDSGRPC(cfg, s.xds)
	oc, err := serveOutcomes(ctx, s.xdsGRPC, db, s.xds, reg, log.With("component", "outcomes"))
	if err != nil {
		return nil, err
	}

	adminLog := log.With("component", "admin")
	var ro admin.Rollouts = rollouts{s.xds}
	if cfg.Registry != nil {
		ro = meshRollouts{x: s.xds, reg: cfg.Registry, b: s.b, st: db}
		if err := errors.Join(reg.Register(replicaCollector{reg: cfg.Registry, b: s.b, st: db}), reg.Register(s.publishFailures)); err != nil {
			return nil, fmt.Errorf("register replica collector: %w", err)
		}
	}
	svc := admin.NewService(db, adminLog, admin.WithMesh(cfg.Mesh), admin.WithClock(now), admin.WithRollouts(ro), admin.WithOutcomes(outcomeReports{oc}))
	s.adminGRPC = newAdminGRPC(cfg, svc, adminLog, metrics)
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
		if err := ready(r.Context(), db, s.b); err != nil {
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
	go func() { defer wg.Done(); syncLoop(ctx, s.db, s.xds, s.b, log) }()
	addrs := Addrs{Admin: adminLn.Addr(), XDS: xdsLn.Addr()}
	if cfg.Registry != nil {
		self := mesh.Replica{ID: cfg.ReplicaID, AdminAddr: addrs.Admin.String(), XDSAddr: addrs.XDS.String()}
		wg.Add(1)
		go func() {
			defer wg.Done()
			publishLoop(ctx, cfg.Registry, s.xds, s.b, self, s.publishFailures, log.With("component", "mesh"))
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

// quorumChecker is a store that can tell whether it can commit now
// (store/etcd: a linearizable read), where its reads would fall back to a
// member's last known state.
type quorumChecker interface {
	Check(ctx context.Context) error
}

// ready is /readyz: the store answers (with a quorum, for a replicated
// store), and the configuration served to proxies is built from the
// store's current revision (it may take up to a second to catch up with a
// write just made).
func ready(ctx context.Context, db store.Store, b *builder) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if c, ok := db.(quorumChecker); ok {
		if err := c.Check(ctx); err != nil {
			return err // names the store and why
		}
	}
	rev, err := db.Revision(ctx)
	if err != nil {
		return fmt.Errorf("store unavailable: %w", err)
	}
	deadline := time.NewTimer(time.Second)
	defer deadline.Stop()
	for {
		applied := b.applied()
		got := b.appliedRevision()
		if got >= rev {
			return nil
		}
		select {
		case <-applied:
		case <-deadline.C:
			return fmt.Errorf("proxies' configuration is built from store revision %d, the store is at %d", got, rev)
		case <-ctx.Done():
			return ctx.Err()
		}
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
		rev, err := st.Revision(ctx)
		if err == nil {
			err = x.Refresh(ctx)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Error("refresh proxies", "error", err)
			timer.Reset(time.Second) // the store may be back by then
			continue
		}
		b.setApplied(rev)
		next := b.nextBoundary()
		d := time.Hour
		if !next.IsZero() {
			d = max(next.Sub(b.now()), 0)
		}
		timer.Reset(d)
	}
}

// builder builds each cluster's ECDS resource from the store. It decodes
// the stored experiments once per store revision: a refresh builds every
// cluster, and the schedule timer reads them too.
type builder struct {
	store store.Store
	mesh  translate.Mesh
	now   func() time.Time

	mu   sync.Mutex
	rev  int64
	exps []*experimentv1.Experiment // read-only: translate clones what it keeps

	appliedMu  sync.Mutex
	appliedRev int64         // every served snapshot is built from this store revision or a later one
	appliedCh  chan struct{} // closed and replaced when appliedRev grows
}

// setApplied records that every cluster's snapshot is built from store
// revision rev or later.
func (b *builder) setApplied(rev int64) {
	b.appliedMu.Lock()
	defer b.appliedMu.Unlock()
	if b.appliedCh == nil {
		b.appliedCh = make(chan struct{})
	}
	if rev > b.appliedRev {
		b.appliedRev = rev
		close(b.appliedCh)
		b.appliedCh = make(chan struct{})
	}
}

// appliedRevision is the store revision every served snapshot is built
// from, at least.
func (b *builder) appliedRevision() int64 {
	b.appliedMu.Lock()
	defer b.appliedMu.Unlock()
	return b.appliedRev
}

// awaitApplied waits until every served snapshot is built from store
// revision rev or later, for at most d, and reports whether it is.
func (b *builder) awaitApplied(ctx context.Context, rev int64, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		ch := b.applied()
		if b.appliedRevision() >= rev {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// applied returns a channel closed when the applied revision next grows.
func (b *builder) applied() <-chan struct{} {
	b.appliedMu.Lock()
	defer b.appliedMu.Unlock()
	if b.appliedCh == nil {
		b.appliedCh = make(chan struct{})
	}
	return b.appliedCh
}

// experiments returns the stored experiments as of the store's latest
// revision (asked of the store), or, if atLeast is positive, as of revision
// atLeast or later: the ones already read, if that recent, without a round
// trip to the store (which a waited write makes while the mesh's pushes
// keep it busy).
func (b *builder) experiments(atLeast int64) ([]*experimentv1.Experiment, error) {
	ctx := context.Background()
	rev := atLeast
	if rev <= 0 {
		var err error
		if rev, err = b.store.Revision(ctx); err != nil {
			return nil, err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.exps != nil && b.rev >= rev {
		return b.exps, nil
	}
	items, rev, err := b.store.List(ctx)
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
	b.rev, b.exps = rev, out
	return out, nil
}

// versions returns the configuration version of each cluster now (as of
// store revision atLeast or later, if positive: see experiments), without
// building their resources; clusters whose configuration fails are left
// out (their proxies are reported against no target).
func (b *builder) versions(clusters []string, atLeast int64) (map[string]string, error) {
	exps, err := b.experiments(atLeast)
	if err != nil {
		return nil, err
	}
	now := b.now()
	out := make(map[string]string, len(clusters))
	for _, c := range clusters {
		if cfg, err := translate.FilterConfig(exps, c, now, b.mesh); err == nil {
			out[c] = cfg.Version
		}
	}
	return out, nil
}

// build returns cluster's configuration in each artifact's resource: the
// same filter configuration, hence one version, for Wasm and native proxies.
func (b *builder) build(cluster string) (string, map[string]*corev3.TypedExtensionConfig, error) {
	exps, err := b.experiments(0)
	if err != nil {
		return "", nil, err
	}
	cfg, err := translate.FilterConfig(exps, cluster, b.now(), b.mesh)
	if err != nil {
		return "", nil, err
	}
	st, err := translate.ConfigStruct(cfg)
	if err != nil {
		return "", nil, err
	}
	wasm, err := translate.WasmExtension(st, b.mesh)
	if err != nil {
		return "", nil, err
	}
	native, err := translate.NativeExtension(st, b.mesh)
	if err != nil {
		return "", nil, err
	}
	return cfg.Version, map[string]*corev3.TypedExtensionConfig{xds.ArtifactWasm: wasm, xds.ArtifactNative: native}, nil
}

// nextBoundary is the earliest start or end time after now (zero if none).
func (b *builder) nextBoundary() time.Time {
	exps, err := b.experiments(0)
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
