package xds_test

import (
	"fmt"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/control-plane/xds"
)

// TestUnsettled: the count of proxies pending their cluster's version
// follows pushes, ACKs, NACKs and disconnects — 0 exactly when none is
// pending, however it bounds the count in between — and a revert that
// settles every proxy at once is seen at once.
func TestUnsettled(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{"shop": "v1"}})
	var cs []*client
	for _, node := range []string{"shop-1", "shop-2", "shop-3"} {
		c := connect(t, s.addr, xds.APIADS, node, "shop")
		c.request("", "", "")
		c.ack(c.expect("v1"))
		wantState(t, s, node, rollout.StateApplied, "v1")
		cs = append(cs, c)
	}
	settled := func(want bool) {
		t.Helper()
		eventually(t, func() error {
			if n := s.Unsettled(); (n == 0) != want {
				return fmt.Errorf("Unsettled() = %d, want settled %v", n, want)
			}
			return nil
		})
	}
	settled(true)

	s.change(t, "shop", "v2")
	settled(false)
	r1, r2, r3 := cs[0].expect("v2"), cs[1].expect("v2"), cs[2].expect("v2")
	cs[0].ack(r1)
	cs[1].nack(r2, "v1", "refused")
	if n := s.Unsettled(); n == 0 {
		t.Fatal("settled with one proxy still pending")
	}
	cs[2].ack(r3)
	settled(true) // applied, applied, rejected

	// A revert to v1 while one proxy still runs it (it rejected v2 and has
	// not answered v3): that one settles with the revert itself.
	s.change(t, "shop", "v3")
	cs[0].ack(cs[0].expect("v3"))
	cs[2].ack(cs[2].expect("v3"))
	cs[1].expect("v3")
	settled(false)
	s.change(t, "shop", "v1")
	wantState(t, s, "shop-2", rollout.StateApplied, "v1")
	cs[0].ack(cs[0].expect("v1"))
	settled(false)
	cs[2].close() // disconnects: it drops out
	settled(true)
}

// TestJoins: every stream that identifies itself counts as a join and
// wakes Changes — one whose first request is for another type on ADS, and
// one reconnecting with the nonce of its previous stream — while a
// stream's later requests do not count again.
func TestJoins(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{"shop": "v1"}})
	join := func(what string, send func(c *client)) *client {
		t.Helper()
		before, changed := s.Joins(), s.Changes()
		c := connect(t, s.addr, xds.APIADS, what, "shop")
		send(c)
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change", what)
		}
		eventually(t, func() error {
			if got := s.Joins(); got != before+1 {
				return fmt.Errorf("%s: Joins() = %d, want %d", what, got, before+1)
			}
			return nil
		})
		return c
	}
	c := join("ecds-first", func(c *client) { c.request("", "", "") })
	c.ack(c.expect("v1"))
	wantState(t, s, "ecds-first", rollout.StateApplied, "v1") // its change is over
	join("listener-first", func(c *client) {
		if err := c.send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: resource.ListenerType}); err != nil {
			t.Fatal(err)
		}
	})
	join("old-nonce", func(c *client) {
		if err := c.send(&discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: resource.ExtensionConfigType,
			ResourceNames: []string{resourceName}, VersionInfo: "v1", ResponseNonce: "from-its-last-stream"}); err != nil {
			t.Fatal(err)
		}
	})
	before, changed := s.Joins(), s.Changes()
	c.request("v1", "", "") // a later request of a joined stream, processed once it changes the state
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("a later request: no change")
	}
	if got := s.Joins(); got != before {
		t.Errorf("a later request counted as a join: %d, want %d", got, before)
	}
}

// TestRecount: a waiter that counts the pending proxies and then waits for
// Recount (as a replica's publisher does) sees a rollout to 20 proxies
// settle, woken a few times rather than at each of its 40 pushes and
// ACKs; a stream that joins wakes it too.
func TestRecount(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{"shop": "v1"}})
	var cs []*client
	for i := range 20 {
		c := connect(t, s.addr, xds.APIADS, fmt.Sprintf("shop-%d", i), "shop")
		c.request("", "", "")
		c.ack(c.expect("v1"))
		cs = append(cs, c)
	}
	for _, c := range cs {
		wantState(t, s, c.node.GetId(), rollout.StateApplied, "v1")
	}
	s.change(t, "shop", "v2")
	go func() {
		for _, c := range cs {
			c.ack(c.expect("v2"))
		}
	}()
	wakes := 0
	for {
		recount := s.Recount()
		if s.Unsettled() == 0 {
			break
		}
		select {
		case <-recount:
			wakes++
		case <-time.After(10 * time.Second):
			t.Fatalf("no wake-up with %d proxies pending", s.Unsettled())
		}
	}
	t.Logf("woken %d times", wakes)
	if wakes == 0 || wakes > 12 {
		t.Errorf("woken %d times for 40 pushes and ACKs, want a few", wakes)
	}
	recount := s.Recount()
	c := connect(t, s.addr, xds.APIADS, "late", "shop")
	c.request("", "", "")
	select {
	case <-recount:
	case <-time.After(10 * time.Second):
		t.Fatal("a join did not wake Recount")
	}
}
