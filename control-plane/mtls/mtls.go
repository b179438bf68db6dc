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
	sums      [3][sha256.Size]byte // of the cert and key, the client CAs, the policy
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
	mu    sync.Mutex // serializes Reload; guards lastErr
	// lastErr is the last reload's error text: a failure is counted and
	// logged once, not at every check while the files stay broken.
	lastErr string

	reloads  *prometheus.CounterVec
	notAfter prometheus.GaugeFunc
	denied   *prometheus.CounterVec
}

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
			Help: "xDS streams ended because the client certificate's identity may not subscribe as the node's cluster (reason identity), or because the certificate carries no identity (reason certificate).",
		}, []string{"reason"}),
	}
	r.notAfter = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "allot_tls_certificate_expiry_timestamp_seconds",
		Help: "When the server certificate in use expires (Unix time).",
	}, func() float64 { return float64(r.cur.Load().cert.Leaf.NotAfter.Unix()) })
	m, changed, err := r.load(&material{})
	if err != nil {
		return nil, err
	}
	if changed == 0 {
		return nil, errors.New("mtls: nothing loaded") // unreachable: every part is new
	}
	r.cur.Store(m)
	return r, nil
}

// MutualTLS reports whether client certificates are required on xDS.
func (r *Reloader) MutualTLS() bool { return r.files.ClientCA != "" }

// load reads the files and returns old with every part whose file contents
// changed and parse replaced, how many parts it replaced, and why the
// others did not load. A part that does not load keeps old's, so a broken
// policy never holds back a certificate rotation.
func (r *Reloader) load(old *material) (*material, int, error) {
	// read returns the files' contents and their digest.
	read := func(paths ...string) ([][]byte, [sha256.Size]byte, error) {
		h := sha256.New()
		var bs [][]byte
		var sum [sha256.Size]byte
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, sum, fmt.Errorf("mtls: %w", err)
			}
			fmt.Fprintf(h, "%d:", len(b))
			h.Write(b)
			bs = append(bs, b)
		}
		h.Sum(sum[:0])
		return bs, sum, nil
	}
	m := *old
	changed := 0
	var errs []error
	if b, sum, err := read(r.files.Cert, r.files.Key); err != nil {
		errs = append(errs, err)
	} else if sum != old.sums[0] {
		cert, err := tls.X509KeyPair(b[0], b[1])
		if err != nil {
			errs = append(errs, fmt.Errorf("mtls: certificate %s with key %s: %w", r.files.Cert, r.files.Key, err))
		} else {
			m.cert, m.sums[0] = &cert, sum
			changed++
		}
	}
	if r.files.ClientCA != "" {
		if b, sum, err := read(r.files.ClientCA); err != nil {
			errs = append(errs, err)
		} else if sum != old.sums[1] {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(b[0]) {
				errs = append(errs, fmt.Errorf("mtls: client CAs %s: no PEM certificate found", r.files.ClientCA))
			} else {
				m.clientCAs, m.sums[1] = pool, sum
				changed++
			}
		}
		if b, sum, err := read(r.files.Policy); err != nil {
			errs = append(errs, err)
		} else if sum != old.sums[2] {
			if p, err := ParsePolicy(b[0]); err != nil {
				errs = append(errs, fmt.Errorf("mtls: proxy identity policy %s:\n%w", r.files.Policy, err))
			} else {
				m.policy, m.sums[2] = p, sum
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
	return &m, changed, errors.Join(errs...)
}

// Reload reads the files again and puts every part whose contents changed
// and parse (the certificate with its key, the client CAs, the policy) in
// use for the next handshakes and xDS requests. A part that does not load
// keeps the previous one in use; the error says why, and is counted and
// logged once however often the same failure repeats (a certificate manager
// may write the certificate before its key).
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, changed, err := r.load(r.cur.Load())
	switch {
	case err == nil:
		r.lastErr = ""
	case err.Error() != r.lastErr:
		r.lastErr = err.Error()
		r.reloads.WithLabelValues("failed").Inc()
		r.log.Error("TLS files changed but do not load; the previous ones stay in use", "error", err)
	}
	if changed > 0 {
		r.cur.Store(m)
		r.reloads.WithLabelValues("loaded").Add(float64(changed))
		r.log.Info("TLS material reloaded", "cert", r.files.Cert, "not_after", m.cert.Leaf.NotAfter,
			"client_ca", r.files.ClientCA, "policy", r.files.Policy)
	}
	return err
}

// Run reloads every interval until ctx is done.
func (r *Reloader) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Reload() // counted and logged by Reload
		}
	}
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
		NextProtos:         []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) { return r.cur.Load().xds, nil },
	}
}

// Collectors are the reloader's Prometheus metrics.
func (r *Reloader) Collectors() []prometheus.Collector {
	return []prometheus.Collector{r.reloads, r.notAfter, r.denied}
}

// StreamInterceptor authorizes xDS streams when client certificates are
// required (it passes every stream through otherwise): a stream without a
// verified client certificate ends with UNAUTHENTICATED, and every request
// whose node names a cluster the certificate's identities may not
// subscribe as ends its stream with PERMISSION_DENIED before the xDS
// server sees it, so the client receives nothing and is never tracked as a
// proxy. The policy in use when a request arrives decides it.
func (r *Reloader) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !r.MutualTLS() {
			return handler(srv, ss)
		}
		ids, err := Identities(ss.Context())
		if err != nil {
			r.denied.WithLabelValues("certificate").Inc()
			return status.Error(codes.Unauthenticated, err.Error())
		}
		as := &authorizedStream{ServerStream: ss, r: r, ids: ids, method: info.FullMethod}
		err = handler(srv, as)
		if denied := as.denied.Load(); denied != nil {
			// The xDS server ends a stream whose receive failed without an
			// error of its own; the client is told why.
			return *denied
		}
		return err
	}
}

type authorizedStream struct {
	grpc.ServerStream
	r      *Reloader
	ids    []string
	method string
	seen   bool // a request carried a node
	denied atomic.Pointer[error]
}

func (s *authorizedStream) deny(err error) error {
	s.r.denied.WithLabelValues("identity").Inc()
	s.denied.Store(&err)
	return err
}

func (s *authorizedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	n, ok := m.(interface{ GetNode() *corev3.Node })
	if !ok || n.GetNode() == nil {
		if s.seen {
			return nil // the node of the stream's first request stands
		}
		return s.deny(status.Error(codes.PermissionDenied, "xds: the first request must carry the node"))
	}
	cluster := n.GetNode().GetCluster()
	if !s.r.cur.Load().policy.Allowed(s.ids, cluster, n.GetNode().GetId()) {
		addr := ""
		if p, ok := peer.FromContext(s.Context()); ok && p.Addr != nil {
			addr = p.Addr.String()
		}
		s.r.log.Warn("xDS stream denied: identity may not subscribe as the node", "identities", s.ids,
			"cluster", cluster, "node_id", n.GetNode().GetId(), "address", addr, "method", s.method)
		return s.deny(status.Errorf(codes.PermissionDenied, "xds: identity %v may not subscribe as cluster %q, node %q", s.ids, cluster, n.GetNode().GetId()))
	}
	s.seen = true
	return nil
}

// Identities returns the identities of the verified client certificate of
// ctx's gRPC peer: its URI SANs (SPIFFE IDs), then its DNS SANs.
func Identities(ctx context.Context) ([]string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, errors.New("no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil, errors.New("no verified client certificate")
	}
	leaf := info.State.VerifiedChains[0][0]
	var ids []string
	for _, u := range leaf.URIs {
		ids = append(ids, u.String())
	}
	ids = append(ids, leaf.DNSNames...)
	if len(ids) == 0 {
		return nil, errors.New("the client certificate has no URI or DNS subject alternative name to identify it")
	}
	return ids, nil
}
