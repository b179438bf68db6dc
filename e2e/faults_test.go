//go:build e2e && reliability

package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allotmesh/allot/internal/harness"
)

// The replica and etcd faults of the reliability suite, on the replicated
// fixture of replicas_test.go (three etcd members, three allotd replicas,
// three Envoys each preferring its own replica), with requests flowing
// through every Envoy all along.

// traffic is a stream of requests through every Envoy of a replicated
// mesh, one client per Envoy sending one about every 10 ms, each checked
// against the engine's assignment of the experiment "steady", which nothing
// changes while the stream runs.
type traffic struct {
	stop           chan struct{}
	wg             sync.WaitGroup
	served, failed atomic.Int64
	first          atomic.Value // the first failure, a string
}

// startTraffic creates "steady", waiting until every Envoy of h.proxies
// applied it, and starts the stream.
func startTraffic(t *testing.T, h *replicated) *traffic {
	t.Helper()
	def := map[string]any{"key": "steady", "variations": []string{"a", "b", "c"}}
	var w waitedWrite
	h.replicas[0].mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", def, &w)
	if !w.Rollout.appliedBy(len(h.proxies)) {
		t.Fatalf("create steady with wait: %+v", w.Rollout)
	}
	units := userIDs(1000)
	want := assignments(t, def, units)
	tr := &traffic{stop: make(chan struct{})}
	for _, p := range h.proxies {
		tr.wg.Add(1)
		go func() {
			defer tr.wg.Done()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-tr.stop:
					return
				case <-tick.C:
				}
				u := units[i%len(units)]
				r, err := p.get(map[string][]string{"x-user-id": {u}})
				if err == nil {
					if v := r.Header("x-experiment-steady"); len(v) != 1 || v[0] != want[u] {
						err = fmt.Errorf("%s got %q, want [%s]", u, v, want[u])
					}
				}
				if err != nil {
					tr.failed.Add(1)
					tr.first.CompareAndSwap(nil, fmt.Sprintf("Envoy %s: %v", p.Node, err))
					continue
				}
				tr.served.Add(1)
			}
		}()
	}
	return tr
}

// halt stops the stream and returns how many requests were served with
// the right assignment and how many failed; any failure fails the test.
func (tr *traffic) halt(t *testing.T) (served, failed int) {
	t.Helper()
	close(tr.stop)
	tr.wg.Wait()
	served, failed = int(tr.served.Load()), int(tr.failed.Load())
	if failed != 0 {
		t.Errorf("%d of %d requests through the Envoys failed; the first: %v", failed, served+failed, tr.first.Load())
	}
	if served == 0 {
		t.Errorf("no request went through the Envoys")
	}
	return served, failed
}

// durations renders each of ds to 10 ms, e.g. "1.24s, 0.98s".
func durations(ds []time.Duration) string {
	var s []string
	for _, d := range ds {
		s = append(s, d.Round(10*time.Millisecond).String())
	}
	return strings.Join(s, ", ")
}

// TestReliabilityReplicaKilled kills (SIGKILL) each of the three allotd
// replicas in turn, restarting it before the next, while requests flow
// through the three Envoys. Each time (see failOver) the Envoys the replica
// served keep serving, reconnect to another replica and converge; a waited
// write meanwhile neither hangs nor counts them as applied on the dead
// replica; once its lease expired they count once, on their new replica.
// No request through any Envoy fails throughout.
func TestReliabilityReplicaKilled(t *testing.T) {
	h := startReplicated(t, 3)
	h.sidecars("rel-failover")
	r := h.startRamp(0, 500)
	tr := startTraffic(t, h)
	var fs []failover
	var rejoined []time.Duration
	for _, victim := range []int{2, 0, 1} {
		fs = append(fs, r.failOver(victim))
		start := time.Now()
		h.restart(victim)
		rejoined = append(rejoined, time.Since(start))
	}
	served, failed := tr.halt(t)

	var moved, writes []string
	var converged, left []time.Duration
	for _, f := range fs {
		var to []string
		for i := range f.moved {
			to = append(to, f.moved[i]+" → "+f.homes[i])
		}
		moved = append(moved, strings.Join(to, ", "))
		writes = append(writes, fmt.Sprintf("%v (%s, %d of 3 Envoys counted)", f.write.Round(10*time.Millisecond), f.result, f.counted))
		converged, left = append(converged, f.converged), append(left, f.left)
	}
	const what = "allotd replica killed (SIGKILL), each of 3 in turn, under 3 Envoys (3 etcd members, lease TTL 3s): "
	report(t, "faults", what+"its Envoys keep serving",
		fmt.Sprintf("%d requests through the 3 Envoys during the 3 failovers and restarts, all with their assignment, %d failed", served, failed), failed)
	report(t, "faults", what+"its Envoys reconnect to another replica and converge",
		fmt.Sprintf("served the next write %s after the kill (%s); each then listed once, on its new replica", durations(converged), strings.Join(moved, "; ")), 0)
	report(t, "faults", what+"a waited write (wait=15s) right after the kill",
		fmt.Sprintf("returned in %s; it waited for the dead replica's Envoys to apply it on another replica, and every Envoy served it right after", strings.Join(writes, ", ")), 0)
	report(t, "faults", what+"the dead replica leaves the live set",
		fmt.Sprintf("%s after the kill; restarted with its id and ports, live again in %s", durations(left), durations(rejoined)), 0)
}

// TestReliabilityEtcdFaults takes etcd members away under three replicas
// while requests flow through the three Envoys (see loseQuorum): the leader
// killed (SIGKILL), then a second member; then they return. No request
// through any Envoy fails and every acknowledged write is present.
func TestReliabilityEtcdFaults(t *testing.T) {
	h := startReplicated(t, 3)
	h.sidecars("rel-etcd")
	r := h.startRamp(0.5, 50)
	tr := startTraffic(t, h)
	q := r.loseQuorum()
	served, failed := tr.halt(t)

	report(t, "faults", "etcd leader killed (SIGKILL) under 3 allotd replicas: writes go on",
		fmt.Sprintf("6/6 writes through the 3 replicas acknowledged; the first, through the leader election, in %v", q.election.Round(10*time.Millisecond)), 0)
	report(t, "faults", "etcd quorum lost (2 of 3 members killed): writes fail fast, reads go on",
		fmt.Sprintf("a write through each replica refused with 503 unavailable naming etcd in %s (-store-timeout %v); the last known state read through every replica (%d/%d acknowledged experiments listed); /readyz 503",
			durations(q.refused), storeTimeout, q.reads, q.readsWant), q.readsWant-q.reads)
	report(t, "faults", "etcd member back after the quorum loss: everything converges",
		fmt.Sprintf("first write acknowledged %v after the member restarted; a waited write applied by 3/3 Envoys", q.recovered.Round(10*time.Millisecond)), 0)
	report(t, "faults", "Envoys through the etcd faults (leader killed, quorum lost, members back)",
		fmt.Sprintf("%d requests through the 3 Envoys, all with their assignment, %d failed", served, failed), failed)
	report(t, "durability", "writes acknowledged around etcd faults (leader killed, quorum lost, members back)",
		fmt.Sprintf("%d acknowledged, %d present afterwards", len(q.acked), len(q.acked)-len(q.missing)), len(q.missing))
}

// ackedWrite is one write the admin API acknowledged.
type ackedWrite struct {
	key, marker string // marker is its description and seed, unique
	revision    int64  // the revision it got
	read        int64  // the revision it updated (0: a create)
}

// writers are clients of the admin API writing experiments, each through
// its own replica or, while that one does not answer, the next. Half of
// the writes update one contended experiment, so their compare-and-swap
// conflicts; the others create or update four experiments of the writer's
// own. Every write is a read, a pause of up to 100 ms and the write with
// the revision read; every write changes the configuration (a new seed).
type writers struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	n        atomic.Int64   // writes acknowledged
	inflight []atomic.Int32 // writes in flight, per replica

	mu                    sync.Mutex
	acked                 []ackedWrite
	slowest               time.Duration // of the acknowledged writes
	unknown               []string      // markers of writes of unknown outcome (no answer, or 503)
	conflicts, unexpected int
	firstUnexpected       string
}

func startWriters(h *replicated, n int) *writers {
	var urls []string // fixed: a restarted replica keeps its ports
	for _, s := range h.replicas {
		urls = append(urls, s.adminURL)
	}
	ws := &writers{stop: make(chan struct{}), inflight: make([]atomic.Int32, len(urls))}
	for w := range n {
		ws.wg.Add(1)
		go func() {
			defer ws.wg.Done()
			ws.run(w, urls)
		}()
	}
	return ws
}

func (ws *writers) run(w int, urls []string) {
	client := &http.Client{Timeout: 10 * time.Second}
	pause := func(d time.Duration) bool {
		select {
		case <-ws.stop:
			return false
		case <-time.After(d):
			return true
		}
	}
	for n := 0; pause(100 * time.Millisecond); n++ {
		key := "contended"
		if n%2 == 1 {
			key = fmt.Sprintf("w%d-%d", w+1, n/2%4)
		}
		marker := fmt.Sprintf("w%d-%d", w+1, n)
		var cur map[string]any
		code, via := 0, -1
		for k := range urls {
			i := (w + k) % len(urls)
			c, _, err := adminCall(client, urls[i], "GET", "/v1/experiments/"+key, nil, &cur)
			if err == nil {
				code, via = c, i
				break
			}
		}
		var method, path string
		var read int64
		switch code {
		case http.StatusNotFound:
			method, path = "POST", "/v1/experiments"
			cur = map[string]any{"key": key, "variations": []string{"a", "b"}}
		case http.StatusOK:
			method, path = "PUT", "/v1/experiments/"+key
			var err error
			if read, err = json.Number(fmt.Sprint(cur["revision"])).Int64(); err != nil {
				ws.fail(fmt.Sprintf("GET %s: revision %v", key, cur["revision"]))
				continue
			}
			for _, f := range []string{"createTime", "updateTime", "createdBy", "updatedBy"} {
				delete(cur, f)
			}
		default:
			ws.fail(fmt.Sprintf("GET %s through the replicas: status %d", key, code))
			continue
		}
		cur["seed"], cur["description"] = marker, marker
		if !pause(time.Duration(rand.IntN(100)) * time.Millisecond) {
			return
		}
		var out struct {
			Revision json.Number `json:"revision"`
		}
		start := time.Now()
		ws.inflight[via].Add(1)
		code, body, err := adminCall(client, urls[via], method, path, cur, &out)
		ws.inflight[via].Add(-1)
		took := time.Since(start)
		ws.mu.Lock()
		switch {
		case err != nil && code == 0, code == http.StatusServiceUnavailable:
			ws.unknown = append(ws.unknown, marker)
		case code == http.StatusConflict:
			ws.conflicts++
		case err == nil && (code == http.StatusOK || code == http.StatusCreated):
			rev, perr := out.Revision.Int64()
			if perr != nil {
				ws.unexpected++
				ws.firstUnexpected = fmt.Sprintf("%s %s: revision %q", method, key, out.Revision)
				break
			}
			ws.acked = append(ws.acked, ackedWrite{key: key, marker: marker, revision: rev, read: read})
			ws.slowest = max(ws.slowest, took)
			ws.n.Add(1)
		default:
			ws.unexpected++
			if ws.firstUnexpected == "" {
				ws.firstUnexpected = fmt.Sprintf("%s %s: %d %v %.300s", method, key, code, err, body)
			}
		}
		ws.mu.Unlock()
	}
}

func (ws *writers) fail(msg string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	ws.unexpected++
	if ws.firstUnexpected == "" {
		ws.firstUnexpected = msg
	}
}

// progress waits until n more writes were acknowledged.
func (ws *writers) progress(t *testing.T, n int64, what string) {
	t.Helper()
	from := ws.n.Load()
	harness.MustEventually(t, 60*time.Second, func() error {
		if got := ws.n.Load() - from; got < n {
			return fmt.Errorf("%s: %d writes acknowledged, want %d", what, got, n)
		}
		return nil
	})
}

// inFlight waits, up to 10 s, until a write through one of replicas is in
// flight, so that a fault injected right after hits it; it reports whether
// one was.
func (ws *writers) inFlight(replicas ...int) bool {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, r := range replicas {
			if ws.inflight[r].Load() > 0 {
				return true
			}
		}
	}
	return false
}

func (ws *writers) halt() {
	close(ws.stop)
	ws.wg.Wait()
}

// historyChange is a change of GET /v1/history.
type historyChange struct {
	Revision json.Number `json:"revision"`
	Key      string      `json:"key"`
	Before   *struct {
		Revision json.Number `json:"revision"`
	} `json:"before"`
	After *struct {
		Description string `json:"description"`
	} `json:"after"`
}

// TestReliabilityWritesUnderFaults: three writers, each through its own
// replica (the next one while it is down), write experiments continuously
// — half of the writes to one contended experiment, so compare-and-swap
// conflicts happen — while faults are injected in turn, each after the
// writers made progress and while a write it concerns is in flight: a
// replica killed (SIGKILL) and restarted, the etcd leader killed (SIGKILL)
// and restarted, then a replica and the etcd leader at once. Requests flow through the three Envoys all along.
// Afterwards every acknowledged write is in the audit history at its
// revision with its content, updating the very revision it read (no lost
// update), the state of every experiment is its last change, every replica
// is at the store's revision, every Envoy serves the same configuration
// version, and no request through an Envoy failed.
func TestReliabilityWritesUnderFaults(t *testing.T) {
	h := startReplicated(t, 3)
	h.sidecars("rel-stream")
	tr := startTraffic(t, h)
	ws := startWriters(h, 3)
	start := time.Now()
	const step = 25 // writes acknowledged between two faults
	ws.progress(t, step, "before the faults")

	hit := 0 // faults injected while a write they concern was in flight
	if ws.inFlight(1) {
		hit++
	}
	h.replicas[1].allotd.Kill()
	ws.progress(t, step, "replica r2 killed")
	h.restart(1)
	ws.progress(t, step, "replica r2 restarted")

	leader := h.etcd.leader()
	if ws.inFlight(0, 1, 2) {
		hit++
	}
	h.etcd.members[leader].proc.Kill()
	ws.progress(t, step, "etcd leader killed")
	h.etcd.restart(leader)
	ws.progress(t, step, "etcd member restarted")

	leader = h.etcd.leader()
	if ws.inFlight(2) {
		hit++
	}
	h.replicas[2].allotd.Kill()
	h.etcd.members[leader].proc.Kill()
	ws.progress(t, step, "replica r3 and the etcd leader killed")
	h.etcd.restart(leader)
	h.restart(2)
	ws.progress(t, step, "replica r3 and the etcd member restarted")
	ws.halt()
	streamed := time.Since(start)

	// Convergence: every replica ready and at the store's revision, every
	// Envoy applied and serving the replicas' one target version.
	converging := time.Now()
	var version string
	harness.MustEventually(t, 30*time.Second, func() error {
		var list struct {
			Revision string `json:"revision"`
		}
		h.replicas[0].mustAPI(http.StatusOK, "GET", "/v1/experiments", nil, &list)
		targets := map[string]bool{}
		for via, s := range h.replicas {
			if code, _, err := adminCall(http.DefaultClient, s.adminURL, "GET", "/readyz", nil, nil); err != nil || code != http.StatusOK {
				return fmt.Errorf("replica %s /readyz: %d %v", replicaID(via), code, err)
			}
			var ro struct {
				rolloutJSON
				Targets  map[string]string `json:"targets"`
				Replicas []struct {
					ID       string `json:"id"`
					Revision string `json:"revision"`
				} `json:"replicas"`
			}
			s.mustAPI(http.StatusOK, "GET", "/v1/rollout", nil, &ro)
			if len(ro.Replicas) != len(h.replicas) {
				return fmt.Errorf("replica %s lists live replicas %+v", replicaID(via), ro.Replicas)
			}
			for _, r := range ro.Replicas {
				if r.Revision != list.Revision {
					return fmt.Errorf("replica %s lists %s at revision %s, the store is at %s", replicaID(via), r.ID, r.Revision, list.Revision)
				}
			}
			var nodes []string
			for _, p := range ro.Proxies {
				if p.State != "applied" {
					return fmt.Errorf("replica %s lists %s %s", replicaID(via), p.NodeID, p.State)
				}
				nodes = append(nodes, p.NodeID)
			}
			if len(nodes) != len(h.proxies) || len(slices.Compact(slices.Sorted(slices.Values(nodes)))) != len(h.proxies) {
				return fmt.Errorf("replica %s lists proxies %v", replicaID(via), nodes)
			}
			targets[ro.Targets["checkout-svc"]] = true
			version = ro.Targets["checkout-svc"]
		}
		if len(targets) != 1 {
			return fmt.Errorf("the replicas target different versions: %v", targets)
		}
		for _, p := range h.proxies {
			r, err := p.get(map[string][]string{"x-user-id": {"probe"}})
			if err != nil {
				return err
			}
			if v := r.Header("x-experiments-version"); len(v) != 1 || v[0] != version {
				return fmt.Errorf("Envoy %s serves version %q, the replicas target %s", p.Node, v, version)
			}
		}
		return nil
	})
	settled := time.Since(converging)
	served, failed := tr.halt(t)

	// Durability: every acknowledged write in the history, as written.
	var hist struct {
		Changes []historyChange `json:"changes"`
	}
	h.replicas[0].mustAPI(http.StatusOK, "GET", "/v1/history", nil, &hist)
	byRevision := map[int64]historyChange{}
	last := map[string]historyChange{}
	committed := map[string]bool{} // markers in the history
	for _, c := range hist.Changes {
		rev, _ := c.Revision.Int64()
		byRevision[rev] = c
		last[c.Key] = c
		if c.After != nil {
			committed[c.After.Description] = true
		}
	}
	lost := 0
	acked := map[string]bool{}
	for _, a := range ws.acked {
		acked[a.marker] = true
		c, ok := byRevision[a.revision]
		switch {
		case !ok || c.Key != a.key || c.After == nil || c.After.Description != a.marker:
			lost++
			t.Errorf("acknowledged write %s (%s at revision %d) is not in the history: %+v", a.marker, a.key, a.revision, c)
		case a.read != 0 && (c.Before == nil || c.Before.Revision.String() != fmt.Sprint(a.read)):
			lost++
			t.Errorf("acknowledged write %s (%s at revision %d) replaced %+v, not the revision %d it read", a.marker, a.key, a.revision, c.Before, a.read)
		}
	}
	var list struct {
		Experiments []struct {
			Key         string      `json:"key"`
			Revision    json.Number `json:"revision"`
			Description string      `json:"description"`
		} `json:"experiments"`
	}
	h.replicas[1].mustAPI(http.StatusOK, "GET", "/v1/experiments", nil, &list)
	state := map[string]bool{}
	for _, e := range list.Experiments {
		state[e.Key] = true
		c, ok := last[e.Key]
		if !ok || c.Revision != e.Revision || c.After == nil || c.After.Description != e.Description {
			t.Errorf("%s is at revision %s (%q), its last change is %+v", e.Key, e.Revision, e.Description, c)
			if ok && c.After != nil && acked[c.After.Description] {
				lost++
			}
		}
	}
	for key := range last {
		if !state[key] {
			t.Errorf("%s has a history but is not listed", key)
		}
	}
	resolved := 0
	for _, m := range ws.unknown {
		if committed[m] {
			resolved++
		}
	}
	if ws.unexpected != 0 {
		t.Errorf("%d unexpected answers; the first: %s", ws.unexpected, ws.firstUnexpected)
	}
	if ws.conflicts == 0 {
		t.Errorf("no compare-and-swap conflict in %d writes: the contended experiment was not contended", len(ws.acked))
	}
	t.Logf("%d writes acknowledged in %v (slowest %v), %d conflicts, %d of unknown outcome (%d committed), %d of 3 faults injected during a write; converged %v after the last write",
		len(ws.acked), streamed.Round(time.Millisecond), ws.slowest.Round(time.Millisecond), ws.conflicts, len(ws.unknown), resolved, hit, settled.Round(time.Millisecond))

	const what = "3 writers through 3 allotd replicas (half the writes to one contended experiment) while a replica, the etcd leader, then both are killed (SIGKILL) and restarted"
	report(t, "durability", what+": every acknowledged write kept",
		fmt.Sprintf("%d writes acknowledged in %v (slowest %v), %d compare-and-swap conflicts refused, %d of unknown outcome (%d of them committed), %d of the 3 faults injected during a write; every acknowledged write in the history at its revision, over the revision it read; every experiment's state its last change",
			len(ws.acked), streamed.Round(time.Second), ws.slowest.Round(10*time.Millisecond), ws.conflicts, len(ws.unknown), resolved, hit), lost)
	report(t, "faults", what+": the mesh converges",
		fmt.Sprintf("%v after the last write, the 3 replicas at the store's revision and the 3 Envoys serving one configuration version", settled.Round(10*time.Millisecond)), 0)
	report(t, "faults", what+": Envoys keep serving",
		fmt.Sprintf("%d requests through the 3 Envoys, all with their assignment, %d failed", served, failed), failed)
}
