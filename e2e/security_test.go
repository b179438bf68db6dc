//go:build e2e && reliability

package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allotmesh/allot/control-plane/mtls/mtlstest"
	"github.com/allotmesh/allot/internal/harness"
)

// TestReliabilityAdminSecurity: the admin API without a token, with a wrong
// token, against another owner's experiment, or as a reader writing is
// rejected — and every attempt is in allotd's log.
func TestReliabilityAdminSecurity(t *testing.T) {
	s := startSystem(t)
	tokens := `{"tokens":[
	  {"name":"e2e","role":"admin","token":"` + adminToken + `"},
	  {"name":"alice","role":"owner","namespaces":["team-a"],"token":"alice-token-0123456789"},
	  {"name":"bob","role":"owner","namespaces":["team-b"],"token":"bob-token-0123456789"},
	  {"name":"dash","role":"reader","token":"reader-token-0123456789"}]}`
	if err := os.WriteFile(s.tokenFile, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	s.allotd.MustTerminate(t)
	s.startAllotd()
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{
		"key": "team-a-exp", "owner": "team-a", "variations": []string{"a", "b"}}, nil)

	call := func(token, method, path, body string) int {
		req, _ := http.NewRequest(method, s.adminURL+path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	update := `{"key":"team-a-exp","owner":"team-a","variations":["a","b"],"weights":[0,1],"revision":"1"}`
	tests := []struct {
		name, token, method, path, body string
		want                            int
	}{
		{"no token", "", "POST", "/v1/experiments", `{"key":"x","variations":["a","b"]}`, 401},
		{"wrong token", "not-a-token-0123456789", "POST", "/v1/experiments", `{"key":"x","variations":["a","b"]}`, 401},
		{"another owner's experiment", "bob-token-0123456789", "PUT", "/v1/experiments/team-a-exp", update, 403},
		{"another owner's delete", "bob-token-0123456789", "DELETE", "/v1/experiments/team-a-exp", "", 403},
		{"reader writing", "reader-token-0123456789", "POST", "/v1/experiments", `{"key":"y","owner":"team-a","variations":["a","b"]}`, 403},
	}
	for _, tt := range tests {
		if got := call(tt.token, tt.method, tt.path, tt.body); got != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, got, tt.want)
		}
	}
	// Nothing changed, and every attempt was logged.
	var e map[string]any
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/team-a-exp", nil, &e)
	if e["revision"] != "1" {
		t.Fatalf("a denied write changed the experiment: %v", e)
	}
	harness.MustEventually(t, 5*time.Second, func() error {
		log := s.allotd.MustLog(t)
		if n := strings.Count(log, "admin request unauthenticated"); n < 2 {
			return fmt.Errorf("%d unauthenticated attempts logged, want 2", n)
		}
		if n := strings.Count(log, "denied"); n < 3 {
			return fmt.Errorf("%d denied writes logged, want 3", n)
		}
		return nil
	})
	for _, tt := range tests {
		report(t, "security", "admin API: "+tt.name, fmt.Sprintf("%d, nothing changed, attempt logged", tt.want), 0)
	}
}

// TestReliabilityTLS: with TLS configured, plaintext admin and xDS
// connections are refused and TLS ones are served.
func TestReliabilityTLS(t *testing.T) {
	dir := t.TempDir()
	ca := mtlstest.NewCA(t, "allotd CA")
	certFile, keyFile := ca.Server(t).Write(t, dir, "allotd")
	pool := ca.Pool()
	s := startSystem(t)
	s.allotd.MustTerminate(t)
	bin := harness.MustBuild(t, "./control-plane/cmd/allotd")
	admin := fmt.Sprintf("127.0.0.1:%d", s.adminPort)
	xdsAddr := fmt.Sprintf("127.0.0.1:%d", s.xdsPort)
	harness.MustLaunch(t, "allotd-tls", exec.Command(bin, "-admin-addr", admin, "-xds-addr", xdsAddr, "-db", s.dbPath,
		"-tokens", s.tokenFile, "-wasm-path", s.wasm, "-tls-cert", certFile, "-tls-key", keyFile))
	tlsClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	harness.MustEventually(t, 15*time.Second, func() error {
		resp, err := tlsClient.Get("https://" + admin + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("healthz over TLS: %d", resp.StatusCode)
		}
		return nil
	})

	// Plaintext HTTP to the admin listener is not served.
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + admin + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plaintext HTTP was served by a TLS admin listener")
		}
	}
	// Plaintext gRPC (xDS) is refused; TLS gRPC works.
	stream := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(xdsAddr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		if err := ads.Send(&discoveryv3.DiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig", ResourceNames: []string{"allot"}}); err != nil {
			return err
		}
		_, err = ads.Recv()
		return err
	}
	if err := stream(insecure.NewCredentials()); err == nil {
		t.Fatal("plaintext xDS stream was served by a TLS listener")
	}
	if err := stream(credentials.NewTLS(&tls.Config{RootCAs: pool})); err != nil {
		t.Fatalf("xDS over TLS: %v", err)
	}
	report(t, "security", "TLS configured: plaintext admin HTTP and plaintext xDS (gRPC)", "refused; the same calls over TLS are served", 0)
}
