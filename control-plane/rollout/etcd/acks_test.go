package etcd_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/control-plane/rollout/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
)

// TestRegistryAcksApart: a rollout's ACKs rewrite only the replica's few
// records of acknowledgements — no proxy record, no node key — at a few
// dozen bytes a proxy, and View reads every proxy's version and time back
// exactly; a proxy that leaves takes its acknowledgement with it.
func TestRegistryAcksApart(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	s := c.Open(t)
	r := etcd.New(s.Conn(), "r1", 5*time.Second)
	t0 := time.Now().UTC().Truncate(time.Microsecond)
	const n = 5000 // more than one part
	proxies := make([]rollout.Proxy, n)
	for i := range proxies {
		proxies[i] = rollout.Proxy{NodeID: fmt.Sprintf("sidecar~10.0.%d.%d~pod-%d.ns", i/256, i%256, i), Cluster: "web",
			Stream: int64(i + 1), Acked: "v1", AckedAt: t0.Add(time.Duration(i) * time.Millisecond), ConnectedAt: t0}
	}
	rep := rollout.Replica{Revision: 1, Targets: map[string]string{"web": "v1"}}
	if err := r.Publish(ctx, rep, proxies); err != nil {
		t.Fatal(err)
	}
	check := func(what string) {
		t.Helper()
		v := view(t, r)
		if len(v.Proxies) != len(proxies) {
			t.Fatalf("%s: view lists %d proxies, want %d", what, len(v.Proxies), len(proxies))
		}
		got := map[string]rollout.Proxy{}
		for _, p := range v.Proxies {
			got[p.NodeID] = p
		}
		for _, want := range proxies {
			p := got[want.NodeID]
			if p.Acked != want.Acked || !p.AckedAt.Equal(want.AckedAt) {
				t.Fatalf("%s: %s acked %q at %v, want %q at %v", what, want.NodeID, p.Acked, p.AckedAt, want.Acked, want.AckedAt)
			}
		}
	}
	check("first publish")

	// Every proxy applies v2: only acknowledgement records are written.
	var puts, bytes int
	var keys []string
	etcd.SetRegistryTxn(r, func(ops []clientv3.Op, commit func() error) error {
		for _, op := range ops {
			k := string(op.KeyBytes())
			keys = append(keys, k)
			if op.IsPut() {
				puts++
				bytes += len(k) + len(op.ValueBytes())
			}
		}
		return commit()
	})
	rep.Revision, rep.Targets["web"] = 2, "v2"
	for i := range proxies {
		proxies[i].Acked, proxies[i].AckedAt = "v2", t0.Add(time.Minute+time.Duration(i)*time.Microsecond)
	}
	if err := r.Publish(ctx, rep, proxies); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if strings.Contains(k, "/mesh/proxies/") || strings.Contains(k, "/mesh/nodes/") {
			t.Errorf("a rollout's ACKs wrote %s", k)
		}
	}
	if per := bytes / n; puts > 6 || per > 30 {
		t.Errorf("a rollout's ACKs wrote %d records, %d bytes (%d a proxy); want a few, at most 30 bytes a proxy", puts, bytes, per)
	}
	check("after the rollout")

	// A proxy leaves: its acknowledgement goes with its record.
	etcd.SetRegistryTxn(r, nil)
	proxies = append(proxies[:10], proxies[11:]...)
	if err := r.Publish(ctx, rep, proxies); err != nil {
		t.Fatal(err)
	}
	check("after one left")
}

// TestRegistrySettled: Settled answers from the replicas' records the
// shared watch delivered — every live replica settled on a configuration
// built from a revision, with its count of applied proxies.
func TestRegistrySettled(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	r1, r2 := etcd.New(c.Open(t).Conn(), "r1", 5*time.Second), etcd.New(c.Open(t).Conn(), "r2", 5*time.Second)
	watch := r1.Watch(ctx)
	publish := func(r *etcd.Registry, id string, rev int64, settled bool, n int) {
		t.Helper()
		rep := rollout.Replica{Revision: rev, Targets: map[string]string{"web": "v1"}, Settled: settled}
		if settled {
			rep.AppliedProxies = n
		}
		var ps []rollout.Proxy
		for i := range n {
			ps = append(ps, rollout.Proxy{NodeID: fmt.Sprintf("%s-%d", id, i), Cluster: "web", Stream: int64(i + 1), Acked: "v1"})
		}
		if err := r.Publish(ctx, rep, ps); err != nil {
			t.Fatal(err)
		}
	}
	// await polls Settled(rev) after each signal until it says want.
	await := func(rev int64, want string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		got := ""
		for {
			live, all := r1.Settled(rev)
			applied := map[string]int{}
			for id, r := range live {
				applied[id] = r.AppliedProxies
				if r.Lease == 0 {
					t.Fatalf("replica %s's record names no lease", id)
				}
			}
			if got = fmt.Sprint(all, applied); got == want {
				return
			}
			select {
			case <-watch:
			case <-deadline:
				t.Fatalf("Settled(%d) = %s, want %s", rev, got, want)
			}
		}
	}
	publish(r1, "r1", 5, true, 3)
	publish(r2, "r2", 5, false, 2)
	await(5, "false map[r1:3 r2:0]")
	publish(r2, "r2", 6, true, 2)
	await(5, "true map[r1:3 r2:2]")
	await(6, "false map[r1:3 r2:2]") // r1 built from 5 only
	if err := r2.Withdraw(ctx); err != nil {
		t.Fatal(err)
	}
	await(5, "true map[r1:3]")
}

// TestRegistryFollowsFromNew: the shared watch of the replicas' records
// runs from New on, before anything calls Watch, so that a replica's
// first waited write finds it caught up (one it opened would start behind
// that write's rollout, and etcd catches such a watch up only every
// 100 ms): Settled answers from it without a Watch.
func TestRegistryFollowsFromNew(t *testing.T) {
	c := etcdtest.Start(t, 1)
	r1, r2 := etcd.New(c.Open(t).Conn(), "r1", 5*time.Second), etcd.New(c.Open(t).Conn(), "r2", 5*time.Second)
	rep := rollout.Replica{Revision: 7, Targets: map[string]string{"web": "v1"}, Settled: true, AppliedProxies: 1}
	if err := r2.Publish(t.Context(), rep, []rollout.Proxy{{NodeID: "n", Cluster: "web", Stream: 1, Acked: "v1"}}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		live, all := r1.Settled(7)
		if all && live["r2"].AppliedProxies == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Settled(7) = %v, %v with no Watch called: want r2 settled, from the watch New started", live, all)
		}
	}
}

// TestRegistryRestartUnderSameID: while a replica's new run (same ID, a
// new lease, its stream numbers from 1 again) has written its proxies but
// not yet its replica record, readers see the previous run alone: its
// proxies, with their own acknowledgements — never one of the new run's
// joined to an old proxy of the same stream number.
func TestRegistryRestartUnderSameID(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	old := etcd.New(c.Open(t).Conn(), "r1", 10*time.Second)
	rep := rollout.Replica{Revision: 4, Targets: map[string]string{"web": "v2"}}
	if err := old.Publish(ctx, rep, []rollout.Proxy{{NodeID: "x", Cluster: "web", Stream: 5, Acked: "v1"}}); err != nil {
		t.Fatal(err)
	}
	next := etcd.New(c.Open(t).Conn(), "r1", 10*time.Second)
	etcd.SetRegistryTxn(next, func(ops []clientv3.Op, commit func() error) error {
		for _, op := range ops {
			if strings.HasSuffix(string(op.KeyBytes()), "/mesh/replicas/r1") {
				return fmt.Errorf("the replica record's transaction fails")
			}
		}
		return commit()
	})
	// Enough proxies that the publish takes several transactions.
	ps := []rollout.Proxy{{NodeID: "y", Cluster: "web", Stream: 5, Acked: "v2"}}
	for i := range 3000 {
		ps = append(ps, rollout.Proxy{NodeID: fmt.Sprintf("n-%04d", i), Cluster: "web", Stream: int64(i + 6), Acked: "v2",
			Address: strings.Repeat("x", 600)})
	}
	if err := next.Publish(ctx, rep, ps); err == nil {
		t.Fatal("the new run's publish did not fail")
	}
	s := c.Open(t)
	resp, err := s.Client().Get(ctx, "", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	written := 0
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key), "/mesh/acks/r1/") {
			written++
		}
	}
	if written == 0 {
		t.Fatal("the new run wrote none of its records: the test shows nothing")
	}
	reader := etcd.New(s.Conn(), "reader", time.Second)
	for _, p := range view(t, reader).Proxies {
		if p.NodeID != "x" || p.Acked != "v1" {
			t.Errorf("view lists %s acked %q; want the previous run's x alone, acked v1", p.NodeID, p.Acked)
		}
	}
	ro, err := reader.Roster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := ro.Nodes[rollout.NodeKey{Cluster: "web", NodeID: "y"}]; ok && n.On(ro.Replicas["r1"]) {
		t.Errorf("the new run's node y counts as on the replica's current run: %+v, replica %+v", n, ro.Replicas["r1"])
	}
}
