package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/allotmesh/allot/control-plane/mtls"
	"github.com/allotmesh/allot/control-plane/mtls/mtlstest"
)

// subscribe opens an ADS stream to addr presenting cert (none if nil) as
// node of cluster, asks for the Allot filter's configuration and returns
// the first response. The stream stays open until hold is done.
func subscribe(hold context.Context, addr string, roots *x509.CertPool, cert *tls.Certificate, node, cluster string) (*discoveryv3.DiscoveryResponse, error) {
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(hold)
	go func() { <-ctx.Done(); conn.Close() }()
	timer := time.AfterFunc(3*time.Second, cancel)
	defer timer.Stop()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err == nil {
		err = s.Send(&discoveryv3.DiscoveryRequest{
			Node:    &corev3.Node{Id: node, Cluster: cluster},
			TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"},
		})
	}
	var resp *discoveryv3.DiscoveryResponse
	if err == nil || errors.Is(err, io.EOF) { // a stream the server ended: Recv has its status
		resp, err = s.Recv()
	}
	if err != nil || hold.Err() != nil {
		cancel()
	}
	return resp, err
}

// TestMutualTLSProxies: with client CAs and an identity policy, xDS serves
// only proxies whose certificate's identity may subscribe as their node's
// cluster; everyone else receives nothing and is never listed as a proxy.
// The server certificate, the client CAs and the policy are reloaded from
// disk while allotd runs.
func TestMutualTLSProxies(t *testing.T) {
	dir := t.TempDir()
	serverCA, proxyCA, otherCA := mtlstest.NewCA(t, "allotd"), mtlstest.NewCA(t, "proxies"), mtlstest.NewCA(t, "elsewhere")
	files := mtls.Files{ClientCA: filepath.Join(dir, "proxy-ca.pem"), Policy: filepath.Join(dir, "identities.json")}
	files.Cert, files.Key = serverCA.Server(t).Write(t, dir, "server")
	mtlstest.WriteFile(t, files.ClientCA, proxyCA.PEM)
	policy := `{"proxies":[{"identity":"spiffe://allot.test/cluster/{cluster}"},
	  {"identity":"spiffe://allot.test/gateway/{node}","clusters":["gateway"]}]}`
	mtlstest.WriteFile(t, files.Policy, []byte(policy))
	r, err := mtls.Load(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx, 20*time.Millisecond)
	a := start(t, func(c *Config) {
		c.TLS, c.XDSTLS, c.XDSStreamInterceptor, c.Collectors = r.AdminTLS(), r.XDSTLS(), r.StreamInterceptor(), r.Collectors()
	})
	xdsAddr, roots := a.XDS.String(), serverCA.Pool()
	checkout := proxyCA.Client(t, "spiffe://allot.test/cluster/checkout").TLS
	payments := proxyCA.Client(t, "spiffe://allot.test/cluster/payments").TLS
	team := proxyCA.Client(t, "spiffe://allot.test/team/payments").TLS
	noSAN := proxyCA.Client(t).TLS
	foreign := otherCA.Client(t, "spiffe://allot.test/cluster/checkout").TLS

	// One authorized proxy stays connected throughout.
	held, release := context.WithCancel(context.Background())
	defer release()
	if _, err := subscribe(held, xdsAddr, roots, &checkout, "held", "checkout"); err != nil {
		t.Fatalf("authorized proxy: %v", err)
	}
	for _, tt := range []struct {
		name string
		cert *tls.Certificate
		want codes.Code // codes.OK: a configuration arrives
	}{
		{"own cluster", &checkout, codes.OK},
		{"no certificate", nil, codes.Unavailable},
		{"certificate of another cluster", &payments, codes.PermissionDenied},
		{"identity the policy does not name", &team, codes.PermissionDenied},
		{"certificate without an identity", &noSAN, codes.Unauthenticated},
		{"certificate from another CA", &foreign, codes.Unavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := subscribe(ctx, xdsAddr, roots, tt.cert, "node-"+strings.ReplaceAll(tt.name, " ", "-"), "checkout")
			if got := status.Code(err); got != tt.want {
				t.Fatalf("subscribe as checkout: %v (code %v), want code %v", err, got, tt.want)
			}
			if tt.want == codes.OK && len(resp.GetResources()) != 1 {
				t.Fatalf("got %d resources, want the filter's configuration", len(resp.GetResources()))
			}
			if tt.want != codes.OK && resp != nil {
				t.Fatalf("a refused client received %v", resp)
			}
		})
	}

	// A denial quotes the node as sent, before the xDS limits check it:
	// cut, so that a 100 KB cluster name is not logged or answered whole.
	if _, err := subscribe(ctx, xdsAddr, roots, &checkout, "long", strings.Repeat("c", 100_000)); status.Code(err) != codes.PermissionDenied ||
		len(status.Convert(err).Message()) > 1024 {
		t.Fatalf("checkout's certificate as a cluster of 100 KB: code %v, a message of %d bytes; want PermissionDenied in at most 1 KiB",
			status.Code(err), len(status.Convert(err).Message()))
	}

	// Only authorized proxies are tracked: a refused client cannot stand
	// in a waited write's way.
	https := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	metric := func(name string) string {
		code, body := get(t, https, "https://"+a.Admin.String()+"/metrics")
		if code != 200 {
			t.Fatalf("/metrics: %d", code)
		}
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, name+" ") {
				return strings.TrimPrefix(l, name+" ")
			}
		}
		return ""
	}
	if got := metric(`allot_xds_denied_streams_total{reason="identity"}`); got != "3" {
		t.Errorf("identity denials: %q, want 3 (another cluster's certificate, an identity the policy does not name, the long cluster)", got)
	}
	if got := metric(`allot_xds_denied_streams_total{reason="certificate"}`); got != "1" {
		t.Errorf("certificate denials: %q, want 1 (the certificate without an identity)", got)
	}

	var rollout struct {
		Proxies []json.RawMessage `json:"proxies"`
	}
	req, _ := http.NewRequest("GET", "https://"+a.Admin.String()+"/v1/rollout", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := https.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&rollout); err != nil {
		t.Fatal(err)
	}
	if len(rollout.Proxies) != 2 || !strings.Contains(string(rollout.Proxies[0]), `"nodeId":"held"`) ||
		!strings.Contains(string(rollout.Proxies[1]), `"nodeId":"node-own-cluster"`) {
		t.Errorf("rollout lists %s, want the two authorized proxies (held, node-own-cluster)", rollout.Proxies)
	}

	// A certificate bound to a node id serves that node only: it cannot
	// pose as another proxy of its cluster.
	gw1 := proxyCA.Client(t, "spiffe://allot.test/gateway/gw-1").TLS
	if _, err := subscribe(ctx, xdsAddr, roots, &gw1, "gw-1", "gateway"); err != nil {
		t.Fatalf("gw-1 as itself: %v", err)
	}
	if _, err := subscribe(ctx, xdsAddr, roots, &gw1, "gw-2", "gateway"); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("gw-1's certificate as node gw-2: %v, want PermissionDenied", err)
	}

	// Every other way in: an ECDS-only stream and a delta stream with
	// another cluster's certificate, a first request without a node, a
	// node that changes within the stream, and the unary fetch.
	for _, tt := range []struct {
		name string
		call func(conn *grpc.ClientConn, ctx context.Context) (int, error) // resources received
		want codes.Code
	}{
		{"ECDS stream, another cluster's certificate", func(conn *grpc.ClientConn, ctx context.Context) (int, error) {
			s, err := extensionv3.NewExtensionConfigDiscoveryServiceClient(conn).StreamExtensionConfigs(ctx)
			if err != nil {
				return 0, err
			}
			s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n", Cluster: "checkout"}, TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}})
			r, err := s.Recv()
			return len(r.GetResources()), err
		}, codes.PermissionDenied},
		{"delta stream, another cluster's certificate", func(conn *grpc.ClientConn, ctx context.Context) (int, error) {
			s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(ctx)
			if err != nil {
				return 0, err
			}
			s.Send(&discoveryv3.DeltaDiscoveryRequest{Node: &corev3.Node{Id: "n", Cluster: "checkout"}, TypeUrl: resource.ExtensionConfigType, ResourceNamesSubscribe: []string{"allot"}})
			r, err := s.Recv()
			return len(r.GetResources()), err
		}, codes.PermissionDenied},
		{"unary fetch", func(conn *grpc.ClientConn, ctx context.Context) (int, error) {
			r, err := extensionv3.NewExtensionConfigDiscoveryServiceClient(conn).FetchExtensionConfigs(ctx,
				&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "n", Cluster: "payments"}, TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}})
			return len(r.GetResources()), err
		}, codes.Unimplemented},
		{"first request without a node", func(conn *grpc.ClientConn, ctx context.Context) (int, error) {
			s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
			if err != nil {
				return 0, err
			}
			s.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}})
			r, err := s.Recv()
			return len(r.GetResources()), err
		}, codes.PermissionDenied},
		{"node changed within the stream", func(conn *grpc.ClientConn, ctx context.Context) (int, error) {
			s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
			if err != nil {
				return 0, err
			}
			s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "payments-1", Cluster: "payments"}, TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}})
			first, err := s.Recv()
			if err != nil {
				return 0, fmt.Errorf("as its own node: %w", err)
			}
			s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "payments-2", Cluster: "payments"}, TypeUrl: resource.ExtensionConfigType,
				ResourceNames: []string{"allot"}, VersionInfo: first.GetVersionInfo(), ResponseNonce: first.GetNonce()})
			r, err := s.Recv()
			return len(r.GetResources()), err
		}, codes.PermissionDenied},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(credentials.NewTLS(
				&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{payments}})))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			n, err := tt.call(conn, cctx)
			if status.Code(err) != tt.want || n != 0 {
				t.Fatalf("received %d resources, error %v; want none and code %v", n, err, tt.want)
			}
		})
	}

	asCheckout := func(cert *tls.Certificate) func() error {
		return func() error {
			once, done := context.WithCancel(ctx)
			defer done()
			_, err := subscribe(once, xdsAddr, roots, cert, "node-reload", "checkout")
			return err
		}
	}

	// The policy grows a rule: the team identity may now subscribe as
	// checkout, without a restart.
	policy = `{"proxies":[{"identity":"spiffe://allot.test/cluster/{cluster}"},
	  {"identity":"spiffe://allot.test/gateway/{node}","clusters":["gateway"]},
	  {"identity":"spiffe://allot.test/team/payments","clusters":["checkout"]}]}`
	mtlstest.WriteFile(t, files.Policy, []byte(policy))
	eventually(t, 5*time.Second, "team identity after the policy reload", asCheckout(&team))

	// A policy that does not parse is not used: the previous one stays.
	mtlstest.WriteFile(t, files.Policy, []byte(`{"proxies":[{"identity":"spiffe://allot.test/x"}]}`))
	eventually(t, 5*time.Second, "failed reload counted", func() error {
		if got := metric(`allot_tls_reloads_total{result="failed"}`); got == "" || got == "0" {
			return fmt.Errorf("failed reloads: %q", got)
		}
		return nil
	})
	if err := asCheckout(&team)(); err != nil {
		t.Fatalf("after an invalid policy was written, the previous policy is gone: %v", err)
	}
	if err := asCheckout(&payments)(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("after an invalid policy was written: payments as checkout: %v, want PermissionDenied", err)
	}

	// Client CA rotation: the other CA's proxies are trusted once its
	// certificate joins the bundle.
	mtlstest.WriteFile(t, files.ClientCA, append(bytes.Clone(proxyCA.PEM), otherCA.PEM...))
	eventually(t, 5*time.Second, "certificate from the added CA", asCheckout(&foreign))

	// Server certificate rotation: new connections see the new certificate.
	next := serverCA.Server(t)
	next.Write(t, dir, "server")
	eventually(t, 5*time.Second, "rotated server certificate", func() error {
		c, err := tls.Dial("tcp", xdsAddr, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{checkout}, NextProtos: []string{"h2"}})
		if err != nil {
			return err
		}
		defer c.Close()
		if got := c.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(next.Cert.SerialNumber) != 0 {
			return fmt.Errorf("server certificate serial %v, want %v", got, next.Cert.SerialNumber)
		}
		return nil
	})

	// Revocation: a stream open under the current policy is cut off at the
	// next push once the policy no longer allows it.
	conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(credentials.NewTLS(
		&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{checkout}})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	open, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(rctx)
	if err != nil {
		t.Fatal(err)
	}
	dreq := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "revoked", Cluster: "checkout"}, TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}}
	open.Send(dreq)
	first, err := open.Recv()
	if err != nil {
		t.Fatalf("before the revocation: %v", err)
	}
	dreq.VersionInfo, dreq.ResponseNonce = first.GetVersionInfo(), first.GetNonce()
	open.Send(dreq) // ACK
	mtlstest.WriteFile(t, files.Policy, []byte(`{"proxies":[{"identity":"spiffe://allot.test/team/payments","clusters":["checkout"]}]}`))
	eventually(t, 5*time.Second, "the revoking policy in use", func() error {
		if _, err := subscribe(ctx, xdsAddr, roots, &checkout, "probe", "checkout"); status.Code(err) != codes.PermissionDenied {
			return fmt.Errorf("checkout identity after the revocation: %v", err)
		}
		return nil
	})
	body := strings.NewReader(`{"key":"push","variations":["a","b"]}`)
	post, _ := http.NewRequest("POST", "https://"+a.Admin.String()+"/v1/experiments", body)
	post.Header.Set("Authorization", "Bearer "+testToken)
	resp, err = https.Do(post)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", resp.StatusCode)
	}
	if r, err := open.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("revoked stream at the next push: received %v, error %v; want PermissionDenied", r.GetVersionInfo(), err)
	}
}
