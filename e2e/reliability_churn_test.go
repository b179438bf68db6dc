//go:build e2e && reliability

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metricsv1 "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/outcomes"
	outcomesetcd "github.com/allotmesh/allot/control-plane/outcomes/etcd"
	"github.com/allotmesh/allot/control-plane/rollout"
	rolloutetcd "github.com/allotmesh/allot/control-plane/rollout/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/harness"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// churnPods is how many replica ids TestReliabilityReplicaIDChurn goes
// through, and churnWave how many of them are live at once.
const (
	churnPods = 200
	churnWave = 20
)

// churnFlush is one flush of outcome stats of assignment revision rev of
// experiment key as the sink exports it: per variation, 10 responses,
// errors of them 5xx, all timed under 10 ms.
func churnFlush(key string, rev int64, errors ...uint64) []*metricsv1.Metric {
	var ms []*metricsv1.Metric
	sum := func(name string, n uint64) *metricsv1.Metric {
		return &metricsv1.Metric{Name: wire.StatName(name), Data: &metricsv1.Metric_Sum{Sum: &metricsv1.Sum{IsMonotonic: true,
			AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA,
			DataPoints:             []*metricsv1.NumberDataPoint{{Value: &metricsv1.NumberDataPoint_AsInt{AsInt: int64(n)}}}}}}
	}
	for v, bad := range errors {
		buckets := make([]uint64, len(wire.LatencyBounds)+1)
		buckets[0] = 10
		ms = append(ms, sum(wire.OutcomeMetric(key, rev, v, wire.Class2xx), 10-bad), sum(wire.OutcomeMetric(key, rev, v, wire.Class5xx), bad),
			&metricsv1.Metric{Name: wire.StatName(wire.OutcomeMetric(key, rev, v, wire.Latency)), Data: &metricsv1.Metric_Histogram{Histogram: &metricsv1.Histogram{
				AggregationTemporality: metricsv1.AggregationTemporality_AGGREGATION_TEMPORALITY_DELTA,
				DataPoints:             []*metricsv1.HistogramDataPoint{{Count: 10, ExplicitBounds: wire.LatencyBounds, BucketCounts: buckets}}}}})
	}
	return ms
}

// churnPod is one replica id of the churn, in the test process: it joins
// the mesh registry (live), counts one flush of each experiment (revs:
// their assignment revisions, by key), publishes
// its outcome records to etcd as allotd does (outcomes.Aggregator) and
// leaves. Its clock is outcomes.FoldAfter behind, so that its records are
// as a replica gone for FoldAfter leaves them as soon as it has left,
// without the test waiting that long.
func churnPod(ctx context.Context, db *etcd.Store, id string, revs map[string]int64) error {
	ctx, cancel := context.WithCancel(ctx) // ends the aggregator's watch of the store
	defer cancel()
	reg := rolloutetcd.New(db.Conn(), id, time.Minute)
	if err := reg.Publish(ctx, rollout.Replica{ID: id}, nil); err != nil {
		return err
	}
	behind := func() time.Time { return time.Now().Add(-outcomes.FoldAfter) }
	a, err := outcomes.New(ctx, db, experiment.FromStore, nil, outcomes.WithShared(outcomesetcd.New(db.Conn(), id)), outcomes.WithClock(behind))
	if err != nil {
		return err
	}
	a.Add(ctx, "node-"+id, "", append(churnFlush("churn", revs["churn"], 0, 3), churnFlush("guarded", revs["guarded"], 0, 3)...))
	if err := a.Publish(ctx); err != nil {
		return err
	}
	return reg.Withdraw(ctx)
}

// TestReliabilityReplicaIDChurn: one allotd replica on etcd (its guardian
// checking every second) and 200 replica ids over time — allotd pods
// rolled 20 at a time, each id a hostname and an address, each live
// while it counts 10 requests of a and 10 of b (3 of them 5xx) of two
// observed experiments, publishes them and leaves: 200 total records of
// each experiment, where a read once stopped at 64 and every report and
// guardian check failed. GET …/outcomes answers with every request of
// every pod, exactly; the replica folds the pods' totals into the retired
// record, the figures staying exact; and its guardian rolls back the
// experiment whose guardrail (1,000 requests a variation: more than 64
// pods' figures) the treatment's 30% errors break.
func TestReliabilityReplicaIDChurn(t *testing.T) {
	h := startReplicated(t, 1, "-guardian-interval", "1s")
	r := h.replicas[0]
	revs := map[string]int64{}
	for _, body := range []map[string]any{{"key": "churn", "variations": []string{"a", "b"}, "observe": true},
		{"key": "guarded", "variations": []string{"a", "b"}, "observe": true,
			"guardrails": []map[string]any{{"metric": "errorRate", "maxIncrease": 0.01, "minRequests": 1000}}}} {
		var e experimentJSON
		r.mustAPI(http.StatusCreated, "POST", "/v1/experiments", body, &e)
		rev, err := strconv.ParseInt(e.AssignmentRevision, 10, 64)
		if err != nil {
			t.Fatalf("create %s: assignment revision %q: %v", body["key"], e.AssignmentRevision, err)
		}
		revs[body["key"].(string)] = rev
	}
	db, err := etcd.Open(t.Context(), clientv3.Config{Endpoints: strings.Split(strings.TrimPrefix(h.etcd.storeFlag(), "etcd://"), ",")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	start := time.Now()
	errs := make(chan error, churnPods)
	for wave := 0; wave < churnPods; wave += churnWave {
		var wg sync.WaitGroup
		for i := wave; i < wave+churnWave; i++ {
			wg.Go(func() {
				if err := churnPod(t.Context(), db, fmt.Sprintf("allotd-5d8f-%03d/10.1.%d.%d:18000", i, i/250, i%250), revs); err != nil {
					errs <- fmt.Errorf("pod %d: %w", i, err)
				}
			})
		}
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	churned := time.Since(start)
	if t.Failed() {
		t.FailNow()
	}

	// Every pod's requests, exactly; the pods' totals folded (at a report
	// or a sweep) into the retired record, the replica itself having none.
	want := [2]int64{10 * churnPods, 10 * churnPods}
	records := func() ([]string, error) {
		resp, err := db.Client().Get(t.Context(), etcd.DefaultPrefix+"outcomes/t/churn/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return nil, err
		}
		var keys []string
		for _, kv := range resp.Kvs {
			keys = append(keys, strings.TrimPrefix(string(kv.Key), etcd.DefaultPrefix+"outcomes/t/churn/"))
		}
		return keys, nil
	}
	var reports, inexact int
	var got [2]int64
	var keys []string
	harness.MustEventually(t, 20*time.Second, func() error {
		var raw json.RawMessage
		r.mustAPI(http.StatusOK, "GET", "/v1/experiments/churn/outcomes", nil, &raw)
		reports++
		rep := &adminv1.Outcomes{}
		if err := protojson.Unmarshal(raw, rep); err != nil {
			return err
		}
		if len(rep.GetTotal()) != 2 {
			return fmt.Errorf("report %s", raw)
		}
		got = [2]int64{rep.GetTotal()[0].GetRequests(), rep.GetTotal()[1].GetRequests()}
		if bad := rep.GetTotal()[1].GetResponses()["5xx"]; got != want || bad != 3*churnPods {
			inexact++ // a report reads at one revision: every one is exact, during folds too
			return fmt.Errorf("GET …/outcomes: requests %v, b's 5xx %d; want %v and %d", got, bad, want, 3*churnPods)
		}
		if keys, err = records(); err != nil {
			return err
		}
		if len(keys) != 1 || keys[0] != "%retired" {
			return fmt.Errorf("%d total records of churn, want the retired one alone", len(keys))
		}
		return nil
	})
	folded := time.Since(start)
	if inexact > 0 {
		t.Errorf("%d of %d reports not exact", inexact, reports)
	}

	// The guardian decides on the guarded experiment's figures.
	var e experimentJSON
	harness.MustEventually(t, 20*time.Second, func() error {
		e = experimentJSON{}
		r.mustAPI(http.StatusOK, "GET", "/v1/experiments/guarded", nil, &e)
		if e.Rollback == nil {
			return fmt.Errorf("guarded: status %s, no rollback", e.Status)
		}
		return nil
	})
	decided := time.Since(start)
	if e.Status != "paused" || e.Rollback.Guardrail != 0 || e.Rollback.Variation != 1 {
		t.Errorf("guarded: status %s, rollback %+v; want paused by guardrail 0 on variation 1", e.Status, *e.Rollback)
	}
	lost := int(max(want[0]-got[0], 0) + max(want[1]-got[1], 0))
	report(t, "faults", fmt.Sprintf("replica-id churn: %d allotd replica ids over time on etcd (%d live at a time, each counting 10 requests of a and 10 of b, 3 of them 5xx, of two observed experiments, publishing and leaving), against one allotd replica whose guardian checks every second", churnPods, churnWave),
		fmt.Sprintf("GET …/outcomes answered 200 with %v requests of %v (%d reports); the %d pods' totals folded to %v %.1f s after the churn began (churn %.1f s); the guardian rolled back the experiment whose guardrail the treatment's 30%% errors break after %.1f s",
			got, want, reports, churnPods, keys, folded.Seconds(), churned.Seconds(), decided.Seconds()), lost)
}
