//go:build e2e && reliability

package e2e

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/outcomes"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/internal/harness"
)

// TestReliabilityOutcomesReplicaKill: two allotd replicas on etcd, an Envoy
// on each; once both replicas' figures are published, replica r1 is
// SIGKILLed and its Envoy fails over to r2. The load goes on through both
// Envoys: r2 answers with everything the load generator counted — what
// the dead replica published included —, and folds r1's total into the
// retired record once r1 has been gone for outcomes.FoldAfter (at a
// report or a sweep), leaving r2's and the retired record.
func TestReliabilityOutcomesReplicaKill(t *testing.T) {
	h, proxies := sinkReplicas(t, "kill-out")
	r2 := h.replicas[1]
	g := newLoadGen(t)
	g.load(proxies, 3)
	wantCounts(t, r2, g.sent, g.failed) // r2 has r1's figures: r1 published them

	if err := h.replicas[0].allotd.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Envoy 1 moves to r2 and applies its configuration there: its flushes
	// count again (before, they are dropped as not applied).
	harness.MustEventually(t, leaseTTL+20*time.Second, func() error {
		var ro rolloutJSON
		if code := r2.api("GET", "/v1/rollout", nil, &ro); code != http.StatusOK {
			return fmt.Errorf("GET /v1/rollout: %d", code)
		}
		for _, p := range ro.Proxies {
			if p.NodeID == proxies[0].Node && p.Replica == replicaID(1) && p.State == "applied" {
				return nil
			}
		}
		return fmt.Errorf("Envoy %s not applied on %s: %+v", proxies[0].Node, replicaID(1), ro.Proxies)
	})
	moved := time.Since(killed)
	g.load(proxies, 2)
	rep := wantCounts(t, r2, g.sent, g.failed)
	var reported, sent int64
	for i, v := range []string{"a", "b"} {
		reported += rep.GetTotal()[i].GetRequests()
		sent += g.sent[v]
	}

	// r1's total is folded once it has been gone for FoldAfter: the
	// records of "sunk" are r2's and the retired one.
	db, err := etcd.Open(t.Context(), clientv3.Config{Endpoints: strings.Split(strings.TrimPrefix(h.etcd.storeFlag(), "etcd://"), ",")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var keys []string
	harness.MustEventually(t, outcomes.FoldAfter+outcomes.SweepInterval+10*time.Second, func() error {
		r2.mustAPI(http.StatusOK, "GET", "/v1/experiments/sunk/outcomes", nil, nil) // a report folds too, not only the sweep
		resp, err := db.Client().Get(t.Context(), etcd.DefaultPrefix+"outcomes/t/sunk/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return err
		}
		keys = keys[:0]
		for _, kv := range resp.Kvs {
			keys = append(keys, strings.TrimPrefix(string(kv.Key), etcd.DefaultPrefix+"outcomes/t/sunk/"))
		}
		if !slices.Equal(keys, []string{"%retired", "r2"}) {
			return fmt.Errorf("total records %v, want %%retired and r2", keys)
		}
		return nil
	})
	folded := time.Since(killed)
	after := wantCounts(t, r2, g.sent, g.failed)
	var again int64
	for i := range 2 {
		again += after.GetTotal()[i].GetRequests()
	}
	lost := max(sent-again, 0)
	report(t, "faults", "outcomes of 2 Envoys on 2 allotd replicas on etcd, replica r1 SIGKILLed once its figures were published, its Envoy moved to r2, load before and after",
		fmt.Sprintf("%d of %d requests reported by r2 (%d after r1's total was folded, %.0f s after the kill, leaving records %v); Envoy applied on r2 %.1f s after the kill; %d lost",
			reported, sent, again, folded.Seconds(), keys, moved.Seconds(), lost), int(lost))
}
