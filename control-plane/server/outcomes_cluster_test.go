package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	collectorv1 "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// TestOutcomesOnlyFromProxiesItAppliesTo: an export counts only for the
// experiments the reporting proxy's cluster runs: a proxy of cluster shop
// reporting outcomes of an experiment of cluster checkout-svc only is
// dropped (reason "cluster"), so no proxy can feed, and trip, another
// team's guardrails.
func TestOutcomesOnlyFromProxiesItAppliesTo(t *testing.T) {
	a := start(t)
	for _, doc := range []string{
		`{"key":"mine","variations":["a","b"],"observe":true,"services":["shop"]}`,
		`{"key":"theirs","variations":["a","b"],"observe":true,"services":["checkout-svc"]}`,
	} {
		if code, body := adminCall(t, a, "POST", "/v1/experiments", doc); code != http.StatusCreated {
			t.Fatalf("create: %d %s", code, body)
		}
	}
	p := connectProxy(t, a.XDS.String(), "p1", nil) // cluster shop, ACKs everything
	p.next(t)
	eventually(t, 5*time.Second, "p1 applied", func() error {
		if _, body := adminCall(t, a, "GET", "/v1/rollout", ""); !strings.Contains(body, `"state":"applied"`) {
			return fmt.Errorf("rollout %s", body)
		}
		return nil
	})
	name := func(key string, v int, class string) string { return outcomeStat(key, 1, v, class) }
	if _, err := collectorv1.NewMetricsServiceClient(p.conn).Export(t.Context(),
		deltas(map[string]int64{name("mine", 0, "2xx"): 10, name("theirs", 1, "5xx"): 1000})); err != nil {
		t.Fatal(err)
	}
	requests := func(key string) (int64, error) {
		code, body := adminCall(t, a, "GET", "/v1/experiments/"+key+"/outcomes?minutes=1", "")
		if code != http.StatusOK {
			return 0, fmt.Errorf("%s: %d %s", key, code, body)
		}
		rep := &adminv1.Outcomes{}
		if err := protojson.Unmarshal([]byte(body), rep); err != nil {
			return 0, err
		}
		var n int64
		for _, v := range rep.GetTotal() {
			n += v.GetRequests()
		}
		return n, nil
	}
	eventually(t, 5*time.Second, "the export counted", func() error {
		if n, err := requests("mine"); err != nil || n != 10 {
			return fmt.Errorf("mine: %d requests, %v", n, err)
		}
		return nil
	})
	if n, err := requests("theirs"); err != nil || n != 0 {
		t.Errorf("experiment theirs (services checkout-svc): %d requests counted from proxy p1 of cluster shop (%v), want 0", n, err)
	}
	if _, body := get(t, http.DefaultClient, "http://"+a.Admin.String()+"/metrics"); strings.Contains(body, `allot_outcomes_dropped_total{reason="cluster"} 0`) ||
		!strings.Contains(body, `allot_outcomes_dropped_total{reason="cluster"}`) {
		t.Error(`allot_outcomes_dropped_total{reason="cluster"} did not count the drop`)
	}
}
