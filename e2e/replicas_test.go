//go:build e2e

package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/internal/harness"
)

// leaseTTL is the replicas' lease in these tests: how long a killed
// replica's proxies stay in the live set.
const leaseTTL = 3 * time.Second

// storeTimeout is the replicas' -store-timeout: a write answers within it,
// whatever the store does.
const storeTimeout = 2 * time.Second

// etcdMember is one etcd server process.
type etcdMember struct {
	harness.EtcdMember
	proc *harness.Process
}

func (m *etcdMember) endpoint() string { return m.Endpoint() }

// etcdCluster is a cluster of real etcd processes on loopback, built from
// the etcd server module allotd's store uses, laid out by harness.
type etcdCluster struct {
	t       *testing.T
	layout  *harness.EtcdCluster
	members []*etcdMember
}

func startEtcd(t *testing.T, n int) *etcdCluster {
	t.Helper()
	layout, procs := harness.MustStartEtcd(t, harness.MustBuild(t, harness.EtcdPackage), n)
	c := &etcdCluster{t: t, layout: layout}
	for i, m := range layout.Members {
		c.members = append(c.members, &etcdMember{EtcdMember: m, proc: procs[i]})
	}
	return c
}

// start starts killed member i again on its data and ports.
func (c *etcdCluster) start(i int, state string) {
	c.members[i].proc = c.layout.MustLaunch(c.t, i, state)
}

// restart starts killed member i again on its data and ports, and waits
// until it reports healthy (it has a leader).
func (c *etcdCluster) restart(i int) {
	c.t.Helper()
	c.start(i, "existing")
	c.members[i].proc.MustWaitHTTP(c.t, fmt.Sprintf("http://%s/health", c.members[i].endpoint()), 30*time.Second)
}

// leader returns the index of the member that leads the cluster.
func (c *etcdCluster) leader() int {
	c.t.Helper()
	i, err := c.layout.Leader()
	if err != nil {
		c.t.Fatal(err)
	}
	return i
}

// storeFlag is allotd's -store for the cluster.
func (c *etcdCluster) storeFlag() string { return c.layout.StoreURL() }

// replicated is Allot on several allotd replicas sharing an etcd cluster.
type replicated struct {
	t        *testing.T
	etcd     *etcdCluster
	replicas []*system
	proxies  []*proxy // started by sidecars, Envoy i preferring replica i
}

// replicaID is replica i's -replica-id.
func replicaID(i int) string { return harness.ReplicaID(i) }

func startReplicated(t *testing.T, n int, allotdArgs ...string) *replicated {
	t.Helper()
	h := &replicated{t: t, etcd: startEtcd(t, 3)}
	base := prepareSystem(t, wasmArtifact)
	for i := range n {
		s := *base
		s.xdsPort, s.adminPort = harness.MustFreePort(t), harness.MustFreePort(t)
		s.args = append([]string{"-store", h.etcd.storeFlag(), "-replica-id", replicaID(i),
			"-lease-ttl", leaseTTL.String(), "-store-timeout", storeTimeout.String()}, allotdArgs...)
		s.startAllotd()
		h.replicas = append(h.replicas, &s)
	}
	return h
}

// restart starts killed replica i again, with its id and ports, and waits
// until every replica lists all of them as live.
func (h *replicated) restart(i int) {
	h.t.Helper()
	h.replicas[i].startAllotd()
	harness.MustEventually(h.t, leaseTTL+10*time.Second, func() error {
		for via := range h.replicas {
			if live := h.live(via); len(live) != len(h.replicas) {
				return fmt.Errorf("replica %s lists live replicas %v", replicaID(via), live)
			}
		}
		return nil
	})
}

// live returns the ids of the live replicas as replica via lists them.
func (h *replicated) live(via int) []string {
	h.t.Helper()
	ids, err := liveReplicas(h.replicas[via].adminURL)
	if err != nil {
		h.t.Fatal(err)
	}
	return ids
}

// liveReplicas returns the ids of the live replicas as the replica at
// adminURL lists them; it fails no test.
func liveReplicas(adminURL string) ([]string, error) {
	var ro struct {
		Replicas []struct {
			ID string `json:"id"`
		} `json:"replicas"`
	}
	code, b, err := adminCall(http.DefaultClient, adminURL, "GET", "/v1/rollout", nil, &ro)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("status %d: %s", code, b)
	}
	if err != nil {
		return nil, fmt.Errorf("GET %s/v1/rollout: %w", adminURL, err)
	}
	var ids []string
	for _, r := range ro.Replicas {
		ids = append(ids, r.ID)
	}
	return ids, nil
}

// sidecar starts an Envoy whose xDS cluster is envoy-configs/xds-replicas.yaml
// with replica home at priority 0 and the others at priorities 1 and 2.
func (h *replicated) sidecar(home int, node, cluster string) *proxy {
	h.t.Helper()
	return h.sidecarWith(home, node, cluster, nil)
}

// sidecarWith is sidecar with more replacements in the bootstrap.
func (h *replicated) sidecarWith(home int, node, cluster string, replace map[string]string) *proxy {
	h.t.Helper()
	root, err := harness.RepoRoot()
	if err != nil {
		h.t.Fatal(err)
	}
	read := func(p string) string {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			h.t.Fatal(err)
		}
		return string(b)
	}
	sidecar := read(wasmArtifact.sidecar)
	tail := sidecar[strings.Index(sidecar, "  - name: allot_xds"):]
	frag := read("envoy-configs/xds-replicas.yaml")
	frag = frag[strings.Index(frag, "  - name: allot_xds"):]
	order := []int{home}
	for i := range h.replicas {
		if i != home {
			order = append(order, i)
		}
	}
	var ports []string
	for i, r := range order {
		ports = append(ports, fmt.Sprintf("port_value: %d", 18000+i), fmt.Sprintf("port_value: %d", h.replicas[r].xdsPort))
	}
	frag = strings.NewReplacer(ports...).Replace(frag)
	s := h.replicas[home]
	_, echoPort, _ := splitHostPort(s.echoAddr)
	all := map[string]string{"port_value: 8081": "port_value: " + echoPort, tail: frag}
	maps.Copy(all, replace)
	return startEnvoy(h.t, wasmArtifact.sidecar, s.xdsPort, s.filter(), nil, node, cluster, all)
}

// sidecars starts one checkout-svc Envoy per replica into h.proxies, Envoy
// i (node prefix-<i+1>) preferring replica i, and waits until every replica
// lists each Envoy once, on its preferred replica.
func (h *replicated) sidecars(prefix string) {
	h.t.Helper()
	for i := range h.replicas {
		h.proxies = append(h.proxies, h.sidecar(i, fmt.Sprintf("%s-%d", prefix, i+1), "checkout-svc"))
	}
	for i, p := range h.proxies {
		for via := range h.replicas {
			if got, want := h.replicaOf(via, p.Node), replicaID(i); got != want {
				h.t.Fatalf("replica %s sees Envoy %s on %s, want %s", replicaID(via), p.Node, got, want)
			}
		}
	}
}

// replicaOf polls replica via's GET /v1/rollout until node is listed once
// and returns the replica it is connected to.
func (h *replicated) replicaOf(via int, node string) string {
	h.t.Helper()
	var got string
	harness.MustEventually(h.t, 20*time.Second, func() error {
		var ro struct {
			Proxies []struct {
				Replica string `json:"replica"`
				NodeID  string `json:"nodeId"`
			} `json:"proxies"`
		}
		if code := h.replicas[via].api("GET", "/v1/rollout", nil, &ro); code != http.StatusOK {
			return fmt.Errorf("GET /v1/rollout: %d", code)
		}
		var on []string
		for _, p := range ro.Proxies {
			if p.NodeID == node {
				on = append(on, p.Replica)
			}
		}
		if len(on) != 1 {
			return fmt.Errorf("replica %d lists %s %d times (%v)", via+1, node, len(on), on)
		}
		got = on[0]
		return nil
	})
	return got
}

// ramp is the checkout experiment written through the replicas, with the
// engine's own assignment (the oracle) of what every Envoy of h.proxies
// must serve.
type ramp struct {
	h        *replicated
	units    []string
	share    float64           // the share in treatment of the last acknowledged write
	want     map[string]string // its assignment of units
	revision any               // its revision, sent back by the next update
}

// startRamp creates checkout with share w in treatment through replica 0,
// waiting until every Envoy of h.proxies applied it; the oracle covers
// units users.
func (h *replicated) startRamp(w float64, units int) *ramp {
	h.t.Helper()
	var ww waitedWrite
	h.replicas[0].mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", checkoutRamp(w), &ww)
	if !ww.Rollout.appliedBy(len(h.proxies)) {
		h.t.Fatalf("create with wait through replica 1: %+v", ww.Rollout)
	}
	r := &ramp{h: h, units: userIDs(units), share: w, revision: ww.Experiment["revision"]}
	r.want = assignments(h.t, checkoutRamp(w), r.units)
	return r
}

// rampWrite is one update of a ramp.
type rampWrite struct {
	code  int
	w     waitedWrite
	took  time.Duration
	probe []string // up to 15 units whose variation it changed
}

// update PUTs checkout with share w through replica via with
// ?wait=timeout. On 200 the ramp follows the write; on 409 it rereads the
// revision (a write of unknown outcome may have committed).
func (r *ramp) update(via int, w float64, timeout string) rampWrite {
	r.h.t.Helper()
	def := checkoutRamp(w)
	def["revision"] = r.revision
	var out rampWrite
	start := time.Now()
	out.code = r.h.replicas[via].api("PUT", "/v1/experiments/checkout?wait="+timeout, def, &out.w)
	out.took = time.Since(start)
	switch out.code {
	case http.StatusOK:
		want := assignments(r.h.t, def, r.units)
		for _, u := range r.units {
			if want[u] != r.want[u] && len(out.probe) < 15 {
				out.probe = append(out.probe, u)
			}
		}
		r.share, r.want, r.revision = w, want, out.w.Experiment["revision"]
	case http.StatusConflict:
		var got map[string]any
		r.h.replicas[via].mustAPI(http.StatusOK, "GET", "/v1/experiments/checkout", nil, &got)
		r.revision = got["revision"]
	}
	return out
}

// serves returns nil if p serves the ramp's assignment to every unit of
// probe.
func (r *ramp) serves(p *proxy, probe []string) error {
	for _, u := range probe {
		resp, err := p.get(map[string][]string{"x-user-id": {u}})
		if err != nil {
			return fmt.Errorf("Envoy %s: %w", p.Node, err)
		}
		if v := resp.Header("x-experiment-checkout"); len(v) != 1 || v[0] != r.want[u] {
			return fmt.Errorf("Envoy %s: %s got %q, want [%s]", p.Node, u, v, r.want[u])
		}
	}
	return nil
}

// check fails the test unless every Envoy of ps serves the ramp's
// assignment to every unit of probe.
func (r *ramp) check(what string, ps []*proxy, probe []string) {
	r.h.t.Helper()
	for _, p := range ps {
		if err := r.serves(p, probe); err != nil {
			r.h.t.Fatalf("%s: %v", what, err)
		}
	}
}

// failover is what killing a replica showed.
type failover struct {
	moved     []string      // the Envoys it served
	homes     []string      // the replicas they moved to
	write     time.Duration // the waited write (wait=15s) made right after the kill
	result    string        // its rollout result
	counted   int           // how many proxies it counted: all, an Envoy between two replicas included
	converged time.Duration // from the kill until every moved Envoy served that write
	left      time.Duration // from the kill until the replica left the live set
}

// failOver kills (SIGKILL) replica victim and checks what follows. The
// Envoys it served keep serving their assignments; a waited write through
// another replica (wait=15s) neither hangs nor counts them as applied on
// the dead replica, but waits for them to apply it on another replica:
// every Envoy serves it when it returns; the
// moved Envoys converge on other replicas without being reconfigured; once
// the dead replica's lease expired every live replica lists each of them
// once, on its new replica, and a waited write counts every Envoy applied.
func (r *ramp) failOver(victim int) failover {
	h, t := r.h, r.h.t
	t.Helper()
	dead := replicaID(victim)
	var live []int
	var want []string
	for i := range h.replicas {
		if i != victim {
			live, want = append(live, i), append(want, replicaID(i))
		}
	}
	var f failover
	var moving, staying []*proxy
	for _, p := range h.proxies {
		if h.replicaOf(live[0], p.Node) == dead {
			moving, f.moved = append(moving, p), append(f.moved, p.Node)
		} else {
			staying = append(staying, p)
		}
	}
	if len(moving) == 0 {
		t.Fatalf("replica %s serves no Envoy", dead)
	}
	if err := h.replicas[victim].allotd.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// The dead replica leaves the live set when its lease expires: timed
	// from here, while the rest goes on.
	left := make(chan time.Duration, 1)
	go func(url string) {
		for time.Since(killed) < leaseTTL+10*time.Second {
			if ids, err := liveReplicas(url); err == nil && slices.Equal(ids, want) {
				left <- time.Since(killed)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		close(left)
	}(h.replicas[live[0]].adminURL)
	r.check("right after their replica was killed", moving, r.units[:min(50, len(r.units))])

	next := 0.75
	if r.share == next {
		next = 0.25
	}
	w := r.update(live[0], next, "15s")
	if w.code != http.StatusOK || len(w.probe) == 0 {
		t.Fatalf("waited write through %s after the kill: status %d, %d units moved", replicaID(live[0]), w.code, len(w.probe))
	}
	if w.took > 16*time.Second {
		t.Fatalf("a waited write with wait=15s took %v", w.took)
	}
	// Counting the killed replica's proxy as applied before it applied
	// the write elsewhere would show in r.check below: it would serve the
	// previous assignment.
	f.write, f.result, f.counted = w.took, w.w.Rollout.Result, w.w.Rollout.Counts["applied"]
	t.Logf("waited write after the kill of %s: %s in %v (%d proxies counted applied)", dead, f.result, f.write.Round(time.Millisecond), f.counted)
	if !w.w.Rollout.appliedBy(len(h.proxies)) {
		t.Fatalf("waited write after the kill of %s: %s, %d of %d proxies counted: %+v", dead, f.result, f.counted, len(h.proxies), w.w.Rollout)
	}
	r.check("right after the waited write", h.proxies, w.probe)

	harness.MustEventually(t, 30*time.Second, func() error {
		for _, p := range moving {
			if err := r.serves(p, w.probe); err != nil {
				st := p.MustStats(t)
				return fmt.Errorf("%w (xDS connected %d, healthy replicas %d of %d)", err,
					st["control_plane.connected_state"], st["cluster.allot_xds.membership_healthy"], st["cluster.allot_xds.membership_total"])
			}
		}
		return nil
	})
	f.converged = time.Since(killed)
	t.Logf("%v converged %v after %s was killed", f.moved, f.converged.Round(time.Millisecond), dead)
	var ok bool
	if f.left, ok = <-left; !ok {
		t.Fatalf("%s still live %v after the kill (lease TTL %v): replica %s lists %v", dead, leaseTTL+10*time.Second, leaseTTL, replicaID(live[0]), h.live(live[0]))
	}
	t.Logf("%s left the live set %v after the kill (lease TTL %v)", dead, f.left.Round(time.Millisecond), leaseTTL)
	for _, p := range moving {
		var home string
		for _, via := range live {
			on := h.replicaOf(via, p.Node)
			if on == dead || (home != "" && on != home) {
				t.Fatalf("replica %s lists Envoy %s on %s (elsewhere: %q)", replicaID(via), p.Node, on, home)
			}
			home = on
		}
		f.homes = append(f.homes, home)
	}
	w = r.update(live[len(live)-1], 0.5, "10s")
	if w.code != http.StatusOK || !w.w.Rollout.appliedBy(len(h.proxies)) {
		t.Fatalf("waited write after failover: status %d, %+v", w.code, w.w.Rollout)
	}
	return f
}

// quorumLoss is what taking etcd members away showed.
type quorumLoss struct {
	election  time.Duration   // the first write after the leader was killed
	refused   []time.Duration // each replica's write refused without a quorum
	reads     int             // acknowledged experiments listed without a quorum, summed over the replicas
	readsWant int             // how many should have been
	recovered time.Duration   // from a member's return to the first write acknowledged
	acked     []string        // every write acknowledged, by key
	missing   []string        // those not present at the end
}

// loseQuorum takes etcd members away under the replicas and h.proxies.
// With the leader killed, writes succeed. With a second member killed, a
// write fails fast with 503 naming the store, reads return the last known
// state, /readyz says the store is unavailable, and every Envoy keeps
// serving its assignments. When a member returns, writes succeed again and
// a waited write reaches every Envoy. Every write acknowledged is present
// at the end (a missing one fails the test too).
func (r *ramp) loseQuorum() quorumLoss {
	h, t := r.h, r.h.t
	t.Helper()
	serving := func(what string) { t.Helper(); r.check(what, h.proxies, r.units) }
	serving("before the faults")
	q := quorumLoss{acked: []string{"checkout"}}
	create := func(via int, key string) int {
		t.Helper()
		var out map[string]any
		code := h.replicas[via].api("POST", "/v1/experiments", map[string]any{"key": key, "variations": []string{"a", "b"}}, &out)
		if code == http.StatusCreated {
			q.acked = append(q.acked, key)
		}
		return code
	}

	// The leader goes first: the writes right after wait out the election.
	leader := h.etcd.leader()
	h.etcd.members[leader].proc.Kill()
	for i := range 6 {
		start := time.Now()
		if code := create(i%3, fmt.Sprintf("one-down-%d", i)); code != http.StatusCreated {
			t.Fatalf("write %d through replica %d with one etcd member of three down: status %d", i, i%3+1, code)
		}
		if i == 0 {
			q.election = time.Since(start)
		}
	}
	serving("one etcd member down")

	second := (leader + 1) % 3
	h.etcd.members[second].proc.Kill()
	for via := range h.replicas {
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		start := time.Now()
		code := h.replicas[via].api("POST", "/v1/experiments", map[string]any{"key": fmt.Sprintf("no-quorum-%d", via), "variations": []string{"a", "b"}}, &e)
		took := time.Since(start)
		if code != http.StatusServiceUnavailable || e.Error.Code != "unavailable" || !strings.Contains(e.Error.Message, "etcd") {
			t.Fatalf("write through replica %d without quorum: %d %+v, want 503 naming etcd", via+1, code, e)
		}
		if took > storeTimeout+500*time.Millisecond {
			t.Errorf("write through replica %d without quorum failed after %v, want within -store-timeout (%v, +0.5s for the request)", via+1, took, storeTimeout)
		}
		q.refused = append(q.refused, took)
		var list struct {
			Experiments []struct {
				Key string `json:"key"`
			} `json:"experiments"`
		}
		if code := h.replicas[via].api("GET", "/v1/experiments", nil, &list); code != http.StatusOK {
			t.Fatalf("read through replica %d without quorum: %d", via+1, code)
		}
		listed := map[string]bool{}
		for _, e := range list.Experiments {
			listed[e.Key] = true
		}
		q.readsWant += len(q.acked)
		for _, key := range q.acked {
			if !listed[key] {
				t.Errorf("read through replica %d without quorum: acknowledged %s not listed", via+1, key)
				continue
			}
			q.reads++
		}
		if code := h.replicas[via].api("GET", "/readyz", nil, nil); code != http.StatusServiceUnavailable {
			t.Errorf("replica %d /readyz without quorum: %d, want 503", via+1, code)
		}
	}
	serving("two etcd members of three down")

	h.etcd.start(second, "existing")
	back := time.Now()
	harness.MustEventually(t, 30*time.Second, func() error {
		if code := create(0, "recovered"); code != http.StatusCreated {
			return fmt.Errorf("write after a member returned: status %d", code)
		}
		return nil
	})
	q.recovered = time.Since(back)
	harness.MustEventually(t, 30*time.Second, func() error {
		w := r.update(2, 0.25, "10s")
		if w.code != http.StatusOK {
			return fmt.Errorf("waited write after recovery: %d", w.code)
		}
		if !w.w.Rollout.appliedBy(len(h.proxies)) {
			return fmt.Errorf("waited write after recovery: %+v", w.w.Rollout)
		}
		return nil
	})
	serving("after recovery")
	h.etcd.start(leader, "existing")
	for via := range h.replicas {
		h.replicas[via].allotd.MustWaitHTTP(t, h.replicas[via].adminURL+"/readyz", 30*time.Second)
	}

	for i, key := range q.acked {
		if code := h.replicas[i%3].api("GET", "/v1/experiments/"+key, nil, nil); code != http.StatusOK {
			t.Errorf("acknowledged write %s is missing: GET %d", key, code)
			q.missing = append(q.missing, key)
		}
	}
	t.Logf("%d acknowledged writes, %d present after the faults", len(q.acked), len(q.acked)-len(q.missing))
	return q
}

// TestReplicasRolloutAcrossTheMesh: three etcd members, three allotd
// replicas and three Envoys, each streaming from a different replica. A
// write waited for through any replica returns only after all three Envoys
// acknowledged it: reading through each Envoy right after never shows a
// stale assignment (20 writes). Then the replica serving Envoy 3 is killed
// (SIGKILL), and failOver checks that Envoy 3 keeps serving, reconnects to
// another replica and converges, that a waited write meanwhile neither
// hangs nor counts it as applied on the dead replica, and that once the
// lease expired it counts once, on its new replica; allotctl rollout then
// lists the two live replicas.
func TestReplicasRolloutAcrossTheMesh(t *testing.T) {
	h := startReplicated(t, 3)
	h.sidecars("ha-checkout")
	r := h.startRamp(0, 2000)
	var slowest time.Duration
	for step := 1; step <= 20; step++ {
		via := step % 3
		w := r.update(via, float64(step)/40, "10s")
		if w.code != http.StatusOK || !w.w.Rollout.appliedBy(3) {
			t.Fatalf("step %d through replica %d: status %d, rollout %+v, want applied by 3 proxies", step, via+1, w.code, w.w.Rollout)
		}
		slowest = max(slowest, w.took)
		r.check(fmt.Sprintf("step %d, right after the write through replica %d returned", step, via+1), h.proxies, w.probe)
	}
	t.Logf("20 waited writes through the 3 replicas in turn, each acknowledged by 3 Envoys on 3 replicas; slowest %v", slowest.Round(time.Millisecond))

	f := r.failOver(2)
	if !slices.Equal(f.moved, []string{"ha-checkout-3"}) {
		t.Fatalf("replica r3 served %v, want Envoy 3 only", f.moved)
	}
	// allotctl rollout shows each proxy's replica and the live replicas.
	ctl := harness.MustBuild(t, "./control-plane/cmd/allotctl")
	out, err := exec.Command(ctl, "rollout", "--server", h.replicas[1].adminURL, "--token", adminToken).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "REPLICA") || !strings.Contains(string(out), "replica r1 ") ||
		!strings.Contains(string(out), "replica r2 ") || strings.Contains(string(out), "replica r3 ") {
		t.Fatalf("allotctl rollout: %v\n%s", err, out)
	}
}

// TestReplicasSurviveEtcdFaults takes etcd members away under three
// replicas serving three Envoys (loseQuorum): with the leader killed,
// writes succeed; with two of three members killed, writes fail fast with
// 503 naming the store while reads and every Envoy go on; when a member
// returns everything converges, and every acknowledged write is present.
func TestReplicasSurviveEtcdFaults(t *testing.T) {
	h := startReplicated(t, 3)
	h.sidecars("etcd-fault")
	h.startRamp(0.5, 50).loseQuorum()
}
