//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/allotmesh/allot/e2e/harness"
)

// adminToken is the admin token every e2e system is started with.
const adminToken = "e2e-admin-token-0123456789"

// system is one running Allot deployment: allotd on a fresh bbolt file, the
// echo upstream, and one sidecar Envoy per cluster.
type system struct {
	t         *testing.T
	adminURL  string
	xdsPort   int
	wasm      string
	allotd    *harness.Process
	echoAddr  string
	tokenFile string
	dbPath    string
}

// startSystem builds and starts allotd and the echo upstream.
func startSystem(t *testing.T, allotdArgs ...string) *system {
	t.Helper()
	dir := t.TempDir()
	s := &system{t: t, wasm: harness.BuildWasm(t, "./filter"), dbPath: filepath.Join(dir, "allot.db")}
	s.tokenFile = filepath.Join(dir, "tokens.json")
	tokens := fmt.Sprintf(`{"tokens":[{"name":"e2e","role":"admin","token":%q}]}`, adminToken)
	if err := os.WriteFile(s.tokenFile, []byte(tokens), 0o600); err != nil {
		t.Fatal(err)
	}
	s.echoAddr = harness.StartEcho(t)
	s.xdsPort = harness.FreePort(t)
	s.startAllotd(harness.FreePort(t), allotdArgs...)
	return s
}

// startAllotd (re)starts allotd on the system's store and xDS port.
func (s *system) startAllotd(adminPort int, extra ...string) {
	s.t.Helper()
	bin := harness.Build(s.t, "./control-plane/cmd/allotd")
	s.adminURL = fmt.Sprintf("http://127.0.0.1:%d", adminPort)
	args := append([]string{
		"-admin-addr", fmt.Sprintf("127.0.0.1:%d", adminPort),
		"-xds-addr", fmt.Sprintf("127.0.0.1:%d", s.xdsPort),
		"-db", s.dbPath,
		"-tokens", s.tokenFile,
		"-wasm-path", s.wasm,
		"-log-level", "debug",
	}, extra...)
	s.allotd = harness.StartProcess(s.t, "allotd", bin, args...)
	s.allotd.WaitHTTP(s.t, s.adminURL+"/readyz", 15*time.Second)
}

// proxy is one Envoy started from a bootstrap in envoy-configs/.
type proxy struct {
	*harness.Envoy
	URL string // the listener, e.g. http://127.0.0.1:PORT
}

// startSidecar starts Envoy with envoy-configs/sidecar.yaml for cluster.
func (s *system) startSidecar(node, cluster string) *proxy {
	s.t.Helper()
	listen, admin := harness.FreePort(s.t), harness.FreePort(s.t)
	_, echoPort, _ := splitHostPort(s.echoAddr)
	boot := harness.RenderBootstrap(s.t, "envoy-configs/sidecar.yaml", map[string]string{
		"port_value: 10000": fmt.Sprintf("port_value: %d", listen),
		"port_value: 9901":  fmt.Sprintf("port_value: %d", admin),
		"port_value: 18000": fmt.Sprintf("port_value: %d", s.xdsPort),
		"port_value: 8081":  fmt.Sprintf("port_value: %s", echoPort),
		"bin/allot.wasm":    s.wasm,
	})
	e := harness.StartEnvoy(s.t, harness.EnvoyOptions{Bootstrap: boot, AdminPort: admin, Node: node, Cluster: cluster})
	return &proxy{Envoy: e, URL: fmt.Sprintf("http://127.0.0.1:%d", listen)}
}

func splitHostPort(addr string) (string, string, error) {
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[:i], addr[i+1:], nil
		}
	}
	return addr, "", fmt.Errorf("no port in %q", addr)
}

// api calls the admin API with the admin token and decodes a JSON answer
// into out (if non-nil). It returns the status code.
func (s *system) api(method, path string, body any, out any) int {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.adminURL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			s.t.Fatalf("%s %s: decode %s: %v", method, path, b, err)
		}
	}
	if resp.StatusCode >= 300 {
		s.t.Logf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// mustAPI is api that fails the test unless the status is want.
func (s *system) mustAPI(want int, method, path string, body any, out any) {
	s.t.Helper()
	if got := s.api(method, path, body, out); got != want {
		s.t.Fatalf("%s %s: status %d, want %d", method, path, got, want)
	}
}

// get sends one request through a proxy with the given headers.
func (p *proxy) get(headers map[string][]string) (harness.EchoResponse, error) {
	return harness.GetEcho(p.URL+"/", http.Header(headers))
}
