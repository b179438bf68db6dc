//go:build e2e && reliability

package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/internal/harness"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

// soakDuration is how long TestReliabilitySoak holds the load.
const soakDuration = 60 * time.Second

// TestReliabilitySoak holds the highest rate this machine sustains through
// Envoy (12 closed-loop clients) for 60 s with 50 running experiments while 5
// experiment updates per second are written: zero non-2xx, no request
// evaluated by a configuration older than one an earlier, completed request
// had already seen, and Envoy and allotd memory flat.
func TestReliabilitySoak(t *testing.T) { forEachArtifact(t, reliabilityArtifacts, testReliabilitySoak) }

func testReliabilitySoak(t *testing.T, a artifact) {
	meshFile := repoPath(t, "envoy-configs/mesh.json")
	s := startSystemFor(t, a, "-mesh", meshFile)
	p := s.startSidecar("soak", "soak")
	for i := range 50 {
		e := map[string]any{"key": fmt.Sprintf("soak-%02d", i), "variations": []string{"a", "b", "c"},
			"weights": []float64{0.34, 0.33, 0.33}}
		switch i % 3 {
		case 0:
			e["condition"] = map[string]any{"country": map[string]any{"$in": []string{"NL", "US", "DE"}}}
		case 1:
			e["condition"] = map[string]any{"plan": "pro"}
		}
		s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", e, nil)
	}

	// The order of configuration versions, computed from the store's content
	// with the control plane's own translate code (cluster "soak").
	mesh := translate.Mesh{WasmPath: s.wasm, NativePath: s.native, Filter: &filterv1.FilterConfig{}}
	b, err := os.ReadFile(meshFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(b, mesh.Filter); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	order := map[string]int64{}
	// version computes the configuration version of the store's content,
	// with next (if not nil) replacing the stored experiment of its key.
	version := func(next map[string]any) string {
		var list struct {
			Experiments []json.RawMessage `json:"experiments"`
		}
		s.mustAPI(http.StatusOK, "GET", "/v1/experiments", nil, &list)
		var exps []*experimentv1.Experiment
		for _, raw := range list.Experiments {
			e := &experimentv1.Experiment{}
			if err := protojson.Unmarshal(raw, e); err != nil {
				t.Fatal(err)
			}
			if next != nil && e.Key == next["key"] {
				b, _ := json.Marshal(next)
				e = &experimentv1.Experiment{}
				if err := protojson.Unmarshal(b, e); err != nil {
					t.Fatal(err)
				}
			}
			exps = append(exps, e)
		}
		cfg, err := translate.FilterConfig(exps, "soak", time.Now(), mesh)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Version
	}
	v0 := version(nil)
	order[v0] = 1
	harness.MustEventually(t, 10*time.Second, func() error {
		r, err := p.get(map[string][]string{"x-user-id": {"probe"}})
		if err != nil {
			return err
		}
		if v := r.Header("x-experiments-version"); len(v) != 1 || v[0] != v0 {
			return fmt.Errorf("proxy at version %q, want %s", v, v0)
		}
		return nil
	})

	var (
		maxDone                          atomic.Int64 // highest version order among completed responses
		requests, non2xx, stale, unknown atomic.Int64
		writes                           atomic.Int64
		firstErr                         atomic.Value
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			countries := []string{"NL", "US", "FR"}
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				floor := maxDone.Load()
				r, err := p.get(map[string][]string{
					"x-user-id": {fmt.Sprintf("soak-%d-%d", w, i%5000)}, "x-country": {countries[i%3]},
				})
				requests.Add(1)
				if err != nil {
					non2xx.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				v := strings.Join(r.Header("x-experiments-version"), ",")
				mu.Lock()
				n, ok := order[v]
				mu.Unlock()
				switch {
				case !ok:
					unknown.Add(1)
					firstErr.CompareAndSwap(nil, "unknown configuration version "+strconv.Quote(v))
				case n < floor:
					stale.Add(1)
				}
				for cur := maxDone.Load(); n > cur && !maxDone.CompareAndSwap(cur, n); cur = maxDone.Load() {
				}
			}
		}()
	}
	// The writer: 5 updates per second, each one new content (a new seed).
	// Only this goroutine writes, so the version a write will yield is known
	// before it is made: it is recorded first, and no response can see it
	// before the test knows its place in the order.
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			key := fmt.Sprintf("soak-%02d", k%50)
			var cur map[string]any
			if s.api("GET", "/v1/experiments/"+key, nil, &cur) != http.StatusOK {
				firstErr.CompareAndSwap(nil, "writer: get "+key)
				continue
			}
			for _, f := range []string{"createTime", "updateTime", "createdBy", "updatedBy"} {
				delete(cur, f)
			}
			// The write starts a new assignment revision, which the proxies
			// receive: the version is that of the experiment as allotd
			// will store it (experiment.NextAssignment).
			old := decodeExperiment(t, cur)
			cur["seed"] = fmt.Sprintf("soak-seed-%d", k)
			next := decodeExperiment(t, cur)
			experiment.NextAssignment(next, old)
			cur["assignmentRevision"] = strconv.FormatInt(next.GetAssignmentRevision(), 10)
			v := version(cur)
			mu.Lock()
			if _, seen := order[v]; !seen {
				order[v] = int64(len(order) + 1)
			}
			mu.Unlock()
			if s.api("PUT", "/v1/experiments/"+key, cur, nil) != http.StatusOK {
				firstErr.CompareAndSwap(nil, "writer: put "+key)
				continue
			}
			writes.Add(1)
		}
	}()

	time.Sleep(10 * time.Second) // warm-up before the memory baseline
	envoyBase, allotdBase := p.MustRSS(t), processRSS(t, s.allotd.Pid())
	time.Sleep(soakDuration - 10*time.Second)
	envoyEnd, allotdEnd := p.MustRSS(t), processRSS(t, s.allotd.Pid())
	close(stop)
	wg.Wait()

	rate := float64(requests.Load()) / soakDuration.Seconds()
	t.Logf("%d requests (%.0f/s), %d writes, %d versions; Envoy RSS %.1f→%.1f MiB, allotd RSS %.1f→%.1f MiB",
		requests.Load(), rate, writes.Load(), len(order), mib(envoyBase), mib(envoyEnd), mib(allotdBase), mib(allotdEnd))
	if e := firstErr.Load(); e != nil {
		t.Logf("first error: %v", e)
	}
	if non2xx.Load() != 0 || stale.Load() != 0 || unknown.Load() != 0 {
		t.Errorf("%d non-2xx, %d stale, %d unknown versions", non2xx.Load(), stale.Load(), unknown.Load())
	}
	if writes.Load() < int64(soakDuration.Seconds()*5*0.8) {
		t.Errorf("only %d writes in %v, want about 5 per second", writes.Load(), soakDuration)
	}
	if d := envoyEnd - envoyBase; d > 64<<20 {
		t.Errorf("Envoy RSS grew %.1f MiB during the soak", mib(d))
	}
	if d := allotdEnd - allotdBase; d > 64<<20 {
		t.Errorf("allotd RSS grew %.1f MiB during the soak", mib(d))
	}
	report(t, "load", fmt.Sprintf("soak: %v through Envoy (12 clients, as fast as they go), 50 running experiments, 5 updates/s", soakDuration),
		fmt.Sprintf("%d requests (%.0f/s), %d updates, %d non-2xx, %d evaluated by a stale configuration; Envoy RSS %+.1f MiB, allotd RSS %+.1f MiB over the last 50 s",
			requests.Load(), rate, writes.Load(), non2xx.Load(), stale.Load()+unknown.Load(), mib(envoyEnd-envoyBase), mib(allotdEnd-allotdBase)),
		int(non2xx.Load()))
}

// processRSS reads a process's resident set size in bytes.
func processRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no VmRSS for pid %d", pid)
	return 0
}

// decodeExperiment decodes an experiment's JSON document as a map.
func decodeExperiment(t *testing.T, doc map[string]any) *experimentv1.Experiment {
	t.Helper()
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	e := &experimentv1.Experiment{}
	if err := protojson.Unmarshal(b, e); err != nil {
		t.Fatal(err)
	}
	return e
}
