package server

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	collectorv1 "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/control-plane/mtls"
	"github.com/allotmesh/allot/control-plane/mtls/mtlstest"
	"github.com/allotmesh/allot/control-plane/outcomes"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// mutualTLS is allotd requiring proxy certificates on its xDS listener
// under the documented policy, spiffe://allot.test/cluster/{cluster} (a
// certificate proves its cluster, not its node ids); its admin listener
// is plaintext.
type mutualTLS struct {
	a                 Addrs
	files             mtls.Files
	r                 *mtls.Reloader
	serverCA, proxyCA *mtlstest.CA
}

func startMutualTLS(t *testing.T) *mutualTLS {
	t.Helper()
	dir := t.TempDir()
	m := &mutualTLS{serverCA: mtlstest.NewCA(t, "allotd"), proxyCA: mtlstest.NewCA(t, "proxies"),
		files: mtls.Files{ClientCA: filepath.Join(dir, "proxy-ca.pem"), Policy: filepath.Join(dir, "identities.json")}}
	m.files.Cert, m.files.Key = m.serverCA.Server(t).Write(t, dir, "server")
	mtlstest.WriteFile(t, m.files.ClientCA, m.proxyCA.PEM)
	mtlstest.WriteFile(t, m.files.Policy, []byte(`{"proxies":[{"identity":"spiffe://allot.test/cluster/{cluster}"}]}`))
	var err error
	if m.r, err = mtls.Load(m.files, nil); err != nil {
		t.Fatal(err)
	}
	m.a = start(t, func(c *Config) {
		c.XDSTLS, c.XDSStreamInterceptor, c.XDSUnaryInterceptor, c.Collectors = m.r.XDSTLS(), m.r.StreamInterceptor(), m.r.UnaryInterceptor(), m.r.Collectors()
	})
	return m
}

// dial connects to the xDS listener with a certificate for identity,
// until the test ends.
func (m *mutualTLS) dial(t *testing.T, identity string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(m.a.XDS.String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: m.serverCA.Pool(), Certificates: []tls.Certificate{m.proxyCA.Client(t, identity).TLS}, MinVersion: tls.VersionTLS12})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestOutcomesBudgetAcrossClusters (issue #42): a proxy of cluster
// payments, with a valid certificate, subscribes under the node id of
// checkout's proxy b-1 (GET /v1/rollout lists it) and exports as fast as
// it can; none of b-1's flushes is refused, and checkout's outcomes count
// every request b-1 reported. With the export budget keyed by node id,
// the impostor spent b-1's and every one of b-1's flushes was refused.
func TestOutcomesBudgetAcrossClusters(t *testing.T) {
	m := startMutualTLS(t)
	if code, body := adminCall(t, m.a, "POST", "/v1/experiments",
		`{"key":"checkout","variations":["a","b"],"observe":true,"services":["checkout"]}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	b1 := subscribeOn(t, t.Context(), m.dial(t, "spiffe://allot.test/cluster/checkout"), "b-1", "checkout", nil)
	b1.next(t)
	impostor := subscribeOn(t, t.Context(), m.dial(t, "spiffe://allot.test/cluster/payments"), "b-1", "payments", nil)
	impostor.next(t)
	eventually(t, 5*time.Second, "both b-1 streams applied", func() error {
		if _, body := adminCall(t, m.a, "GET", "/v1/rollout", ""); strings.Count(body, `"state":"applied"`) != 2 {
			return fmt.Errorf("rollout %s", body)
		}
		return nil
	})

	// The impostor exports without pause until b-1 has flushed, saying
	// each time it is refused (over its budget).
	var wg sync.WaitGroup
	stop, over := make(chan struct{}), make(chan struct{}, 1)
	var admitted, refused int
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt()
	wg.Add(1)
	go func() {
		defer wg.Done()
		sink := collectorv1.NewMetricsServiceClient(impostor.conn)
		for {
			select {
			case <-stop:
				return
			default:
			}
			switch _, err := sink.Export(t.Context(), deltas(nil)); status.Code(err) {
			case codes.OK:
				admitted++
			case codes.ResourceExhausted:
				refused++
				select {
				case over <- struct{}{}:
				default:
				}
			default:
				t.Errorf("the impostor's export: %v", err)
				return
			}
		}
	}()
	// b-1 flushes five times, 200 requests each, each flush just after an
	// export of the impostor's was refused: within a second in which it
	// spent a whole budget.
	const flushes, each = 5, 200
	var failed []string
	sink := collectorv1.NewMetricsServiceClient(b1.conn)
	for i := range flushes {
		select {
		case <-over: // one from before this flush's wait
		default:
		}
		select {
		case <-over:
		case <-time.After(5 * time.Second):
			t.Fatalf("the impostor was not refused within 5 s before flush %d: it never spends its budget (%d a second)",
				i+1, outcomes.MaxExportsPerSecond)
		}
		if _, err := sink.Export(t.Context(), deltas(map[string]int64{
			outcomeStat("checkout", 1, 0, "2xx"): each})); err != nil {
			failed = append(failed, fmt.Sprintf("flush %d: %v", i+1, err))
		}
	}
	halt()
	if len(failed) > 0 {
		t.Errorf("%d of b-1's %d flushes refused while the impostor of cluster payments exported under its node id:\n%s",
			len(failed), flushes, strings.Join(failed, "\n"))
	}
	code, body := adminCall(t, m.a, "GET", "/v1/experiments/checkout/outcomes?minutes=1", "")
	rep := &adminv1.Outcomes{}
	if err := protojson.Unmarshal([]byte(body), rep); code != http.StatusOK || err != nil {
		t.Fatalf("outcomes: %d %s (%v)", code, body, err)
	}
	if got := rep.GetTotal()[0].GetRequests(); got != flushes*each {
		t.Errorf("checkout: %d of the %d requests b-1 reported counted", got, flushes*each)
	}
	t.Logf("impostor: %d exports admitted, %d refused", admitted, refused)
}
