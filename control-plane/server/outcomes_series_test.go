package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	collectorv1 "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	"github.com/allotmesh/allot/proto/allot/admin/v1/adminv1grpc"
)

// TestOutcomesSeries: GET /v1/experiments/{key}/outcomes and gRPC
// GetOutcomes return the window minute by minute — consecutive whole
// minutes from the revision's to the current one, each with every
// variation — and its requests and error rates are what a proxy sent.
// The HTTP answer is read as plain JSON, with the field names a client
// (the console) reads.
func TestOutcomesSeries(t *testing.T) {
	a := start(t)
	if code, body := adminCall(t, a, "POST", "/v1/experiments", `{"key":"checkout","variations":["a","b"],"observe":true}`); code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, body)
	}
	p := connectProxy(t, a.XDS.String(), "p1", nil)
	p.next(t)
	eventually(t, 5*time.Second, "p1 applied", func() error {
		if _, body := adminCall(t, a, "GET", "/v1/rollout", ""); !strings.Contains(body, `"state":"applied"`) {
			return fmt.Errorf("rollout %s", body)
		}
		return nil
	})
	name := func(v int, class string) string { return outcomeStat("checkout", 1, v, class) }
	if _, err := collectorv1.NewMetricsServiceClient(p.conn).Export(t.Context(),
		deltas(map[string]int64{name(0, "2xx"): 9, name(1, "2xx"): 3, name(1, "5xx"): 1})); err != nil {
		t.Fatal(err)
	}

	// The JSON a client reads: proto3 JSON, int64 as strings, zeros left out.
	type minute struct {
		Start      time.Time `json:"start"`
		Variations []struct {
			Variation int     `json:"variation"`
			Requests  string  `json:"requests"`
			ErrorRate float64 `json:"errorRate"`
		} `json:"variations"`
	}
	var series []minute
	eventually(t, 5*time.Second, "the requests in the series", func() error {
		code, body := adminCall(t, a, "GET", "/v1/experiments/checkout/outcomes?minutes=3", "")
		if code != http.StatusOK {
			return fmt.Errorf("%d %s", code, body)
		}
		var o struct {
			Series []minute `json:"series"`
		}
		if err := json.Unmarshal([]byte(body), &o); err != nil {
			return err
		}
		series = o.Series
		var got [2]string
		for _, m := range o.Series {
			for _, v := range m.Variations {
				if v.Requests != "" {
					got[v.Variation] += v.Requests + fmt.Sprintf("@%g ", v.ErrorRate)
				}
			}
		}
		if got != [2]string{"9@0 ", "4@0.25 "} {
			return fmt.Errorf("requests@error rate per variation %q, want one minute with 9@0 and 4@0.25: %s", got, body)
		}
		return nil
	})
	now := time.Now().UTC().Truncate(time.Minute)
	if len(series) == 0 || len(series) > 3 || !series[len(series)-1].Start.Equal(now) && !series[len(series)-1].Start.Equal(now.Add(-time.Minute)) {
		t.Fatalf("series %+v: want at most 3 minutes, the last the current one (%v)", series, now)
	}
	for i, m := range series {
		if len(m.Variations) != 2 || m.Variations[1].Variation != 1 {
			t.Errorf("minute %v: variations %+v, want both", m.Start, m.Variations)
		}
		if i > 0 && !m.Start.Equal(series[i-1].Start.Add(time.Minute)) {
			t.Errorf("minute %d starts at %v, after %v", i, m.Start, series[i-1].Start)
		}
	}

	conn, err := grpc.NewClient(a.Admin.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+testToken)
	o, err := adminv1grpc.NewAdminServiceClient(conn).GetOutcomes(ctx, &adminv1.GetOutcomesRequest{Key: "checkout", Minutes: 3})
	if err != nil {
		t.Fatal(err)
	}
	var requests [2]int64
	for _, m := range o.GetSeries() {
		if len(m.GetVariations()) != 2 || m.GetStart().AsTime().Second() != 0 {
			t.Errorf("gRPC minute %v: %d variations", m.GetStart().AsTime(), len(m.GetVariations()))
		}
		for _, v := range m.GetVariations() {
			requests[v.GetVariation()] += v.GetRequests()
		}
	}
	if n := len(o.GetSeries()); n == 0 || n > 3 || requests != [2]int64{9, 4} {
		t.Errorf("gRPC series: %d minutes, requests %v, want 1 to 3 minutes, 9 and 4", n, requests)
	}
}
