//go:build e2e

package e2e

import (
	"fmt"
	"testing"
)

// TestOutcomesAcrossReplicas: two allotd replicas on a real etcd, two real
// Envoys each connected (xDS and OpenTelemetry stat sink) to a different
// replica, load through both: either replica's GET …/outcomes and
// `allotctl outcomes` against either show the mesh's totals, within 5% of
// what the load generator counted — while each replica's own
// allot_outcome_requests_total holds only its Envoy's share.
func TestOutcomesAcrossReplicas(t *testing.T) {
	h, proxies := sinkReplicas(t, "across")
	g := newLoadGen(t)
	g.load(proxies, 4) // each unit through both Envoys: each replica sees about half
	if g.failed["a"] != 0 || g.failed["b"] == 0 {
		t.Fatalf("503s %v of %v", g.failed, g.sent)
	}
	for i, s := range h.replicas {
		rep := wantCounts(t, s, g.sent, g.failed)
		wantCtlCounts(t, s, g.sent, g.failed)
		// What this replica's own proxies reported: a share, not the whole.
		var own float64
		for v := range 2 {
			for _, class := range []string{"2xx", "5xx"} {
				own += metricValue(t, s, fmt.Sprintf(`allot_outcome_requests_total{class=%q,experiment="sunk",revision=%q,variation="%d"}`,
					class, rep.GetRevision(), v))
			}
		}
		all := g.sent["a"] + g.sent["b"]
		if own <= 0 || own >= float64(all) {
			t.Errorf("replica %s counted %v of its own proxies' requests, want a share of %d", replicaID(i), own, all)
		}
	}
}

// sinkReplicas starts 2 allotd replicas on etcd and an Envoy on each
// (node prefix-<i+1>, its sink flushing every second), and creates the
// observed experiment "sunk", waiting until both Envoys applied it.
func sinkReplicas(t *testing.T, prefix string) (*replicated, []*proxy) {
	t.Helper()
	h := startReplicated(t, 2)
	var proxies []*proxy
	for i := range h.replicas {
		node := fmt.Sprintf("%s-%d", prefix, i+1)
		proxies = append(proxies, h.sidecarWith(i, node, "shop", sinkEverySecond()))
		for via := range h.replicas {
			if got := h.replicaOf(via, node); got != replicaID(i) {
				t.Fatalf("replica %s sees Envoy %s on %s, want %s", replicaID(via), node, got, replicaID(i))
			}
		}
	}
	createSunk(t, h.replicas[0], 2)
	return h, proxies
}
