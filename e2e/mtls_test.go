//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/allotmesh/allot/control-plane/mtls/mtlstest"
	"github.com/allotmesh/allot/internal/harness"
)

// mtlsSystem is allotd requiring proxy certificates: -tls-cert, and
// -xds-client-ca with an identity policy that lets
// spiffe://allot.test/cluster/<c> subscribe as cluster c.
type mtlsSystem struct {
	*system
	dir               string
	serverCA, proxyCA *mtlstest.CA
	clientCA, policy  string
	certFile, keyFile string
	serverCAFile      string
}

func startMTLS(t *testing.T) *mtlsSystem {
	t.Helper()
	m := &mtlsSystem{system: prepareSystem(t, wasmArtifact), dir: t.TempDir()}
	m.serverCA, m.proxyCA = mtlstest.NewCA(t, "allotd CA"), mtlstest.NewCA(t, "proxy CA")
	m.certFile, m.keyFile = m.serverCA.Server(t).Write(t, m.dir, "allotd")
	m.serverCAFile = filepath.Join(m.dir, "allotd-ca.pem")
	mtlstest.WriteFile(t, m.serverCAFile, m.serverCA.PEM)
	m.clientCA, m.policy = filepath.Join(m.dir, "proxy-ca.pem"), filepath.Join(m.dir, "identities.json")
	mtlstest.WriteFile(t, m.clientCA, m.proxyCA.PEM)
	mtlstest.WriteFile(t, m.policy, []byte(`{"proxies":[{"identity":"spiffe://allot.test/cluster/{cluster}"}]}`))
	m.xdsPort, m.adminPort = harness.MustFreePort(t), harness.MustFreePort(t)
	m.https = &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: m.serverCA.Pool()}}}
	m.args = []string{"-tls-cert", m.certFile, "-tls-key", m.keyFile,
		"-xds-client-ca", m.clientCA, "-xds-identities", m.policy, "-tls-reload", "200ms"}
	m.startAllotd()
	return m
}

// sidecar starts an Envoy for cluster whose xDS cluster is
// envoy-configs/xds-mtls.yaml, presenting a certificate for identity, with
// replace's replacements in its bootstrap too (none if nil).
func (m *mtlsSystem) sidecar(node, cluster, identity string, replace map[string]string) *proxy {
	m.t.Helper()
	leaf := m.proxyCA.Client(m.t, identity)
	cert, key := leaf.Write(m.t, m.dir, node)
	sidecar, err := os.ReadFile(repoPath(m.t, wasmArtifact.sidecar))
	if err != nil {
		m.t.Fatal(err)
	}
	frag, err := os.ReadFile(repoPath(m.t, "envoy-configs/xds-mtls.yaml"))
	if err != nil {
		m.t.Fatal(err)
	}
	tail := string(sidecar[bytes.Index(sidecar, []byte("  - name: allot_xds")):])
	mtls := string(frag[bytes.Index(frag, []byte("  - name: allot_xds")):])
	mtls = strings.NewReplacer(
		"/etc/allot/tls/proxy.pem", cert, "/etc/allot/tls/proxy-key.pem", key,
		"/etc/allot/tls/allotd-ca.pem", m.serverCAFile, "allotd.example.org", "localhost",
		"port_value: 18000", fmt.Sprintf("port_value: %d", m.xdsPort), // the bootstrap is rendered in one pass
	).Replace(mtls)
	_, echoPort, _ := splitHostPort(m.echoAddr)
	all := map[string]string{"port_value: 8081": "port_value: " + echoPort, tail: mtls}
	maps.Copy(all, replace)
	return startEnvoy(m.t, wasmArtifact.sidecar, m.xdsPort, m.filter(), nil, node, cluster, all)
}

// metric returns the value of one series of allotd's /metrics ("" if absent).
func (m *mtlsSystem) metric(series string) string {
	m.t.Helper()
	resp, err := m.https.Get(m.adminURL + "/metrics")
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	for _, l := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			return v
		}
	}
	return ""
}

// rolloutNodes returns the node ids GET /v1/rollout lists.
func (m *mtlsSystem) rolloutNodes() []string {
	m.t.Helper()
	var ro rolloutJSON
	m.mustAPI(http.StatusOK, "GET", "/v1/rollout", nil, &ro)
	var nodes []string
	for _, p := range ro.Proxies {
		nodes = append(nodes, p.NodeID)
	}
	return nodes
}

// xdsWithoutCertificate opens an ADS stream over TLS without a client
// certificate and returns what it received and the error.
func xdsWithoutCertificate(addr string, roots *tls.Config) (*discoveryv3.DiscoveryResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(roots)))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return nil, err
	}
	s.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "rogue", Cluster: "checkout"},
		TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}})
	return s.Recv()
}

// TestMutualTLSProxies: allotd requires proxy certificates on xDS. An Envoy
// with its cluster's certificate receives its experiments; an Envoy whose
// certificate belongs to another cluster and a client without a
// certificate receive nothing, are never listed as proxies, and cannot hold
// a waited write; policy, client CAs and server certificate changes on disk
// take effect without a restart.
func TestMutualTLSProxies(t *testing.T) {
	m := startMTLS(t)
	good := m.sidecar("checkout-1", "checkout", "spiffe://allot.test/cluster/checkout", nil)
	rogue := m.sidecar("checkout-rogue", "checkout", "spiffe://allot.test/cluster/payments", nil)
	harness.MustEventually(t, 15*time.Second, func() error {
		if nodes := m.rolloutNodes(); len(nodes) != 1 || nodes[0] != "checkout-1" {
			return fmt.Errorf("rollout lists %v, want [checkout-1]", nodes)
		}
		return nil
	})

	// The waited write is applied by the authorized proxy alone: the rogue
	// one, though it claims cluster checkout, is not waited for.
	var w waitedWrite
	start := time.Now()
	m.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", checkoutRamp(1), &w)
	if nodes := m.rolloutNodes(); !w.Rollout.appliedBy(1) || !slices.Equal(nodes, []string{"checkout-1"}) {
		t.Fatalf("waited write: %+v, proxies %v; want applied by checkout-1 alone", w.Rollout, nodes)
	}
	t.Logf("waited write applied by checkout-1 in %v", time.Since(start))
	harness.MustEventually(t, 10*time.Second, func() error {
		r, err := good.get(map[string][]string{"x-user-id": {"u1"}})
		if err != nil {
			return err
		}
		if v := r.Header("x-experiment-checkout"); len(v) != 1 || v[0] != "treatment" {
			return fmt.Errorf("authorized Envoy: x-experiment-checkout %q, want [treatment]", v)
		}
		return nil
	})

	// The rogue Envoy keeps its bootstrap's default (no experiments): it
	// was refused, and retried, and never received a configuration.
	harness.MustEventually(t, 10*time.Second, func() error {
		if !strings.Contains(m.allotd.MustLog(t), "xDS stream denied") {
			return fmt.Errorf("allotd logged no denial yet")
		}
		if got := m.metric(`allot_xds_denied_streams_total{reason="identity"}`); got == "" || got == "0" {
			return fmt.Errorf("identity denials: %q", got)
		}
		return nil
	})
	r, err := rogue.get(map[string][]string{"x-user-id": {"u1"}})
	if err != nil {
		t.Fatalf("the rogue Envoy stopped serving: %v", err)
	}
	if v := r.Header("x-experiment-checkout"); len(v) != 0 {
		t.Fatalf("the rogue Envoy assigned %q: it received the experiments", v)
	}
	if n := ecdsStat(t, rogue, "config_reload"); n != 0 {
		t.Fatalf("the rogue Envoy applied %d configurations", n)
	}
	if nodes := m.rolloutNodes(); len(nodes) != 1 || nodes[0] != "checkout-1" {
		t.Fatalf("rollout lists %v, want [checkout-1]", nodes)
	}

	// No certificate: the handshake is refused, nothing is received.
	resp, err := xdsWithoutCertificate(fmt.Sprintf("127.0.0.1:%d", m.xdsPort), &tls.Config{RootCAs: m.serverCA.Pool()})
	if err == nil || resp != nil {
		t.Fatalf("a client without a certificate: received %v, error %v", resp, err)
	}
	// Why, at the TLS level: the server's alert.
	raw, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", m.xdsPort), &tls.Config{RootCAs: m.serverCA.Pool(), NextProtos: []string{"h2"}})
	if err == nil {
		raw.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = raw.Read(make([]byte, 1))
		raw.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		t.Fatalf("TLS without a client certificate: %v, want the alert \"certificate required\"", err)
	}
	t.Logf("client without a certificate: %v", err)

	// The policy now lets the payments identity subscribe as checkout too:
	// the rogue Envoy's next retry is served, without restarting allotd.
	mtlstest.WriteFile(t, m.policy, []byte(`{"proxies":[{"identity":"spiffe://allot.test/cluster/{cluster}"},
	  {"identity":"spiffe://allot.test/cluster/payments","clusters":["checkout"]}]}`))
	reloaded := time.Now()
	harness.MustEventually(t, 60*time.Second, func() error {
		r, err := rogue.get(map[string][]string{"x-user-id": {"u1"}})
		if err != nil {
			return err
		}
		if v := r.Header("x-experiment-checkout"); len(v) != 1 || v[0] != "treatment" {
			return fmt.Errorf("after the policy reload: x-experiment-checkout %q, want [treatment]", v)
		}
		return nil
	})

	// Envoy retries a refused stream with a jittered backoff of up to 30 s.
	t.Logf("the formerly refused Envoy served its assignments %v after the policy was rewritten", time.Since(reloaded))

	// The server certificate is rotated on disk: new connections get the
	// new one, and an Envoy started now verifies it and is served.
	next := m.serverCA.Server(t)
	next.Write(t, m.dir, "allotd")
	harness.MustEventually(t, 10*time.Second, func() error {
		c, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", m.adminPort), &tls.Config{RootCAs: m.serverCA.Pool()})
		if err != nil {
			return err
		}
		defer c.Close()
		if got := c.ConnectionState().PeerCertificates[0].SerialNumber; got.Cmp(next.Cert.SerialNumber) != 0 {
			return fmt.Errorf("admin listener presents serial %v, want the rotated %v", got, next.Cert.SerialNumber)
		}
		return nil
	})
	late := m.sidecar("checkout-2", "checkout", "spiffe://allot.test/cluster/checkout", nil)
	harness.MustEventually(t, 15*time.Second, func() error {
		r, err := late.get(map[string][]string{"x-user-id": {"u1"}})
		if err != nil {
			return err
		}
		if v := r.Header("x-experiment-checkout"); len(v) != 1 || v[0] != "treatment" {
			return fmt.Errorf("Envoy started after the rotation: x-experiment-checkout %q, want [treatment]", v)
		}
		return nil
	})
	if got := m.metric(`allot_tls_reloads_total{result="loaded"}`); got != "2" {
		t.Errorf("reloads: %q, want 2 (the policy, the certificate)", got)
	}
}
