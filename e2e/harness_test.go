//go:build e2e

package e2e_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/internal/harness"
)

// proxyBootstrap is a minimal Envoy bootstrap: admin on 9901, a listener on
// 10000 routing everything to a static cluster at 127.0.0.1:8081. The tests
// move all three ports with harness.RenderBootstrap.
const proxyBootstrap = `admin:
  address:
    socket_address: { address: 127.0.0.1, port_value: 9901 }
static_resources:
  listeners:
  - name: ingress
    address:
      socket_address: { address: 127.0.0.1, port_value: 10000 }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress_http
          route_config:
            name: local
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                route: { cluster: echo }
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: echo
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: echo
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: { address: 127.0.0.1, port_value: 8081 }
`

func TestEnvoyProxiesToEcho(t *testing.T) {
	tests := []struct {
		name string
		// fixedAdmin passes the admin port to StartEnvoy; otherwise the
		// bootstrap binds port 0 and the harness reads --admin-address-path.
		fixedAdmin bool
	}{
		{name: "fixed admin port", fixedAdmin: true},
		{name: "admin port from address file", fixedAdmin: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			echoAddr := harness.MustStartEcho(t)
			_, echoPort, _ := strings.Cut(echoAddr, ":")
			listenPort := harness.MustFreePort(t)
			adminPort := 0
			if tt.fixedAdmin {
				adminPort = harness.MustFreePort(t)
			}
			bootstrap := harness.MustRenderBootstrap(t, harness.MustWriteFile(t, "envoy.yaml", proxyBootstrap), map[string]string{
				"port_value: 9901":  fmt.Sprintf("port_value: %d", adminPort),
				"port_value: 10000": fmt.Sprintf("port_value: %d", listenPort),
				"port_value: 8081":  "port_value: " + echoPort,
			})

			envoy := harness.MustLaunchEnvoy(t, harness.EnvoyOptions{Bootstrap: bootstrap, AdminPort: adminPort})
			if tt.fixedAdmin && envoy.AdminURL() != fmt.Sprintf("http://127.0.0.1:%d", adminPort) {
				t.Errorf("AdminURL() = %s, want port %d", envoy.AdminURL(), adminPort)
			}

			url := fmt.Sprintf("http://127.0.0.1:%d/hello?x=1", listenPort)
			var got harness.EchoResponse
			harness.MustEventually(t, 10*time.Second, func() error {
				var err error
				got, err = harness.GetEcho(url, http.Header{
					"X-Allot-Test": {"through-envoy"},
					"Host":         {"svc.test"},
				})
				return err
			})
			if v := got.Header("x-allot-test"); len(v) != 1 || v[0] != "through-envoy" {
				t.Errorf("upstream saw x-allot-test = %q, want [through-envoy]", v)
			}
			if got.Header("X-Request-Id") == nil || got.Header("x-envoy-expected-rq-timeout-ms") == nil {
				t.Errorf("request did not pass through Envoy; upstream headers: %v", got.Headers)
			}
			if got.Path != "/hello?x=1" || got.Host != "svc.test" || got.Method != "GET" {
				t.Errorf("upstream saw %s %s host %s", got.Method, got.Path, got.Host)
			}
			if s := got.ResponseHeader.Get("Server"); s != "envoy" {
				t.Errorf("response server header = %q, want envoy", s)
			}

			if v, ok := envoy.MustStat(t, "server.live"); !ok || v != 1 {
				t.Errorf("server.live = %d (present %v), want 1", v, ok)
			}
			harness.MustEventually(t, 5*time.Second, func() error {
				if v := envoy.MustStats(t)["http.ingress_http.downstream_rq_2xx"]; v < 1 {
					return fmt.Errorf("http.ingress_http.downstream_rq_2xx = %d, want >= 1", v)
				}
				return nil
			})
			if dump := envoy.MustConfigDump(t); !bytes.Contains(dump, []byte(`"ingress_http"`)) {
				t.Errorf("config dump lacks the ingress_http listener (%d bytes)", len(dump))
			}
			if runtime.GOOS == "linux" {
				if rss := envoy.MustRSS(t); rss < 1<<20 {
					t.Errorf("RSS = %d bytes, want at least 1 MiB", rss)
				}
			}

			envoy.MustTerminate(t)
			if err := envoy.Wait(); err != nil {
				t.Errorf("envoy exit after SIGTERM: %v", err)
			}
			if _, err := http.Get(envoy.AdminURL() + "/ready"); err == nil {
				t.Error("admin still answers after Stop")
			}
		})
	}
}

func TestProcessEchoBinary(t *testing.T) {
	bin := harness.MustBuild(t, "./internal/echo/cmd/allot-echo")
	if again := harness.MustBuild(t, "./internal/echo/cmd/allot-echo"); again != bin {
		t.Errorf("second Build = %s, want cached %s", again, bin)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", harness.MustFreePort(t))
	p := harness.MustLaunch(t, "allot-echo", exec.Command(bin, "-addr", addr))
	p.MustWaitHTTP(t, "http://"+addr+"/healthz", 10*time.Second)

	got := harness.MustGetEcho(t, "http://"+addr+"/x", http.Header{"X-Experiment-Demo": {"b"}})
	if v := got.Header("x-experiment-demo"); len(v) != 1 || v[0] != "b" {
		t.Errorf("x-experiment-demo = %q, want [b]", v)
	}

	p.MustTerminate(t)
	if err := p.Wait(); err != nil {
		t.Errorf("allot-echo exit after SIGTERM: %v (want a graceful exit 0)\n%s", err, p.MustLog(t))
	}
	if log := p.MustLog(t); !strings.Contains(log, "listening on "+addr) {
		t.Errorf("log = %q, want the listen address", log)
	}
}

func TestProcessKill(t *testing.T) {
	p := harness.MustLaunch(t, "sleep", exec.Command("sleep", "60"))
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if !p.Exited() || p.Wait() == nil {
		t.Errorf("after Kill: exited %v, wait error %v; want exited with a signal error", p.Exited(), p.Wait())
	}
}

func TestBuildWasm(t *testing.T) {
	wasm := harness.MustBuildWasm(t, "./e2e/testdata/wasmnop")
	if !strings.HasSuffix(wasm, ".wasm") {
		t.Errorf("BuildWasm = %s, want a .wasm path", wasm)
	}
	b, err := os.ReadFile(wasm)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x00asm")) {
		t.Errorf("%s does not start with the wasm magic", wasm)
	}
}
