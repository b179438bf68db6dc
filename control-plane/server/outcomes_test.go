package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	collectorv1 "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/control-plane/mtls/mtlstest"
	"github.com/allotmesh/allot/control-plane/outcomes"
	"github.com/allotmesh/allot/filter/wire"
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

// deltas is one export of delta sums.
func deltas(vals map[string]int64) *collectorv1.ExportMetricsServiceRequest {
	var ms []*metricsv1.Metric
	for n, v := range vals {
		ms = append(ms, &metricsv1.Metric{Name: n, Data: &metricsv1.Metric_Sum{Sum: &metricsv1.Sum{IsMonotonic: true,
			AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA,
			DataPoints:             []*metricsv1.NumberDataPoint{{Value: &metricsv1.NumberDataPoint_AsInt{AsInt: v}}}}}})
	}
	return &collectorv1.ExportMetricsServiceRequest{ResourceMetrics: []*metricsv1.ResourceMetrics{{
		ScopeMetrics: []*metricsv1.ScopeMetrics{{Metrics: ms}}}}}
}

// TestOutcomesSink: allotd serves OTLP's MetricsService on the xDS
// listener; the outcome stats a proxy that applied the configuration
// exports on its xDS connection are summed into GET
// /v1/experiments/{key}/outcomes and allot_outcome_requests_total, the
// rest are dropped and counted, and an export on a connection no proxy
// identified is refused.
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

	name := func(v int, class string) string { return outcomeStat("checkout", 1, v, class) }
	sink := collectorv1.NewMetricsServiceClient(p.conn)
	for _, req := range []*collectorv1.ExportMetricsServiceRequest{
		deltas(map[string]int64{name(0, "2xx"): 8, name(1, "5xx"): 2, "cluster.shop.upstream_rq_total": 10}),
		deltas(map[string]int64{name(1, "2xx"): 6}),
	} {
		if _, err := sink.Export(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	}
	// A connection with no xDS stream is no proxy's: refused.
	strangerConn, ctx := dial(t, a.XDS.String())
	if _, err := collectorv1.NewMetricsServiceClient(strangerConn).Export(ctx, deltas(map[string]int64{name(0, "2xx"): 100})); status.Code(err) != codes.Unauthenticated {
		t.Errorf("an export on a connection without an xDS stream: %v, want Unauthenticated", err)
	}
	// A proxy that has not applied its configuration reports under the
	// revisions its stats name: counted.
	late := connectProxy(t, a.XDS.String(), "p2", "no-such-artifact") // unserved: never applies
	eventually(t, 5*time.Second, "p2 tracked", func() error {
		if _, body := adminCall(t, a, "GET", "/v1/rollout", ""); !strings.Contains(body, `"p2"`) {
			return fmt.Errorf("rollout %s", body)
		}
		return nil
	})
	if _, err := collectorv1.NewMetricsServiceClient(late.conn).Export(t.Context(), deltas(map[string]int64{name(0, "2xx"): 100})); err != nil {
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
		if tot := rep.GetTotal(); len(tot) != 2 || tot[0].GetRequests() != 108 || tot[1].GetRequests() != 8 || tot[1].GetErrorRate() != 0.25 ||
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
			`allot_outcome_requests_total{class="2xx",experiment="checkout",revision="` + rev + `",variation="0"} 108`,
			`allot_outcomes_dropped_total{reason="other_stat"} 1`,
			`allot_outcomes_dropped_total{reason="identity"} 1`,
			`allot_outcomes_messages_total 4`,
		} {
			if !strings.Contains(body, want) {
				return fmt.Errorf("no %s", want)
			}
		}
		return nil
	})
	// One proxy makes at most outcomes.MaxExportsPerSecond exports a
	// second: a burst of twice as many sees some refused.
	refused := 0
	for range 2 * outcomes.MaxExportsPerSecond {
		if _, err := sink.Export(t.Context(), deltas(nil)); status.Code(err) == codes.ResourceExhausted {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if refused == 0 {
		t.Errorf("%d exports in a burst: none refused", 2*outcomes.MaxExportsPerSecond)
	}
	// An export over outcomes.MaxPointsPerExport is refused.
	big := map[string]int64{}
	for i := range outcomes.MaxPointsPerExport + 1 {
		big[fmt.Sprintf("s%d", i)] = 1
	}
	eventually(t, 5*time.Second, "an export over the points limit refused", func() error {
		_, err := sink.Export(t.Context(), deltas(big))
		if !strings.Contains(fmt.Sprint(err), "data points, limit") {
			return fmt.Errorf("an export of %d points: %v, want ResourceExhausted naming the limit", len(big), err)
		}
		return nil
	})

	// A connection whose streams name two nodes is no one proxy's: its
	// exports are refused.
	other, err := discoveryv3.NewAggregatedDiscoveryServiceClient(p.conn).StreamAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "p3", Cluster: "shop"},
		TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "exports on a connection of two nodes refused", func() error {
		if _, err := sink.Export(t.Context(), deltas(nil)); status.Code(err) != codes.Unauthenticated {
			return fmt.Errorf("an export on a connection of p1 and p3: %v, want Unauthenticated", err)
		}
		return nil
	})

	// The same through the gRPC admin API.
	conn, err := grpc.NewClient(a.Admin.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+testToken)
	o, err := adminv1grpc.NewAdminServiceClient(conn).GetOutcomes(mctx, &adminv1.GetOutcomesRequest{Key: "checkout"})
	if err != nil || len(o.GetTotal()) != 2 || o.GetTotal()[1].GetRequests() != 8 || o.GetMinutes() != 5 {
		t.Errorf("GetOutcomes: %v, %v", o, err)
	}
	if _, err := adminv1grpc.NewAdminServiceClient(conn).GetOutcomes(mctx, &adminv1.GetOutcomesRequest{Key: "nope"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetOutcomes of an unobserved experiment: %v, want NotFound", err)
	}
	// A message over the listener's 1 MiB is refused.
	if _, err := sink.Export(t.Context(), deltas(map[string]int64{strings.Repeat("x", 1<<20): 1})); status.Code(err) != codes.ResourceExhausted {
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

// TestOutcomesSinkMutualTLS: with client certificates required, an export
// counts only on a connection whose xDS stream the certificate's identity
// was allowed: a proxy that may not subscribe as its cluster has no
// stream, so its exports are refused too.
func TestOutcomesSinkMutualTLS(t *testing.T) {
	m := startMutualTLS(t)
	// asProxy connects with checkout's certificate and opens an ADS stream
	// as node of cluster, returning the connection and the stream's first
	// answer's error (the configuration, or the refusal).
	asProxy := func(t *testing.T, node, cluster string) (*grpc.ClientConn, error) {
		t.Helper()
		conn := m.dial(t, "spiffe://allot.test/cluster/checkout")
		ads, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if err := ads.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: node, Cluster: cluster},
			TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}}); err != nil {
			t.Fatal(err)
		}
		_, err = ads.Recv()
		return conn, err
	}
	export := func(t *testing.T, conn *grpc.ClientConn) error {
		_, err := collectorv1.NewMetricsServiceClient(conn).Export(t.Context(), deltas(map[string]int64{
			outcomeStat("checkout", 1, 0, "2xx"): 1}))
		return err
	}
	for _, tt := range []struct {
		name, cluster string
		want          codes.Code
	}{
		{"own cluster", "checkout", codes.OK},
		{"another cluster", "payments", codes.Unauthenticated},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn, recvErr := asProxy(t, "n1", tt.cluster)
			if tt.want == codes.OK && recvErr != nil {
				t.Fatalf("xDS as cluster %s: %v", tt.cluster, recvErr)
			}
			if err := export(t, conn); status.Code(err) != tt.want {
				t.Errorf("an export as cluster %s: %v, want code %v", tt.cluster, err, tt.want)
			}
		})
	}

	// A reload that removes the proxies' CA revokes their certificates: an
	// export on a connection whose xDS stream was authorized before is
	// refused at once, before that stream's next check.
	conn, err := asProxy(t, "n2", "checkout")
	if err != nil {
		t.Fatal(err)
	}
	if err := export(t, conn); err != nil {
		t.Fatalf("an export before the revocation: %v", err)
	}
	mtlstest.WriteFile(t, m.files.ClientCA, mtlstest.NewCA(t, "others").PEM)
	if err := m.r.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := export(t, conn); status.Code(err) != codes.PermissionDenied {
		t.Errorf("an export after the proxies' CA was removed: %v, want PermissionDenied", err)
	}
}

// outcomeStat is the full Envoy name of the counter of class of variation v
// of revision rev of experiment key, as the sink exports it.
func outcomeStat(key string, rev int64, v int, class string) string {
	for c := range wire.NumClasses {
		if wire.ClassName(c) == class {
			return wire.StatName(wire.OutcomeMetric(key, rev, v, c))
		}
	}
	panic("no outcome class " + class)
}
