package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/mesh"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/control-plane/xds"
	"github.com/allotmesh/allot/control-plane/xds/loadgen"
)

// replica is one allotd replica run in-process on a shared etcd cluster.
type replica struct {
	addrs  Addrs
	cancel context.CancelFunc
	done   chan error
}

func startReplica(t *testing.T, c *etcdtest.Cluster, endpoint, id string) *replica {
	t.Helper()
	tokens, err := admin.ParseTokens([]byte(`{"tokens":[{"name":"root","role":"admin","token":"` + testToken + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	db, err := etcd.Open(t.Context(), clientv3.Config{Endpoints: []string{endpoint}}, etcd.WithPrefix("/replica-test/"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ready := make(chan Addrs, 1)
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{cancel: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- Run(ctx, db, Config{
			AdminAddr: "127.0.0.1:0", XDSAddr: "127.0.0.1:0", Tokens: tokens,
			Mesh:     translate.Mesh{WasmPath: "/allot.wasm", NativePath: "/liballot.so"},
			Ready:    func(a Addrs) { ready <- a },
			Registry: db.Registry(id, 2*time.Second), ReplicaID: id,
		})
	}()
	t.Cleanup(r.stop)
	select {
	case r.addrs = <-ready:
	case err := <-r.done:
		t.Fatalf("replica %s: %v", id, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("replica %s not ready after 10 s", id)
	}
	return r
}

func (r *replica) stop() {
	if r.cancel != nil {
		r.cancel()
		<-r.done
		r.cancel = nil
	}
}

// rolloutBody is a waited write's or GET /v1/rollout's rollout.
type rolloutBody struct {
	Result  string            `json:"result"`
	Error   string            `json:"error"`
	Targets map[string]string `json:"targets"`
	Counts  map[string]int    `json:"counts"`
	Proxies []struct {
		Replica       string `json:"replica"`
		NodeID        string `json:"nodeId"`
		State         string `json:"state"`
		TargetVersion string `json:"targetVersion"`
		AckedVersion  string `json:"ackedVersion"`
	} `json:"proxies"`
}

func (r *replica) call(t *testing.T, method, path string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+r.addrs.Admin.String()+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode
}

// TestReplicasShareOneMesh runs three replicas on a three-member etcd
// cluster, each serving its own fleet of simulated proxies of one cluster:
// a write waited for through replica 1 returns applied only when every
// proxy of all three fleets runs it, GET /v1/rollout on any replica lists
// every proxy once with its replica, and a replica that stops takes its
// proxies out of the rollout.
func TestReplicasShareOneMesh(t *testing.T) {
	c := etcdtest.Start(t, 3)
	var reps []*replica
	var fleets []*loadgen.Fleet
	for i := range 3 {
		r := startReplica(t, c, c.Endpoints()[i], fmt.Sprintf("r%d", i+1))
		reps = append(reps, r)
		f, err := loadgen.Connect(t.Context(), loadgen.Config{Addr: r.addrs.XDS.String(), Clients: 4, Cluster: "web", Node: fmt.Sprintf("r%d-web", i+1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		fleets = append(fleets, f)
	}
	// Every replica sees all twelve proxies.
	eventually(t, 20*time.Second, "every replica lists the twelve proxies", func() error {
		for _, r := range reps {
			var ro rolloutBody
			r.call(t, "GET", "/v1/rollout", nil, &ro)
			if len(ro.Proxies) != 12 {
				return fmt.Errorf("replica %s lists %d proxies, want 12: %+v", r.addrs.Admin, len(ro.Proxies), ro)
			}
		}
		return nil
	})

	var revision any
	for step := range 5 {
		def := map[string]any{"key": "checkout", "variations": []string{"a", "b"}, "weights": []float64{1 - float64(step)/5, float64(step) / 5}}
		if revision != nil {
			def["revision"] = revision
		}
		var w struct {
			Experiment map[string]any `json:"experiment"`
			Rollout    rolloutBody    `json:"rollout"`
		}
		method, path, want := "PUT", "/v1/experiments/checkout?wait=10s", http.StatusOK
		if step == 0 {
			method, path, want = "POST", "/v1/experiments?wait=10s", http.StatusCreated
		}
		if code := reps[0].call(t, method, path, def, &w); code != want {
			t.Fatalf("step %d: %s %s: %d %+v", step, method, path, code, w)
		}
		if w.Rollout.Result != "applied" || w.Rollout.Counts["applied"] != 12 || len(w.Rollout.Counts) != 1 || len(w.Rollout.Proxies) != 0 {
			t.Fatalf("step %d: rollout %+v, want applied by 12 proxies, none listed", step, w.Rollout)
		}
		revision = w.Experiment["revision"]
		target := w.Rollout.Targets["web"]
		// Right after, another replica lists all twelve on it.
		var st rolloutBody
		reps[1].call(t, "GET", "/v1/rollout", nil, &st)
		if len(st.Proxies) != 12 || st.Counts["applied"] != 12 {
			t.Fatalf("step %d: status right after: %+v, want 12 applied", step, st)
		}
		replicas := map[string]int{}
		for _, p := range st.Proxies {
			replicas[p.Replica]++
			if p.State != "applied" || p.AckedVersion != target {
				t.Fatalf("step %d: proxy %+v, want applied %s", step, p, target)
			}
		}
		if len(replicas) != 3 {
			t.Fatalf("step %d: proxies by replica %v, want 4 on each of 3", step, replicas)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		for i, f := range fleets {
			if err := f.Await(ctx, target); err != nil {
				t.Fatalf("step %d: fleet on replica %d: %v", step, i+1, err)
			}
		}
		cancel()
	}

	// Replica 3 stops (gracefully: it withdraws its lease): its proxies
	// leave the mesh at once; a waited write covers the other eight.
	reps[2].stop()
	var ro rolloutBody
	reps[0].call(t, "GET", "/v1/rollout", nil, &ro)
	if len(ro.Proxies) != 8 {
		t.Fatalf("after replica 3 stopped: %d proxies, want 8", len(ro.Proxies))
	}
	var w struct {
		Rollout rolloutBody `json:"rollout"`
	}
	def := map[string]any{"key": "checkout", "variations": []string{"a", "b"}, "weights": []float64{0.5, 0.5}, "revision": revision}
	if code := reps[1].call(t, "PUT", "/v1/experiments/checkout?wait=10s", def, &w); code != http.StatusOK {
		t.Fatalf("write after replica 3 stopped: %d %+v", code, w)
	}
	if w.Rollout.Result != "applied" || w.Rollout.Counts["applied"] != 8 {
		t.Fatalf("write after replica 3 stopped: rollout %+v, want applied by 8", w.Rollout)
	}
}

// TestWaitKeepsProxiesOfDeadReplicas: a waited proxy whose replica died
// (its lease gone) before it reconnected elsewhere stays pending, named,
// until it shows up on another replica; one that disconnected from a live
// replica drops out; one of a cluster the write did not change is not
// waited for.
func TestWaitKeepsProxiesOfDeadReplicas(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	r1, r2 := c.Open(t).Registry("r1", 2*time.Second), c.Open(t).Registry("r2", 2*time.Second)
	t0 := time.Now().UTC().Round(0)
	p := func(node, cluster, acked string) mesh.Proxy {
		return mesh.Proxy{NodeID: node, Cluster: cluster, Stream: 1, Acked: acked, ConnectedAt: t0}
	}
	rep := mesh.Replica{Revision: 5, Targets: map[string]string{"web": "v2", "api": "a1"}}
	publish := func(r *etcd.Registry, ps ...mesh.Proxy) {
		t.Helper()
		rep := rep
		rep.Proxies = mesh.Summarize(ps)
		if err := r.Publish(ctx, rep, ps); err != nil {
			t.Fatal(err)
		}
	}
	publish(r1, p("stays", "web", "v2"), p("leaves", "web", "v1"))
	publish(r2, p("moves", "web", "v1"), p("other", "api", "a1"))
	m := meshRollouts{reg: r1}
	roster, err := r1.Roster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited := roster.Nodes
	targets := xds.Targets{"web": "v2"}
	// states is where the waited proxies stand by a read of every proxy,
	// and what the replicas' summaries and the node keys say (settled).
	states := func() string {
		t.Helper()
		n, ok := m.settled(ctx, waited, targets, 5)
		ro, err := m.rollout(ctx, waited, targets, 5)
		if err != nil {
			t.Fatal(err)
		}
		if want := ro.Count(xds.StateApplied) == len(ro.Proxies); ok != want || ok && n != len(ro.Proxies) {
			t.Errorf("settled: %d, %v; every proxy read: %d of %d applied", n, ok, ro.Count(xds.StateApplied), len(ro.Proxies))
		}
		var out []string
		for _, ps := range ro.Proxies {
			s := fmt.Sprintf("%s@%s=%s", ps.NodeID, ps.Replica, ps.State)
			if ps.Error != "" {
				s += "(" + ps.Error + ")"
			}
			out = append(out, s)
		}
		return strings.Join(out, " ")
	}
	if got, want := states(), "leaves@r1=pending moves@r2=pending stays@r1=applied"; got != want {
		t.Fatalf("before: %s, want %s", got, want)
	}
	// r2 dies (its lease revoked, as when it expires); "leaves" disconnects
	// from r1, which lives on.
	if err := r2.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	publish(r1, p("stays", "web", "v2"))
	want := "moves@r2=pending(its replica r2 is gone (lease expired); waiting for it to reconnect to another) stays@r1=applied"
	if got := states(); got != want {
		t.Fatalf("after r2 died: %s, want %s", got, want)
	}
	// "moves" reconnects to r1 and applies the write there.
	publish(r1, p("stays", "web", "v2"), p("moves", "web", "v2"))
	if got, want := states(), "moves@r1=applied stays@r1=applied"; got != want {
		t.Fatalf("after the failover: %s, want %s", got, want)
	}
}

// TestWaitManyClusters: a replica with 5,000 clusters of 128-byte names,
// each with a proxy and its summary (more than etcd's request limit, 1.5
// MiB, if one record held them), publishes them; Roster and View return
// every one; and the waited-write checks read from them (allApplied,
// maySettle, settled) tell a write applied by all but one proxy from one
// applied by every proxy.
func TestWaitManyClusters(t *testing.T) {
	const clusters = 5000
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	reg := c.Open(t).Registry("r1", 10*time.Second)
	const old, target = "00000000000000a1", "00000000000000a2"
	t0 := time.Now().UTC().Round(0)
	ps := make([]mesh.Proxy, clusters)
	targets := xds.Targets{}
	for i := range ps {
		cluster := fmt.Sprintf("svc-%0*d", xds.MaxClusterBytes-4, i)
		ps[i] = mesh.Proxy{NodeID: fmt.Sprintf("node-%d", i), Cluster: cluster, Stream: int64(i + 1), Acked: target,
			Rejected: &mesh.Rejection{Version: old, Error: "refused", At: t0}, ConnectedAt: t0}
		targets[cluster] = target
	}
	ps[0].Acked = old // one proxy has not applied the write
	rep := mesh.Replica{Revision: 5, Targets: map[string]string(targets)}
	publish := func() {
		t.Helper()
		rep.Proxies = mesh.Summarize(ps)
		if err := reg.Publish(ctx, rep, ps); err != nil {
			t.Fatalf("publish %d clusters: %v", clusters, err)
		}
	}
	rep.Proxies = mesh.Summarize(ps)
	if b, err := json.Marshal(rep); err != nil || len(b) <= 3<<19 {
		t.Fatalf("the replica with every cluster in one record is %d bytes (%v), want more than etcd's limit", len(b), err)
	}
	publish()

	m := meshRollouts{reg: c.Open(t).Registry("reader", time.Second)}
	ro, err := m.reg.Roster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.reg.View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for what, r := range map[string]mesh.Replica{"roster": ro.Replicas["r1"], "view": v.Replicas["r1"]} {
		if len(r.Targets) != clusters || len(r.Proxies) != clusters || r.Proxies[ps[1].Cluster].Acked[target] != 1 {
			t.Errorf("%s: %d targets, %d summaries, summary of %.12s…: %+v; want %d, %d, one proxy applied", what,
				len(r.Targets), len(r.Proxies), ps[1].Cluster, r.Proxies[ps[1].Cluster], clusters, clusters)
		}
	}
	if len(ro.Nodes) != clusters || len(v.Proxies) != clusters {
		t.Fatalf("roster %d nodes, view %d proxies; want %d", len(ro.Nodes), len(v.Proxies), clusters)
	}
	waited := ro.Nodes
	checks := func() string {
		t.Helper()
		rs, err := m.reg.Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, ok := m.settled(ctx, waited, targets, 5)
		return fmt.Sprintf("allApplied=%v maySettle=%v settled=%d,%v", allApplied(rs, targets, 5), maySettle(rs, targets, 5), n, ok)
	}
	if got, want := checks(), "allApplied=false maySettle=false settled=0,false"; got != want {
		t.Errorf("one proxy pending: %s, want %s", got, want)
	}
	ps[0].Acked = target
	publish()
	if got, want := checks(), fmt.Sprintf("allApplied=true maySettle=true settled=%d,true", clusters); got != want {
		t.Errorf("every proxy applied: %s, want %s", got, want)
	}
}
