package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/control-plane/rollout/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
)

// TestRegistryReconcileKeepsLiveProxies: after a failed publish (its
// outcome unknown), the next publish reconciles the replica's keys; when
// the crowded shard shrank, moving proxies to lower parts, a reader
// between any two of its transactions still lists every live proxy (a
// waited write takes a proxy missing from a live replica for gone), and
// afterwards no stale part is left.
func TestRegistryReconcileKeepsLiveProxies(t *testing.T) {
	c := etcdtest.Start(t, 1)
	ctx := t.Context()
	s := c.Open(t)
	reader := etcd.New(c.Open(t).Conn(), "reader", time.Second)
	fleet := crowd(200)
	for i := range fleet {
		fleet[i].Replica = ""
	}
	// Each round leaves a different number of proxies, so different
	// parts shrink and move.
	for round, keep := range []int{160, 120, 60, 1} {
		id := fmt.Sprintf("r%d", round)
		reg := etcd.New(s.Conn(), id, 10*time.Second)
		rep := rollout.Replica{Revision: 1, Targets: map[string]string{fleet[0].Cluster: "v1"}}
		if err := reg.Publish(ctx, rep, fleet); err != nil {
			t.Fatal(err)
		}
		etcd.SetRegistryTxn(reg, func([]clientv3.Op, func() error) error { return errors.New("injected") })
		if err := reg.Publish(ctx, rep, fleet[1:]); err == nil {
			t.Fatal("the injected failure was not reported")
		}
		live := fleet[len(fleet)-keep:]
		want := map[string]bool{}
		for _, p := range live {
			want[p.NodeID] = true
		}
		listed := func() (int, error) {
			v, err := reader.View(ctx)
			if err != nil {
				return 0, err
			}
			n := 0
			for _, p := range v.Proxies {
				if p.Replica == id && want[p.NodeID] {
					n++
				}
			}
			return n, nil
		}
		var misses []string
		txns := 0
		// The hook runs the transactions of one stage at once: each reads
		// after its own commit.
		done := make(chan struct{}, 1)
		done <- struct{}{}
		etcd.SetRegistryTxn(reg, func(ops []clientv3.Op, commit func() error) error {
			<-done
			defer func() { done <- struct{}{} }()
			if err := commit(); err != nil {
				return err
			}
			txns++
			n, err := listed()
			if err != nil {
				return err
			}
			if n < len(live) {
				misses = append(misses, fmt.Sprintf("after transaction %d (%d ops): %d of %d", txns, len(ops), n, len(live)))
			}
			return nil
		})
		if err := reg.Publish(ctx, rep, live); err != nil {
			t.Fatal(err)
		}
		etcd.SetRegistryTxn(reg, nil)
		if len(misses) > 0 {
			t.Errorf("round %d (%d of 200 proxies kept): a reader missed live proxies: %v", round, keep, misses)
		}
		if n, err := listed(); err != nil || n != len(live) {
			t.Errorf("round %d: %d of %d live proxies listed after the publish (%v)", round, n, len(live), err)
		}
		v, err := reader.View(ctx)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range v.Proxies {
			if p.Replica == id {
				n++
			}
		}
		if n != len(live) {
			t.Errorf("round %d: %d proxies listed for %s, want %d (stale parts left)", round, n, id, len(live))
		}
		if err := reg.Withdraw(context.WithoutCancel(ctx)); err != nil {
			t.Fatal(err)
		}
	}
}
