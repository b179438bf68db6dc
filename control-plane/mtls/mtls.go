// Package mtls keeps allotd's TLS material current and authenticates the
// proxies that stream configuration from it. It loads the server
// certificate and key, the CAs that sign proxy certificates and the proxy
// identity Policy from files, and reloads them when their contents change
// on disk, without a restart (a file that does not parse leaves the
// previous material in use). With client CAs configured, the xDS listener
// requires a client certificate signed by one of them (mutual TLS), and
// every xDS request's node cluster is authorized against the certificate's
// identities (and, if the policy binds identities to node ids, the node id):
// a rogue client gets nothing, and cannot pose as a proxy it is not.
//
// It depends on gRPC, Prometheus and the Envoy core API, never on the
// store, the admin API or the xDS server.
package mtls

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Files are the PEM and policy files the material is loaded from.
type Files struct {
	// Cert and Key are the server certificate (chain) and its key.
	Cert, Key string
	// ClientCA, when set, holds the CAs that sign proxy certificates: the
	// xDS listener then requires a client certificate (mutual TLS).
	ClientCA string
	// Policy, required with ClientCA, is the proxy identity policy
	// (ParsePolicy).
	Policy string
}

// material is what is in use: the server certificate, the client CAs and
// the policy, each with the digest of the file contents it came from.
type material struct {
	sums      [parts][sha256.Size]byte // of each part's files
	cert      *tls.Certificate
	clientCAs *x509.CertPool
	policy    *Policy
	xds       *tls.Config // cert, and client certificates required when clientCAs is set
}

// Reloader holds the current material and reloads it from Files.
type Reloader struct {
	files Files
	log   *slog.Logger
	cur   atomic.Pointer[material]
	mu    sync.Mutex // serializes reloads

	reloads  *prometheus.CounterVec
	notAfter prometheus.GaugeFunc
	denied   *prometheus.CounterVec

	// verified caches, for UnaryInterceptor, the client CAs each leaf
	// certificate (one per connection) last verified against; cleared
	// when it holds maxVerified, so it stays bounded.
	verified  sync.Map // *x509.Certificate → *x509.CertPool
	nVerified atomic.Int64
}

// maxVerified bounds the certificates UnaryInterceptor remembers as
// verified (as many as the proxies the outcomes sink counts in a second,
// twice); past it the cache starts over and certificates are verified
// again.
const maxVerified = 20000

// Load reads files and returns a Reloader serving them. A missing or
// invalid file is an error naming it.
func Load(files Files, log *slog.Logger) (*Reloader, error) {
	switch {
	case files.Cert == "" || files.Key == "":
		return nil, errors.New("mtls: a server certificate and key are required")
	case files.ClientCA != "" && files.Policy == "":
		return nil, errors.New("mtls: client CAs need a proxy identity policy, which says which identity may subscribe as which cluster")
	case files.ClientCA == "" && files.Policy != "":
		return nil, errors.New("mtls: a proxy identity policy needs client CAs to verify the identities with")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Reloader{
		files: files, log: log,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_tls_reloads_total",
			Help: "Changed TLS files (server certificate and key, client CAs, proxy identity policy) seen by allotd, by result: loaded, or failed (the previous one stays in use).",
		}, []string{"result"}),
		denied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "allot_xds_denied_streams_total",
			Help: "xDS streams ended because the client certificate's identity may not subscribe as the node (reason identity), the certificate carries no identity, expired or no longer verifies against the client CAs (reason certificate), or a request carried no node or another node than the stream's first (reason request).",
		}, []string{"reason"}),
	}
	r.notAfter = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "allot_tls_certificate_expiry_timestamp_seconds",
		Help: "When the server certificate in use expires (Unix time).",
	}, func() float64 { return float64(r.cur.Load().cert.Leaf.NotAfter.Unix()) })
	m, _, errs := r.load(&material{})
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	r.cur.Store(m)
	return r, nil
}

// MutualTLS reports whether client certificates are required on xDS.
func (r *Reloader) MutualTLS() bool { return r.files.ClientCA != "" }

// The parts of the material, each loaded on its own.
const (
	partCert = iota // the server certificate with its key
	partClientCAs
	partPolicy
	parts
)

var partNames = [parts]string{"server certificate", "client CAs", "proxy identity policy"}

// load reads the files and returns old with every part whose file contents
// changed and parse replaced, how many parts it replaced, and, per part,
// why it did not load. A part that does not load keeps old's, so a broken
// policy never holds back a certificate rotation.
func (r *Reloader) load(old *material) (*material, int, [parts]error) {
	var errs [parts]error
	// read returns the files' contents and their digest.
	read := func(part int, paths ...string) ([][]byte, [sha256.Size]byte, bool) {
		h := sha256.New()
		var bs [][]byte
		var sum [sha256.Size]byte
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				errs[part] = fmt.Errorf("mtls: %s: %w", partNames[part], err)
				return nil, sum, false
			}
			fmt.Fprintf(h, "%d:", len(b))
			h.Write(b)
			bs = append(bs, b)
		}
		h.Sum(sum[:0])
		return bs, sum, sum != old.sums[part]
	}
	m := *old
	changed := 0
	if b, sum, ok := read(partCert, r.files.Cert, r.files.Key); ok {
		if cert, err := tls.X509KeyPair(b[0], b[1]); err != nil {
			errs[partCert] = fmt.Errorf("mtls: server certificate %s with key %s: %w", r.files.Cert, r.files.Key, err)
		} else {
			m.cert, m.sums[partCert] = &cert, sum
			changed++
		}
	}
	if r.files.ClientCA != "" {
		if b, sum, ok := read(partClientCAs, r.files.ClientCA); ok {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(b[0]) {
				errs[partClientCAs] = fmt.Errorf("mtls: client CAs %s: no PEM certificate found", r.files.ClientCA)
			} else {
				m.clientCAs, m.sums[partClientCAs] = pool, sum
				changed++
			}
		}
		if b, sum, ok := read(partPolicy, r.files.Policy); ok {
			if p, err := ParsePolicy(b[0]); err != nil {
				errs[partPolicy] = fmt.Errorf("mtls: proxy identity policy %s:\n%w", r.files.Policy, err)
			} else {
				m.policy, m.sums[partPolicy] = p, sum
				changed++
			}
		}
	}
	if changed > 0 && m.cert != nil {
		m.xds = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*m.cert}, NextProtos: []string{"h2"}}
		if m.clientCAs != nil {
			m.xds.ClientCAs, m.xds.ClientAuth = m.clientCAs, tls.RequireAndVerifyClientCert
		}
	}
	return &m, changed, errs
}

// Reload reads the files again and puts every part whose contents changed
// and parse (the certificate with its key, the client CAs, the policy) in
// use for the next handshakes and xDS requests. A part that does not load
// keeps the previous one in use; the error says why.
func (r *Reloader) Reload() error {
	errs := r.reload()
	return errors.Join(errs[:]...)
}

func (r *Reloader) reload() [parts]error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, changed, errs := r.load(r.cur.Load())
	if changed > 0 {
		r.cur.Store(m)
		r.reloads.WithLabelValues("loaded").Add(float64(changed))
		r.log.Info("TLS material reloaded", "cert", r.files.Cert, "not_after", m.cert.Leaf.NotAfter,
			"client_ca", r.files.ClientCA, "policy", r.files.Policy)
	}
	return errs
}

// Run reloads every interval until ctx is done. A part that fails to load
// is counted (allot_tls_reloads_total{result="failed"}) and logged once,
// when the same failure is still there at the next check: a certificate
// manager replacing the certificate and then its key is not a failure,
// and a broken file is not reported at every check.
func (r *Reloader) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var f failures
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		errs := r.reload()
		for _, i := range f.observe(errs) {
			r.reloads.WithLabelValues("failed").Inc()
			r.log.Error("TLS file changed but does not load; the previous one stays in use", "part", partNames[i], "error", errs[i])
		}
	}
}

// failures decides which reload failures to report: one seen at two
// checks in a row, once until it changes or clears.
type failures struct{ last, reported [parts]string }

// observe takes one check's errors and returns the parts to report.
func (f *failures) observe(errs [parts]error) []int {
	var out []int
	for i, err := range errs {
		now := ""
		if err != nil {
			now = err.Error()
		}
		if now != "" && now == f.last[i] && now != f.reported[i] {
			out = append(out, i)
			f.reported[i] = now
		}
		if now == "" {
			f.reported[i] = ""
		}
		f.last[i] = now
	}
	return out
}

// AdminTLS is the configuration of the admin listener: the current server
// certificate, no client certificate.
func (r *Reloader) AdminTLS() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return r.cur.Load().cert, nil },
	}
}

// XDSTLS is the configuration of the xDS listener: the current server
// certificate and, with client CAs, a verified client certificate
// required.
func (r *Reloader) XDSTLS() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return r.cur.Load().xds, nil },
	}
}

// Collectors are the reloader's Prometheus metrics.
func (r *Reloader) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.reloads, r.notAfter, r.denied}
}

// StreamInterceptor authorizes xDS streams when client certificates are
// required (it passes every stream through otherwise). A stream without a
// verified client certificate that names an identity ends with
// UNAUTHENTICATED. Every request is checked before the xDS server sees it,
// and every response before it is sent, against the material in use then:
// the certificate must still verify against the current client CAs and be
// unexpired, and the current policy must allow its identities the node of
// the stream's first request; a request naming another node is refused
// too. A failed check ends the stream with PERMISSION_DENIED, so a refused
// client receives nothing and is never tracked as a proxy, and a revoked
// one is cut off at its next request or push. The outcomes sink's unary
// exports, served on the same listener, are the proxy's whose authorized
// xDS streams are open on the same connection (outcomes.Sink), or
// refused; UnaryInterceptor checks their certificate at each call.
func (r *Reloader) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !r.MutualTLS() {
			return handler(srv, ss)
		}
		chain, ids, err := peerCertificate(ss.Context())
		if err != nil {
			r.denied.WithLabelValues("certificate").Inc()
			return status.Error(codes.Unauthenticated, "xds: "+err.Error())
		}
		as := &authorizedStream{ServerStream: ss, r: r, chain: chain, ids: ids, method: info.FullMethod}
		err = handler(srv, as)
		if denied := as.denied.Load(); denied != nil {
			// The xDS server ends a stream whose receive or send failed
			// without an error of its own; the client is told why.
			return *denied
		}
		return err
	}
}

// UnaryInterceptor checks the unary calls of the xDS listener (the
// outcomes sink's exports) when client certificates are required: the
// caller's certificate must be unexpired and still verify against the
// current client CAs, or the call ends with UNAUTHENTICATED (no
// certificate) or PERMISSION_DENIED. Which proxy the call is, and whether
// its identity may be that proxy, the xDS stream on the same connection
// decides (outcomes.Sink); this check keeps a certificate revoked by a
// reload (its CA removed) or expired from counting between that stream's
// checks. A certificate is verified once per change of the client CAs.
func (r *Reloader) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !r.MutualTLS() {
			return handler(ctx, req)
		}
		chain, _, err := peerCertificate(ctx)
		if err != nil {
			r.denied.WithLabelValues("certificate").Inc()
			return nil, status.Error(codes.Unauthenticated, "xds: "+err.Error())
		}
		leaf := chain[0]
		if now := time.Now(); now.After(leaf.NotAfter) {
			r.denied.WithLabelValues("certificate").Inc()
			return nil, status.Errorf(codes.PermissionDenied, "xds: the client certificate expired at %v", leaf.NotAfter)
		}
		cur := r.cur.Load()
		if v, ok := r.verified.Load(leaf); !ok || v != cur.clientCAs {
			inter := x509.NewCertPool()
			for _, c := range chain[1:] {
				inter.AddCert(c)
			}
			if _, err := leaf.Verify(x509.VerifyOptions{Roots: cur.clientCAs, Intermediates: inter,
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
				r.denied.WithLabelValues("certificate").Inc()
				return nil, status.Error(codes.PermissionDenied, "xds: the client certificate no longer verifies against the client CAs: "+err.Error())
			}
			if !ok && r.nVerified.Add(1) > maxVerified {
				r.verified.Clear()
				r.nVerified.Store(0)
			}
			r.verified.Store(leaf, cur.clientCAs)
		}
		return handler(ctx, req)
	}
}

// authorizedStream checks each request and response of one xDS stream.
// RecvMsg and SendMsg run on different goroutines: mu guards the node and
// the verification state.
type authorizedStream struct {
	grpc.ServerStream
	r      *Reloader
	chain  []*x509.Certificate // the peer's, leaf first
	ids    []string
	method string
	denied atomic.Pointer[error]

	mu       sync.Mutex
	node     *corev3.Node   // of the first request
	verified *x509.CertPool // the client CAs the chain last verified against
}

func (s *authorizedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	var node *corev3.Node
	if n, ok := m.(interface{ GetNode() *corev3.Node }); ok { // xDS requests
		node = n.GetNode()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.node == nil && node == nil:
		return s.deny("request", "the first request must carry the node")
	case s.node == nil:
		s.node = node
	case node != nil && (node.GetId() != s.node.GetId() || node.GetCluster() != s.node.GetCluster()):
		return s.deny("request", fmt.Sprintf("the node changed within the stream, from %.256q of cluster %.256q to %.256q of cluster %.256q",
			s.node.GetId(), s.node.GetCluster(), node.GetId(), node.GetCluster()))
	}
	return s.check()
}

func (s *authorizedStream) SendMsg(m any) error {
	s.mu.Lock()
	err := s.check()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.ServerStream.SendMsg(m)
}

// check authorizes the stream's node with the material in use now; s.mu
// must be held.
func (s *authorizedStream) check() error {
	if s.node == nil {
		return s.deny("request", "a response before any request") // go-control-plane never does this
	}
	cur := s.r.cur.Load()
	leaf := s.chain[0]
	if now := time.Now(); now.After(leaf.NotAfter) {
		return s.deny("certificate", fmt.Sprintf("the client certificate expired at %v", leaf.NotAfter))
	}
	if cur.clientCAs != s.verified {
		inter := x509.NewCertPool()
		for _, c := range s.chain[1:] {
			inter.AddCert(c)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: cur.clientCAs, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			return s.deny("certificate", "the client certificate no longer verifies against the client CAs: "+err.Error())
		}
		s.verified = cur.clientCAs
	}
	if !cur.policy.Allowed(s.ids, s.node.GetCluster(), s.node.GetId()) {
		return s.deny("identity", fmt.Sprintf("identity %v may not subscribe as cluster %.256q, node %.256q", s.ids, s.node.GetCluster(), s.node.GetId()))
	}
	return nil
}

// deny records why the stream ends, counts and logs it, and returns the
// error to end it with.
func (s *authorizedStream) deny(reason, why string) error {
	s.r.denied.WithLabelValues(reason).Inc()
	addr := ""
	if p, ok := peer.FromContext(s.Context()); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	// The node's id and cluster as sent, before the xDS server's limits
	// (docs/reference.md, "What proxies send") check them: at most 256 characters each.
	s.r.log.Warn("xDS stream denied", "reason", reason, "why", why, "identities", s.ids,
		"cluster", fmt.Sprintf("%.256s", s.node.GetCluster()), "node_id", fmt.Sprintf("%.256s", s.node.GetId()),
		"address", addr, "method", s.method)
	err := status.Error(codes.PermissionDenied, "xds: "+why)
	s.denied.CompareAndSwap(nil, &err)
	return err
}

// peerCertificate returns the verified client certificate chain of ctx's
// gRPC peer, leaf first, and the leaf's identities: its URI SANs (SPIFFE
// IDs), then its DNS SANs.
func peerCertificate(ctx context.Context) ([]*x509.Certificate, []string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, nil, errors.New("no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil, nil, errors.New("no verified client certificate")
	}
	chain := info.State.VerifiedChains[0]
	var ids []string
	for _, u := range chain[0].URIs {
		ids = append(ids, u.String())
	}
	ids = append(ids, chain[0].DNSNames...)
	if len(ids) == 0 {
		return nil, nil, errors.New("the client certificate has no URI or DNS subject alternative name to identify it")
	}
	return chain, ids, nil
}
