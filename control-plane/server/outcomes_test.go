package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	metricsv3 "github.com/envoyproxy/go-control-plane/envoy/service/metrics/v3"
	clientmodel "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/allotmesh/allot/control-plane/mtls"
	"github.com/allotmesh/allot/control-plane/mtls/mtlstest"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	"github.com/allotmesh/allot/proto/allot/admin/v1/adminv1grpc"
)

// adminCall sends an admin API request with the test token and returns
// the status and body.
func adminCall(t *testing.T, a Addrs, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+a.Admin.String()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func deltas(vals map[string]float64) []*clientmodel.MetricFamily {
	var fams []*clientmodel.MetricFamily
	for n, v := range vals {
		fams = append(fams, &clientmodel.MetricFamily{Name: proto.String(n), Type: clientmodel.MetricType_COUNTER.Enum(),
			Metric: []*clientmodel.Metric{{Counter: &clientmodel.Counter{Value: proto.Float64(v)}}}})
	}
	return fams
}

// metricsStream opens a MetricsService stream to addr.
func metricsStream(t *testing.T, addr string) grpc.ClientStreamingClient[metricsv3.StreamMetricsMessage, metricsv3.StreamMetricsResponse] {
	t.Helper()
	conn, ctx := dial(t, addr)
	st, err := metricsv3.NewMetricsServiceClient(conn).StreamMetrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestOutcomesSink: allotd serves Envoy's MetricsService on the xDS
// listener; the outcome stats a proxy that applied the configuration
// sends are summed into GET /v1/experiments/{key}/outcomes and
// allot_outcome_requests_total, the rest are dropped and counted, and a
// stream that names no node is refused.
func TestOutcomesSink(t *testing.T) {
	a := start(t)
	if code, body := adminCall(t, a, "POST", "/v1/experiments", `{"key":"checkout","variations":["a","b"],"observe":true}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	p := connectProxy(t, a.XDS.String(), "p1", nil) // cluster shop, ACKs everything
	p.next(t)
	eventually(t, 5*time.Second, "p1 applied", func() error { // outcomes count from the ACK on
		if _, body := adminCall(t, a, "GET", "/v1/rollout", ""); !strings.Contains(body, `"state":"applied"`) {
			return fmt.Errorf("rollout %s", body)
		}
		return nil
	})

	name := func(v int, class string) string {
		return fmt.Sprintf("wasmcustom.allot.experiment.checkout.variation.%d.response.%s", v, class)
	}
	st := metricsStream(t, a.XDS.String())
	id := &metricsv3.StreamMetricsMessage_Identifier{Node: &corev3.Node{Id: "p1", Cluster: "shop"}}
	if err := st.Send(&metricsv3.StreamMetricsMessage{Identifier: id, EnvoyMetrics: deltas(map[string]float64{
		name(0, "2xx"): 8, name(1, "5xx"): 2, "cluster.shop.upstream_rq_total": 10})}); err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&metricsv3.StreamMetricsMessage{EnvoyMetrics: deltas(map[string]float64{name(1, "2xx"): 6})}); err != nil {
		t.Fatal(err)
	}
	// A node with no xDS stream here has applied nothing: dropped.
	stranger := metricsStream(t, a.XDS.String())
	if err := stranger.Send(&metricsv3.StreamMetricsMessage{Identifier: &metricsv3.StreamMetricsMessage_Identifier{
		Node: &corev3.Node{Id: "stranger", Cluster: "shop"}}, EnvoyMetrics: deltas(map[string]float64{name(0, "2xx"): 100})}); err != nil {
		t.Fatal(err)
	}

	var rev string // the assignment revision, a label of allot_outcome_requests_total
	eventually(t, 5*time.Second, "outcomes summed", func() error {
		code, body := adminCall(t, a, "GET", "/v1/experiments/checkout/outcomes?minutes=1", "")
		if code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		rep := &adminv1.Outcomes{}
		if err := protojson.Unmarshal([]byte(body), rep); err != nil {
			return err
		}
		if tot := rep.GetTotal(); len(tot) != 2 || tot[0].GetRequests() != 8 || tot[1].GetRequests() != 8 || tot[1].GetErrorRate() != 0.25 ||
			rep.GetWindow()[1].GetResponses()["5xx"] != 2 {
			return fmt.Errorf("report %s", body)
		}
		rev = rep.GetRevision()
		return nil
	})
	eventually(t, 5*time.Second, "metrics", func() error {
		_, body := get(t, http.DefaultClient, "http://"+a.Admin.String()+"/metrics")
		for _, want := range []string{
			`allot_outcome_requests_total{class="5xx",experiment="checkout",revision="` + rev + `",variation="1"} 2`,
			`allot_outcome_requests_total{class="2xx",experiment="checkout",revision="` + rev + `",variation="0"} 8`,
			`allot_outcomes_dropped_total{reason="other_stat"} 1`,
			`allot_outcomes_dropped_total{reason="not_applied"} 1`,
		} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("no %s", want)
			}
		}
		return nil
	})
	// A node has at most outcomes.MaxStreamsPerProxy (2) metrics streams:
	// with st and second open, a third is refused once second is counted.
	second := metricsStream(t, a.XDS.String())
	if err := second.Send(&metricsv3.StreamMetricsMessage{Identifier: id}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a third stream of p1 refused", func() error {
		third := metricsStream(t, a.XDS.String())
		if err := third.Send(&metricsv3.StreamMetricsMessage{Identifier: id, EnvoyMetrics: deltas(map[string]float64{"cluster.shop.upstream_rq_total": 1})}); err != nil {
			return err
		}
		if _, err := third.CloseAndRecv(); status.Code(err) != codes.ResourceExhausted {
			return fmt.Errorf("a third stream of one node: %v, want ResourceExhausted", err)
		}
		_, body := get(t, http.DefaultClient, "http://"+a.Admin.String()+"/metrics")
		if !strings.Contains(body, `allot_outcomes_dropped_total{reason="streams"} `) || strings.Contains(body, `allot_outcomes_dropped_total{reason="streams"} 0`) {
			return fmt.Errorf("refused stream not counted")
		}
		return nil
	})
	if _, err := second.CloseAndRecv(); err != nil {
		t.Errorf("close: %v", err)
	}
	if _, err := st.CloseAndRecv(); err != nil {
		t.Errorf("close: %v", err)
	}

	// The same through the gRPC admin API.
	conn, err := grpc.NewClient(a.Admin.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+testToken)
	o, err := adminv1grpc.NewAdminServiceClient(conn).GetOutcomes(ctx, &adminv1.GetOutcomesRequest{Key: "checkout"})
	if err != nil || len(o.GetTotal()) != 2 || o.GetTotal()[1].GetRequests() != 8 || o.GetMinutes() != 5 {
		t.Errorf("GetOutcomes: %v, %v", o, err)
	}
	if _, err := adminv1grpc.NewAdminServiceClient(conn).GetOutcomes(ctx, &adminv1.GetOutcomesRequest{Key: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetOutcomes of an unobserved experiment: %v, want NotFound", err)
	}

	anonymous := metricsStream(t, a.XDS.String())
	if err := anonymous.Send(&metricsv3.StreamMetricsMessage{EnvoyMetrics: deltas(map[string]float64{name(0, "2xx"): 1})}); err != nil {
		t.Fatal(err)
	}
	if _, err := anonymous.CloseAndRecv(); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a stream naming no node: %v, want InvalidArgument", err)
	}
	// A message over the listener's 1 MiB ends the stream.
	huge := metricsStream(t, a.XDS.String())
	huge.Send(&metricsv3.StreamMetricsMessage{Identifier: id, EnvoyMetrics: deltas(map[string]float64{strings.Repeat("x", 1<<20): 1})})
	if _, err := huge.CloseAndRecv(); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("a message over 1 MiB: %v, want ResourceExhausted", err)
	}
	for path, want := range map[string]int{
		"/v1/experiments/nope/outcomes":                http.StatusNotFound,
		"/v1/experiments/checkout/outcomes?minutes=-1": http.StatusBadRequest,
		"/v1/experiments/checkout/outcomes?minutes=61": http.StatusBadRequest,
		"/v1/experiments/checkout/outcomes?minutes=x":  http.StatusBadRequest,
	} {
		if code, body := adminCall(t, a, "GET", path, ""); code != want {
			t.Errorf("GET %s: %d %s, want %d", path, code, body, want)
		}
	}
}

// TestOutcomesSinkMutualTLS: with client certificates required, a metrics
// stream is authorized as an xDS stream is: the node its first message
// names must be one the certificate's identity may be.
func TestOutcomesSinkMutualTLS(t *testing.T) {
	dir := t.TempDir()
	serverCA, proxyCA := mtlstest.NewCA(t, "allotd"), mtlstest.NewCA(t, "proxies")
	files := mtls.Files{ClientCA: filepath.Join(dir, "proxy-ca.pem"), Policy: filepath.Join(dir, "identities.json")}
	files.Cert, files.Key = serverCA.Server(t).Write(t, dir, "server")
	mtlstest.WriteFile(t, files.ClientCA, proxyCA.PEM)
	mtlstest.WriteFile(t, files.Policy, []byte(`{"proxies":[{"identity":"spiffe://allot.test/cluster/{cluster}"}]}`))
	r, err := mtls.Load(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := start(t, func(c *Config) {
		c.TLS, c.XDSTLS, c.XDSStreamInterceptor, c.Collectors = r.AdminTLS(), r.XDSTLS(), r.StreamInterceptor(), r.Collectors()
	})
	checkout := proxyCA.Client(t, "spiffe://allot.test/cluster/checkout").TLS
	for _, tt := range []struct {
		name, cluster string
		want          codes.Code
	}{
		{"own cluster", "checkout", codes.OK},
		{"another cluster", "payments", codes.PermissionDenied},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, err := grpc.NewClient(a.XDS.String(), grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
				RootCAs: serverCA.Pool(), Certificates: []tls.Certificate{checkout}, MinVersion: tls.VersionTLS12})))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			st, err := metricsv3.NewMetricsServiceClient(conn).StreamMetrics(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(&metricsv3.StreamMetricsMessage{Identifier: &metricsv3.StreamMetricsMessage_Identifier{
				Node: &corev3.Node{Id: "n1", Cluster: tt.cluster}}}); err != nil {
				t.Fatal(err)
			}
			if _, err := st.CloseAndRecv(); status.Code(err) != tt.want {
				t.Errorf("as cluster %s: %v, want code %v", tt.cluster, err, tt.want)
			}
		})
	}
}
