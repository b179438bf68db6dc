//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/control-plane/outcomes"
	"github.com/allotmesh/allot/internal/harness"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// TestOutcomesLargestFlush: Envoy sends a flush's exports at once, and a
// flush split into more exports than allotd lets one connection carry
// (xds.MaxStreamsPerConnection, 16, the proxy's xDS stream included) would
// go in part over a second HTTP/2 connection, where no xDS stream is open
// and allotd refuses them (identity). The bootstraps' 3,500 points an
// export split a proxy's largest flush (outcomes.MaxFlushPoints) into
// outcomes.MaxFlushExports; here 3 observed experiments of 8 variations
// (168 points) at 13 points an export make as many exports, and every
// request is counted, none refused.
func TestOutcomesLargestFlush(t *testing.T) {
	s := startSystemFor(t, wasmArtifact)
	_, echoPort, _ := splitHostPort(s.echoAddr)
	replace := sinkEverySecond()
	replace["port_value: 8081"] = "port_value: " + echoPort
	if outcomes.MaxFlushExports != 13 {
		t.Fatalf("outcomes.MaxFlushExports %d: this test's 168 points at 13 an export make 13", outcomes.MaxFlushExports)
	}
	replace["max_data_points_per_request: 3500"] = "max_data_points_per_request: 13"
	p := startEnvoy(t, s.art.sidecar, s.xdsPort, s.filter(), s.art.env(), "many-1", "shop", replace)
	s.waitConnected("many-1")

	keys := []string{"many-a", "many-b", "many-c"}
	variations := []string{"v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7"}
	for _, key := range keys {
		var w waitedWrite
		s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s",
			map[string]any{"key": key, "variations": variations, "observe": true}, &w)
		if !w.Rollout.appliedBy(1) {
			t.Fatalf("create %s: %+v", key, w.Rollout)
		}
	}
	const units = 200
	for i := range units {
		if _, err := p.get(map[string][]string{"x-user-id": {"user-" + strconv.Itoa(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	// Every request was assigned a variation of every experiment: each
	// experiment's total is units once every flush arrived.
	var last string
	err := harness.Eventually(context.Background(), 20*time.Second, func() error {
		for _, key := range keys {
			var raw json.RawMessage
			s.mustAPI(http.StatusOK, "GET", "/v1/experiments/"+key+"/outcomes", nil, &raw)
			var rep adminv1.Outcomes
			if err := protojson.Unmarshal(raw, &rep); err != nil {
				return err
			}
			var n int64
			for _, v := range rep.GetTotal() {
				n += v.GetRequests()
			}
			if n != units {
				last = fmt.Sprintf("%s: %d requests counted, %d sent", key, n, units)
				return fmt.Errorf("%s", last)
			}
		}
		return nil
	})
	identity := metricValue(t, s, `allot_outcomes_dropped_total{reason="identity"}`)
	msgs := metricValue(t, s, "allot_outcomes_messages_total")
	if err != nil || identity != 0 {
		t.Errorf("%v; %.0f data points refused for identity (no xDS stream on the export's connection) of %.0f exports", last, identity, msgs)
	}
}
