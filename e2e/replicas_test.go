//go:build e2e

package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/e2e/harness"
)

// leaseTTL is the replicas' lease in these tests: how long a killed
// replica's proxies stay in the live set.
const leaseTTL = 3 * time.Second

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
	layout, err := harness.NewEtcdCluster(harness.Build(t, harness.EtcdPackage), t.TempDir(), n)
	if err != nil {
		t.Fatal(err)
	}
	c := &etcdCluster{t: t, layout: layout}
	for _, m := range layout.Members {
		c.members = append(c.members, &etcdMember{EtcdMember: m})
	}
	for i := range c.members {
		c.start(i, "new")
	}
	for _, m := range c.members {
		m.proc.WaitHTTP(t, fmt.Sprintf("http://%s/health", m.endpoint()), 30*time.Second)
	}
	return c
}

func (c *etcdCluster) start(i int, state string) {
	c.members[i].proc = harness.StartCmd(c.t, "etcd-"+c.members[i].Name, c.layout.Command(i, state))
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
}

func startReplicated(t *testing.T, n int) *replicated {
	t.Helper()
	h := &replicated{t: t, etcd: startEtcd(t, 3)}
	base := prepareSystem(t, wasmArtifact)
	for i := range n {
		s := *base
		s.xdsPort, s.adminPort = harness.FreePort(t), harness.FreePort(t)
		s.args = []string{"-store", h.etcd.storeFlag(), "-replica-id", fmt.Sprintf("r%d", i+1),
			"-lease-ttl", leaseTTL.String(), "-store-timeout", "2s"}
		s.startAllotd()
		h.replicas = append(h.replicas, &s)
	}
	return h
}

// sidecar starts an Envoy whose xDS cluster is envoy-configs/xds-replicas.yaml
// with replica home at priority 0 and the others at priority 1.
func (h *replicated) sidecar(home int, node, cluster string) *proxy {
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
	return startEnvoy(h.t, wasmArtifact.sidecar, s.xdsPort, s.filter(), node, cluster, map[string]string{
		"port_value: 8081": "port_value: " + echoPort,
		tail:               frag,
	})
}

// replicaOf polls replica via's GET /v1/rollout until node is listed once
// and returns the replica it is connected to.
func (h *replicated) replicaOf(via int, node string) string {
	h.t.Helper()
	var got string
	harness.Eventually(h.t, 20*time.Second, func() error {
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

// TestReplicasRolloutAcrossTheMesh: three etcd members, three allotd
// replicas and three Envoys, each streaming from a different replica. A
// write waited for through any replica returns only after all three Envoys
// acknowledged it: reading through each Envoy right after never shows a
// stale assignment (20 writes). Then the replica serving Envoy 3 is killed
// (SIGKILL): Envoy 3 keeps serving its assignments, reconnects to another
// replica without being reconfigured, a waited write meanwhile neither
// hangs nor counts Envoy 3 as applied on the dead replica, and once the
// dead replica's lease expired Envoy 3 is listed once, on its new replica,
// with the new configuration.
func TestReplicasRolloutAcrossTheMesh(t *testing.T) {
	h := startReplicated(t, 3)
	var proxies []*proxy
	for i := range 3 {
		proxies = append(proxies, h.sidecar(i, fmt.Sprintf("ha-checkout-%d", i+1), "checkout-svc"))
	}
	for i := range 3 {
		for via := range 3 {
			if got, want := h.replicaOf(via, fmt.Sprintf("ha-checkout-%d", i+1)), fmt.Sprintf("r%d", i+1); got != want {
				t.Fatalf("replica %d sees Envoy %d on %s, want %s", via+1, i+1, got, want)
			}
		}
	}

	var w waitedWrite
	h.replicas[0].mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", checkoutRamp(0), &w)
	if w.Rollout.Result != "applied" || len(w.Rollout.Proxies) != 3 {
		t.Fatalf("create with wait through replica 1: %+v", w.Rollout)
	}
	units := userIDs(2000)
	assign := func(def map[string]any) map[string]string { return assignments(t, def, units) }
	prev := assign(checkoutRamp(0))
	revision := w.Experiment["revision"]
	var slowest time.Duration
	write := func(via int, def map[string]any, timeout string) waitedWrite {
		t.Helper()
		def["revision"] = revision
		var w waitedWrite
		h.replicas[via].mustAPI(http.StatusOK, "PUT", "/v1/experiments/checkout?wait="+timeout, def, &w)
		revision = w.Experiment["revision"]
		return w
	}
	check := func(what string, ps []*proxy, want map[string]string, probe []string) {
		t.Helper()
		for i, p := range ps {
			for _, u := range probe {
				r, err := p.get(map[string][]string{"x-user-id": {u}})
				if err != nil {
					t.Fatal(err)
				}
				if v := r.Header("x-experiment-checkout"); len(v) != 1 || v[0] != want[u] {
					t.Fatalf("%s: Envoy %d: %s got %q, want [%s]", what, i+1, u, v, want[u])
				}
			}
		}
	}
	moved := func(want map[string]string) []string {
		var probe []string
		for _, u := range units {
			if want[u] != prev[u] && len(probe) < 15 {
				probe = append(probe, u)
			}
		}
		return probe
	}
	for step := 1; step <= 20; step++ {
		def := checkoutRamp(float64(step) / 40)
		want := assign(def)
		probe := moved(want)
		via := step % 3
		start := time.Now()
		w := write(via, def, "10s")
		slowest = max(slowest, time.Since(start))
		if w.Rollout.Result != "applied" || len(w.Rollout.Proxies) != 3 {
			t.Fatalf("step %d through replica %d: rollout %+v, want applied by 3 proxies", step, via+1, w.Rollout)
		}
		check(fmt.Sprintf("step %d, right after the write through replica %d returned", step, via+1), proxies, want, probe)
		prev = want
	}
	t.Logf("20 waited writes through the 3 replicas in turn, each acknowledged by 3 Envoys on 3 replicas; slowest %v", slowest.Round(time.Millisecond))

	// Kill the replica serving Envoy 3.
	if err := h.replicas[2].allotd.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	check("right after its replica was killed", proxies[2:], prev, units[:50])

	def := checkoutRamp(0.75)
	want := assign(def)
	probe := moved(want)
	start := time.Now()
	w = write(0, def, "15s")
	took := time.Since(start)
	if took > 16*time.Second {
		t.Fatalf("a waited write with wait=15s took %v", took)
	}
	for _, p := range w.Rollout.Proxies {
		if p.NodeID == "ha-checkout-3" && p.State == "applied" && p.Replica == "r3" {
			t.Fatalf("the killed replica's proxy counted as applied: %+v", w.Rollout)
		}
	}
	t.Logf("waited write after the kill: %s in %v (%d proxies)", w.Rollout.Result, took.Round(time.Millisecond), len(w.Rollout.Proxies))
	check("after the waited write", proxies[:2], want, probe)

	// Envoy 3 converges on another replica, and counts once there.
	harness.Eventually(t, 30*time.Second, func() error {
		for _, u := range probe {
			r, err := proxies[2].get(map[string][]string{"x-user-id": {u}})
			if err != nil {
				return err
			}
			if v := r.Header("x-experiment-checkout"); len(v) != 1 || v[0] != want[u] {
				st := proxies[2].Stats(t)
				return fmt.Errorf("Envoy 3: %s got %q, want [%s] (xDS connected %d, healthy replicas %d of %d)", u, v, want[u],
					st["control_plane.connected_state"], st["cluster.allot_xds.membership_healthy"], st["cluster.allot_xds.membership_total"])
			}
		}
		return nil
	})
	t.Logf("Envoy 3 converged %v after its replica was killed", time.Since(killed).Round(time.Millisecond))
	// The killed replica leaves the live set when its lease expires; Envoy
	// 3 then counts once, on its new replica.
	harness.Eventually(t, leaseTTL+10*time.Second, func() error {
		var ro struct {
			Replicas []struct {
				ID string `json:"id"`
			} `json:"replicas"`
		}
		h.replicas[0].mustAPI(http.StatusOK, "GET", "/v1/rollout", nil, &ro)
		if len(ro.Replicas) != 2 || ro.Replicas[0].ID != "r1" || ro.Replicas[1].ID != "r2" {
			return fmt.Errorf("live replicas %+v, want r1 and r2", ro.Replicas)
		}
		return nil
	})
	t.Logf("the killed replica left the live set %v after the kill (lease TTL %v)", time.Since(killed).Round(time.Millisecond), leaseTTL)
	for via := range 2 {
		if on := h.replicaOf(via, "ha-checkout-3"); on == "r3" {
			t.Fatalf("replica %d lists Envoy 3 on the killed replica", via+1)
		}
	}
	// allotctl rollout shows each proxy's replica and the live replicas.
	ctl := harness.Build(t, "./control-plane/cmd/allotctl")
	out, err := exec.Command(ctl, "rollout", "--server", h.replicas[1].adminURL, "--token", adminToken).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "REPLICA") || !strings.Contains(string(out), "replica r1 ") ||
		!strings.Contains(string(out), "replica r2 ") || strings.Contains(string(out), "replica r3 ") {
		t.Fatalf("allotctl rollout: %v\n%s", err, out)
	}
	// And a waited write counts it, on its new replica.
	w = write(1, checkoutRamp(0.5), "10s")
	if w.Rollout.Result != "applied" || len(w.Rollout.Proxies) != 3 {
		t.Fatalf("waited write after failover: %+v", w.Rollout)
	}
}

// TestReplicasSurviveEtcdFaults takes etcd members away under three
// replicas serving three Envoys. With one member of three killed, writes
// succeed. With two killed, a write fails fast with 503 naming the store,
// reads return the last known state, /readyz says the store is unavailable,
// and every Envoy keeps serving its assignments. When a member returns,
// writes succeed again and a waited write reaches all three Envoys. Every
// write that was acknowledged is present at the end.
func TestReplicasSurviveEtcdFaults(t *testing.T) {
	h := startReplicated(t, 3)
	var proxies []*proxy
	for i := range 3 {
		proxies = append(proxies, h.sidecar(i, fmt.Sprintf("etcd-fault-%d", i+1), "checkout-svc"))
		h.replicaOf(0, fmt.Sprintf("etcd-fault-%d", i+1))
	}
	var w waitedWrite
	h.replicas[0].mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", checkoutRamp(0.5), &w)
	if w.Rollout.Result != "applied" || len(w.Rollout.Proxies) != 3 {
		t.Fatalf("create with wait: %+v", w.Rollout)
	}
	units := userIDs(50)
	want := assignments(t, checkoutRamp(0.5), units)
	serving := func(what string) {
		t.Helper()
		for i, p := range proxies {
			for _, u := range units {
				r, err := p.get(map[string][]string{"x-user-id": {u}})
				if err != nil {
					t.Fatalf("%s: Envoy %d: %v", what, i+1, err)
				}
				if v := r.Header("x-experiment-checkout"); len(v) != 1 || v[0] != want[u] {
					t.Fatalf("%s: Envoy %d: %s got %q, want [%s]", what, i+1, u, v, want[u])
				}
			}
		}
	}
	acked := []string{"checkout"}
	create := func(via int, key string) int {
		t.Helper()
		var out map[string]any
		code := h.replicas[via].api("POST", "/v1/experiments", map[string]any{"key": key, "variations": []string{"a", "b"}}, &out)
		if code == http.StatusCreated {
			acked = append(acked, key)
		}
		return code
	}

	// The leader goes first: the writes right after wait out the election.
	leader := h.etcd.leader()
	h.etcd.members[leader].proc.Kill()
	for i := range 6 {
		if code := create(i%3, fmt.Sprintf("one-down-%d", i)); code != http.StatusCreated {
			t.Fatalf("write %d through replica %d with one etcd member of three down: status %d", i, i%3+1, code)
		}
	}
	serving("one etcd member down")

	second := (leader + 1) % 3
	h.etcd.members[second].proc.Kill()
	for via := range 3 {
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
		if took > 5*time.Second {
			t.Errorf("write through replica %d without quorum failed after %v, want within -store-timeout (2s) and a margin", via+1, took)
		}
		var got map[string]any
		if code := h.replicas[via].api("GET", "/v1/experiments/checkout", nil, &got); code != http.StatusOK {
			t.Fatalf("read through replica %d without quorum: %d", via+1, code)
		}
		if code := h.replicas[via].api("GET", "/readyz", nil, nil); code != http.StatusServiceUnavailable {
			t.Errorf("replica %d /readyz without quorum: %d, want 503", via+1, code)
		}
	}
	serving("two etcd members of three down")

	h.etcd.start(second, "existing")
	harness.Eventually(t, 30*time.Second, func() error {
		if code := create(0, "recovered"); code != http.StatusCreated {
			return fmt.Errorf("write after a member returned: status %d", code)
		}
		return nil
	})
	want = assignments(t, checkoutRamp(0.25), units)
	def := checkoutRamp(0.25)
	def["revision"] = w.Experiment["revision"]
	harness.Eventually(t, 30*time.Second, func() error {
		var got map[string]any
		h.replicas[2].mustAPI(http.StatusOK, "GET", "/v1/experiments/checkout", nil, &got)
		def["revision"] = got["revision"]
		if code := h.replicas[2].api("PUT", "/v1/experiments/checkout?wait=10s", def, &w); code != http.StatusOK {
			return fmt.Errorf("waited write after recovery: %d", code)
		}
		if w.Rollout.Result != "applied" || len(w.Rollout.Proxies) != 3 {
			return fmt.Errorf("waited write after recovery: %+v", w.Rollout)
		}
		return nil
	})
	serving("after recovery")
	h.etcd.start(leader, "existing")
	for via := range 3 {
		h.replicas[via].allotd.WaitHTTP(t, h.replicas[via].adminURL+"/readyz", 30*time.Second)
	}

	present := 0
	for _, key := range acked {
		if code := h.replicas[present%3].api("GET", "/v1/experiments/"+key, nil, nil); code == http.StatusOK {
			present++
		} else {
			t.Errorf("acknowledged write %s is missing: GET %d", key, code)
		}
	}
	t.Logf("%d acknowledged writes, %d present after the faults", len(acked), present)
}
