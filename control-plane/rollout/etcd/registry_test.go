package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/control-plane/rollout/etcd"
	storeetcd "github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
)

// TestRegistry has two replicas publish to one cluster: each sees the
// whole mesh, a republish of the same state writes nothing, a proxy that
// moved to another replica counts once, and a replica that stops renewing
// its lease (killed, not withdrawn) leaves the live set when it expires.
func TestRegistry(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	s1, s2 := c.Open(t), c.Open(t)
	r1, r2 := etcd.New(s1.Conn(), "r1", 2*time.Second), etcd.New(s2.Conn(), "r2", 2*time.Second)
	watch := r1.Watch(ctx)
	t0 := time.Now().UTC().Round(0)
	p := func(node string, at time.Time) rollout.Proxy {
		return rollout.Proxy{NodeID: node, Cluster: "web", Stream: 1, Acked: "v1", ConnectedAt: at}
	}
	rep := rollout.Replica{Revision: 3, Targets: map[string]string{"web": "v1"}}
	if err := r1.Publish(ctx, rep, []rollout.Proxy{p("a", t0), p("b", t0)}); err != nil {
		t.Fatal(err)
	}
	if err := r2.Publish(ctx, rep, []rollout.Proxy{p("c", t0)}); err != nil {
		t.Fatal(err)
	}
	v := view(t, r1)
	if got := nodes(v); got != "a@r1 b@r1 c@r2" {
		t.Fatalf("view %s, want a@r1 b@r1 c@r2", got)
	}
	if v.Replicas["r2"].Revision != 3 || v.Where(v.Proxies[2], "v1", 3) != rollout.StateApplied {
		t.Fatalf("replica r2 %+v; proxy c %s", v.Replicas["r2"], v.Where(v.Proxies[2], "v1", 3))
	}

	// Republishing the same state writes nothing.
	before := revision(t, s1)
	if err := r1.Publish(ctx, rep, []rollout.Proxy{p("a", t0), p("b", t0)}); err != nil {
		t.Fatal(err)
	}
	if after := revision(t, s1); after != before {
		t.Errorf("an unchanged publish wrote: etcd revision %d → %d", before, after)
	}

	if got := nodeSet(t, r2); got != "a@r1/web b@r1/web c@r2/web" {
		t.Errorf("nodes %q, want a@r1/web b@r1/web c@r2/web", got)
	}

	// b reconnects to r2 (r1 has not yet noticed): counted once, on r2.
	if err := r2.Publish(ctx, rep, []rollout.Proxy{p("c", t0), p("b", t0.Add(time.Second))}); err != nil {
		t.Fatal(err)
	}
	if got := nodes(view(t, r1)); got != "a@r1 b@r2 c@r2" {
		t.Fatalf("after b moved: %s, want a@r1 b@r2 c@r2", got)
	}
	select {
	case <-watch:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not signal")
	}

	// r1 dies: its client goes away without revoking the lease.
	s1.Close()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := nodes(view(t, r2))
		if got == "b@r2 c@r2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("15 s after r1 died the view is %s, want b@r2 c@r2", got)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if got := nodeSet(t, r2); got != "b@r2/web c@r2/web" {
		t.Errorf("nodes after r1 died: %q, want b@r2/web c@r2/web", got)
	}

	// A withdrawn replica leaves at once.
	if err := r2.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	if got := nodes(view(t, r2)); got != "" {
		t.Fatalf("after withdraw: %q, want empty", got)
	}
}

// TestRegistryLargeFleet: a replica's thousands of proxies go to the
// registry in transactions within etcd's request limits, come back whole,
// and a publish after one proxy changed rewrites that proxy's shard alone.
func TestRegistryLargeFleet(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	s := c.Open(t)
	r := etcd.New(s.Conn(), "r1", 5*time.Second)
	t0 := time.Now().UTC().Round(0)
	// About 2 MiB of records: more than one transaction may carry.
	proxies := make([]rollout.Proxy, 3000)
	for i := range proxies {
		proxies[i] = rollout.Proxy{NodeID: fmt.Sprintf("node-%04d", i), Cluster: "web", Stream: int64(i + 1), Acked: "v1",
			Address: strings.Repeat("x", 600), ConnectedAt: t0}
	}
	rep := rollout.Replica{Revision: 1, Targets: map[string]string{"web": "v1"}}
	if err := r.Publish(ctx, rep, proxies); err != nil {
		t.Fatal(err)
	}
	v := view(t, r)
	if len(v.Proxies) != len(proxies) {
		t.Fatalf("view lists %d proxies, want %d", len(v.Proxies), len(proxies))
	}
	for i, p := range v.Proxies {
		want := proxies[i]
		want.Replica = "r1"
		if !reflect.DeepEqual(p, want) {
			t.Fatalf("proxy %d: %+v, want %+v", i, p, want)
		}
	}

	before := revision(t, s)
	proxies[1234].Acked = "v2"
	if err := r.Publish(ctx, rep, proxies); err != nil {
		t.Fatal(err)
	}
	if after := revision(t, s); after != before+1 {
		t.Errorf("one proxy changed: etcd revision %d → %d, want one write", before, after)
	}
	if p := view(t, r).Proxies[1234]; p.Acked != "v2" {
		t.Errorf("proxy 1234 acked %q, want v2", p.Acked)
	}
}

func view(t *testing.T, r *etcd.Registry) rollout.View {
	t.Helper()
	v, err := r.View(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// nodeSet is Roster's nodes as node@replica/cluster, sorted and joined,
// after checking that it lists the same replicas as View.
func nodeSet(t *testing.T, r *etcd.Registry) string {
	t.Helper()
	ro, err := r.Roster(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := slices.Sorted(maps.Keys(ro.Replicas)), slices.Sorted(maps.Keys(view(t, r).Replicas)); !slices.Equal(got, want) {
		t.Errorf("roster replicas %v, view replicas %v", got, want)
	}
	var out []string
	for k, n := range ro.Nodes {
		out = append(out, k.NodeID+"@"+n.Replica+"/"+k.Cluster)
	}
	slices.Sort(out)
	return strings.Join(out, " ")
}

func nodes(v rollout.View) string {
	out := ""
	for i, p := range v.Proxies {
		if i > 0 {
			out += " "
		}
		out += fmt.Sprintf("%s@%s", p.NodeID, p.Replica)
	}
	return out
}

func revision(t *testing.T, s *storeetcd.Store) int64 {
	t.Helper()
	resp, err := s.Client().Get(t.Context(), "/", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// TestRegistryFailedPublishLeavesNoGhost: a proxy leaves while the
// replica's registry commit fails (as in an etcd leader election); the
// next successful publish removes its node key and its record, whether
// the failed transaction was applied or not, so that neither Roster nor
// View keeps a ghost that every waited write would wait for.
func TestRegistryFailedPublishLeavesNoGhost(t *testing.T) {
	c := etcdtest.Start(t, 1)
	s := c.Open(t)
	injected := errors.New("injected: etcdserver: leader changed")
	for i, tc := range []struct {
		name string
		txn  func(ops []clientv3.Op, commit func() error) error
	}{
		{"not applied", func([]clientv3.Op, func() error) error { return injected }},
		{"applied, reported failed", func(_ []clientv3.Op, commit func() error) error {
			if err := commit(); err != nil {
				return err
			}
			return injected
		}},
		{"first of two leaves", nil}, // b leaves in the failed publish, c in the next
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			id := fmt.Sprintf("r%d", i)
			r := etcd.New(s.Conn(), id, 5*time.Second)
			// One replica at a time in the registry: each subtest's nodes
			// are a, b and c.
			defer r.Withdraw(context.WithoutCancel(ctx))
			p := func(node string) rollout.Proxy {
				return rollout.Proxy{NodeID: node, Cluster: "web", Stream: 1, Acked: "v1"}
			}
			rep := rollout.Replica{Revision: 1, Targets: map[string]string{"web": "v1"}}
			// a and b have records of their own (different shards), so that
			// no later write of a's rewrites b's by chance.
			if err := r.Publish(ctx, rep, []rollout.Proxy{p("a"), p("b"), p("c")}); err != nil {
				t.Fatal(err)
			}
			if n := countKeys(t, s, "mesh/proxies/"+id+"/"); n != 3 {
				t.Fatalf("%d shard records for a, b and c, want 3 (pick other node names)", n)
			}
			txn := tc.txn
			if txn == nil {
				txn = func([]clientv3.Op, func() error) error { return injected }
			}
			etcd.SetRegistryTxn(r, txn)
			if err := r.Publish(ctx, rep, []rollout.Proxy{p("a"), p("c")}); !errors.Is(err, injected) {
				t.Fatalf("publish with a failing commit: %v, want the injected error", err)
			}
			etcd.SetRegistryTxn(r, nil)
			want := []rollout.Proxy{p("a"), p("c")}
			if tc.txn == nil {
				want = want[:1]
			}
			if err := r.Publish(ctx, rep, want); err != nil {
				t.Fatal(err)
			}
			wantNodes, wantView := "a@"+id+"/web c@"+id+"/web", "a@"+id+" c@"+id
			if tc.txn == nil {
				wantNodes, wantView = "a@"+id+"/web", "a@"+id
			}
			if got := nodeSet(t, r); got != wantNodes {
				t.Errorf("roster %q after the next publish, want %q", got, wantNodes)
			}
			if got := nodes(view(t, r)); got != wantView {
				t.Errorf("view %q after the next publish, want %q", got, wantView)
			}
			if n, want := countKeys(t, s, "mesh/nodes/"+id+"/"), len(want); n != want {
				t.Errorf("%d node keys, want %d", n, want)
			}
			if n, want := countKeys(t, s, "mesh/proxies/"+id+"/"), len(want); n != want {
				t.Errorf("%d shard records, want %d", n, want)
			}
			// Known again: an unchanged publish writes nothing.
			before := revision(t, s)
			if err := r.Publish(ctx, rep, want); err != nil {
				t.Fatal(err)
			}
			if after := revision(t, s); after != before {
				t.Errorf("an unchanged publish after the reconciliation wrote: etcd revision %d → %d", before, after)
			}
		})
	}
}

// countKeys is the number of keys under prefix (within any store prefix).
func countKeys(t *testing.T, s *storeetcd.Store, prefix string) int {
	t.Helper()
	resp, err := s.Client().Get(t.Context(), "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key), prefix) {
			n++
		}
	}
	return n
}

// TestRegistryReadsEarlierLayout: a replica record listing its clusters
// itself and a shard in one record, as replicas wrote them before cluster
// records and parts, are read: its targets, summaries and proxies.
func TestRegistryReadsEarlierLayout(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	s := c.Open(t)
	for k, v := range map[string]string{
		storeetcd.DefaultPrefix + "mesh/replicas/old":      `{"id":"old","revision":3,"targets":{"web":"v1"},"proxies":{"web":{"proxies":1,"acked":{"v1":1}}}}`,
		storeetcd.DefaultPrefix + "mesh/proxies/old/7":     `[{"replica":"old","node_id":"a","cluster":"web","stream":1,"acked":"v1","connected_at":"2026-11-27T00:00:00Z"}]`,
		storeetcd.DefaultPrefix + "mesh/nodes/old/a/1/web": "",
	} {
		if _, err := s.Client().Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	r := etcd.New(s.Conn(), "reader", time.Second)
	v := view(t, r)
	old := v.Replicas["old"]
	if old.Revision != 3 || old.Targets["web"] != "v1" || old.Proxies["web"].Acked["v1"] != 1 || nodes(v) != "a@old" {
		t.Errorf("earlier layout read as replica %+v, proxies %s", old, nodes(v))
	}
	if got := nodeSet(t, r); got != "a@old/web" {
		t.Errorf("roster %q, want a@old/web", got)
	}
}
