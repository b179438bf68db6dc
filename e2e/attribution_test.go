//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/internal/harness"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// TestWeightChangeCountedByRevision: under load, on both artifacts, an
// experiment moves every unit from variation a (weights [1, 0]) to b
// ([0, 1]). Each response counts in the revision that assigned its
// request, however late the proxy flushes it: revision 1 counts exactly
// the requests that got a, all in variation 0; revision 2 exactly those
// that got b, all in variation 1; together, the load generator's count.
func TestWeightChangeCountedByRevision(t *testing.T) {
	forEachArtifact(t, reliabilityArtifacts, testWeightChangeCountedByRevision)
}

func testWeightChangeCountedByRevision(t *testing.T, a artifact) {
	s := startSystemFor(t, a)
	p := s.startSinkSidecar("split-1", "shop")
	s.waitConnected("split-1")
	var created waitedWrite
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s",
		map[string]any{"key": "split", "variations": []string{"a", "b"}, "weights": []float64{1, 0}, "observe": true}, &created)
	if !created.Rollout.appliedBy(1) {
		t.Fatalf("create: %+v", created.Rollout)
	}

	var got [2]atomic.Int64 // the requests the upstream received with a, with b
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				r, err := p.get(map[string][]string{"x-user-id": {fmt.Sprintf("user-%d-%d", w, i%200)}})
				if err != nil {
					errs <- err
					return
				}
				switch v := strings.Join(r.Header("x-experiment-split"), ","); v {
				case "a":
					got[0].Add(1)
				case "b":
					got[1].Add(1)
				default:
					errs <- fmt.Errorf("x-experiment-split %q", v)
					return
				}
			}
		}()
	}
	waitFor := func(what string, n int64, c *atomic.Int64) {
		t.Helper()
		harness.MustEventually(t, 30*time.Second, func() error {
			if len(errs) > 0 {
				return nil
			}
			if c.Load() < n {
				return fmt.Errorf("%d %s", c.Load(), what)
			}
			return nil
		})
	}
	waitFor("requests assigned a", 300, &got[0])
	var w waitedWrite
	s.mustAPI(http.StatusOK, "PUT", "/v1/experiments/split?wait=10s",
		map[string]any{"key": "split", "variations": []string{"a", "b"}, "weights": []float64{0, 1}, "observe": true, "revision": created.Experiment["revision"]}, &w)
	if !w.Rollout.appliedBy(1) {
		t.Fatalf("update: %+v", w.Rollout)
	}
	waitFor("requests assigned b", 300, &got[1])
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := [2]int64{got[0].Load(), got[1].Load()}

	harness.MustEventually(t, 20*time.Second, func() error {
		rep := outcomesOf(t, s, "split")
		if rep.GetRevision() != "2" || len(rep.GetEarlier()) != 1 || rep.GetEarlier()[0].GetRevision() != "1" {
			return fmt.Errorf("revision %s, earlier %v; want 2, then 1", rep.GetRevision(), rep.GetEarlier())
		}
		r1, r2 := rep.GetEarlier()[0].GetTotal(), rep.GetTotal()
		if r1[0].GetRequests() != want[0] || r1[1].GetRequests() != 0 || r2[0].GetRequests() != 0 || r2[1].GetRequests() != want[1] {
			return fmt.Errorf("revision 1 counted %d a, %d b; revision 2 %d a, %d b; want %d a in 1, %d b in 2",
				r1[0].GetRequests(), r1[1].GetRequests(), r2[0].GetRequests(), r2[1].GetRequests(), want[0], want[1])
		}
		return nil
	})
	t.Logf("%d requests assigned a by revision 1, %d b by revision 2: each counted in its revision", want[0], want[1])
}

// outcomesOf reads key's outcomes from s's admin API.
func outcomesOf(t *testing.T, s *system, key string) *adminv1.Outcomes {
	t.Helper()
	var raw json.RawMessage
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/"+key+"/outcomes", nil, &raw)
	rep := &adminv1.Outcomes{}
	if err := protojson.Unmarshal(raw, rep); err != nil {
		t.Fatalf("outcomes of %s: %v", key, err)
	}
	return rep
}
