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
// built from a revision, with its count of applied proxies — and tells
// nothing before the watch delivered them.
func TestRegistrySettled(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	r1, r2 := etcd.New(c.Open(t).Conn(), "r1", 5*time.Second), etcd.New(c.Open(t).Conn(), "r2", 5*time.Second)
	if _, all := r1.Settled(1); all {
		t.Fatal("settled before any watch ran")
	}
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
			applied, all := r1.Settled(rev)
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
