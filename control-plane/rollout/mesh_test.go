package rollout_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/control-plane/rollout"
	rolloutetcd "github.com/allotmesh/allot/control-plane/rollout/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
	"github.com/allotmesh/allot/control-plane/xds"
)

// TestWaitKeepsProxiesOfDeadReplicas: a waited proxy whose replica died
// (its lease gone) before it reconnected elsewhere stays pending, named,
// until it shows up on another replica — even while a proxy of another
// cluster uses its node id (a certificate that proves the cluster alone
// lets it); one that disconnected from a live replica drops out; one of a
// cluster the write did not change is not waited for.
func TestWaitKeepsProxiesOfDeadReplicas(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	r1, r2 := rolloutetcd.New(c.Open(t).Conn(), "r1", 2*time.Second), rolloutetcd.New(c.Open(t).Conn(), "r2", 2*time.Second)
	t0 := time.Now().UTC().Round(0)
	p := func(node, cluster, acked string) rollout.Proxy {
		return rollout.Proxy{NodeID: node, Cluster: cluster, Stream: 1, Acked: acked, ConnectedAt: t0}
	}
	rep := rollout.Replica{Revision: 5, Targets: map[string]string{"web": "v2", "api": "a1"}}
	publish := func(r *rolloutetcd.Registry, ps ...rollout.Proxy) {
		t.Helper()
		rep := rep
		rep.Proxies = rollout.Summarize(ps)
		if err := r.Publish(ctx, rep, ps); err != nil {
			t.Fatal(err)
		}
	}
	impostor := p("moves", "api", "a1") // of cluster api, under the node id of web's "moves"
	impostor.Stream = 2                 // a replica numbers its streams
	publish(r1, p("stays", "web", "v2"), p("leaves", "web", "v1"), impostor)
	publish(r2, p("moves", "web", "v1"), p("other", "api", "a1"))
	m := rollout.MeshOf(r1)
	roster, err := r1.Roster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited := roster.Nodes
	targets := rollout.Targets{"web": "v2"}
	// states is where the waited proxies stand by a read of every proxy,
	// and what the replicas' summaries say (settled): never applied while
	// a proxy is not; applied whenever every proxy is, unless a waited
	// proxy's replica is gone (then only a read of every proxy can tell).
	states := func(gone bool) string {
		t.Helper()
		n, ok := m.Settled(ctx, waited, targets, 5)
		ro, err := m.ReadRollout(ctx, waited, targets, 5)
		if err != nil {
			t.Fatal(err)
		}
		all := ro.Count(rollout.StateApplied) == len(ro.Proxies)
		if ok && (!all || n != len(ro.Proxies)) || !ok && all && !gone {
			t.Errorf("settled: %d, %v; every proxy read: %d of %d applied", n, ok, ro.Count(rollout.StateApplied), len(ro.Proxies))
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
	if got, want := states(false), "leaves@r1=pending moves@r2=pending stays@r1=applied"; got != want {
		t.Fatalf("before: %s, want %s", got, want)
	}
	// r2 dies (its lease revoked, as when it expires); "leaves" disconnects
	// from r1, which lives on.
	if err := r2.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	publish(r1, p("stays", "web", "v2"), impostor)
	want := "moves@r2=pending(its replica r2 is gone (lease expired); waiting for it to reconnect to another) stays@r1=applied"
	if got := states(true); got != want {
		t.Fatalf("after r2 died: %s, want %s", got, want)
	}
	// "moves" reconnects to r1 and applies the write there.
	publish(r1, p("stays", "web", "v2"), p("moves", "web", "v2"), impostor)
	if got, want := states(true), "moves@r1=applied stays@r1=applied"; got != want {
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
	reg := rolloutetcd.New(c.Open(t).Conn(), "r1", 10*time.Second)
	const old, target = "00000000000000a1", "00000000000000a2"
	t0 := time.Now().UTC().Round(0)
	ps := make([]rollout.Proxy, clusters)
	targets := rollout.Targets{}
	for i := range ps {
		cluster := fmt.Sprintf("svc-%0*d", xds.MaxClusterBytes-4, i)
		ps[i] = rollout.Proxy{NodeID: fmt.Sprintf("node-%d", i), Cluster: cluster, Stream: int64(i + 1), Acked: target,
			Rejected: &rollout.Rejection{Version: old, Error: "refused", At: t0}, ConnectedAt: t0}
		targets[cluster] = target
	}
	ps[0].Acked = old // one proxy has not applied the write
	rep := rollout.Replica{Revision: 5, Targets: map[string]string(targets)}
	publish := func() {
		t.Helper()
		rep.Proxies = rollout.Summarize(ps)
		if err := reg.Publish(ctx, rep, ps); err != nil {
			t.Fatalf("publish %d clusters: %v", clusters, err)
		}
	}
	rep.Proxies = rollout.Summarize(ps)
	if b, err := json.Marshal(rep); err != nil || len(b) <= 3<<19 {
		t.Fatalf("the replica with every cluster in one record is %d bytes (%v), want more than etcd's limit", len(b), err)
	}
	publish()

	m := rollout.MeshOf(rolloutetcd.New(c.Open(t).Conn(), "reader", time.Second))
	ro, err := m.Registry().Roster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, err := m.Registry().View(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for what, r := range map[string]rollout.Replica{"roster": ro.Replicas["r1"], "view": v.Replicas["r1"]} {
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
		rs, err := m.Registry().Replicas(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n, ok := m.Settled(ctx, waited, targets, 5)
		return fmt.Sprintf("allApplied=%v maySettle=%v settled=%d,%v", rollout.AllApplied(rs, targets, 5), rollout.MaySettle(rs, targets, 5), n, ok)
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
