package xds_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allotmesh/allot/control-plane/xds"
)

// TestIdleClustersForgotten: 200 short-lived streams with throwaway
// cluster names at their limit (xds.MaxClusterBytes) leave no cluster, no
// snapshot and no per-cluster state behind once the grace period has
// passed, while the cluster of a proxy that stays connected is kept and
// still pushed; a throwaway cluster that comes back is built again.
func TestIdleClustersForgotten(t *testing.T) {
	const grace = 200 * time.Millisecond
	s := startArtifactServer(t, &artifactVersions{versions: &versions{v: map[string]string{}}}, xds.WithClusterGrace(grace))
	shop := connectArtifact(t, s.addr, xds.APIADS, "shop-1", "shop", nil)
	shop.request("", "", "")
	shop.ack(shop.next())

	names := make([]string, 200)
	apis := []string{xds.APIADS, xds.APIECDS}
	artifacts := []any{nil, xds.ArtifactNative}
	for i := range names {
		names[i] = fmt.Sprintf("%03d-", i) + strings.Repeat("x", xds.MaxClusterBytes-4)
		c := connectArtifact(t, s.addr, apis[i%2], fmt.Sprintf("throwaway-%d", i), names[i], artifacts[i/2%2])
		c.request("", "", "")
		if r := c.next(); r.GetVersionInfo() != "v0" {
			t.Fatalf("stream %d: version %q, want v0", i, r.GetVersionInfo())
		}
		if i%10 == 0 {
			// It reconnects running v0: its request is held (holdCache).
			c.close()
			c = connectArtifact(t, s.addr, apis[i%2], fmt.Sprintf("throwaway-%d", i), names[i], artifacts[i/2%2])
			c.request("v0", "", "")
			eventually(t, func() error {
				if w, _ := xds.Held(s.Server); w != 1 {
					return fmt.Errorf("%d held watches, want 1", w)
				}
				return nil
			})
		}
		if n := xds.Snapshots(s.Server, names[i:i+1]); n != 2 {
			t.Fatalf("stream %d: its cluster has %d snapshots, want 2 (one per artifact)", i, n)
		}
		c.close()
	}

	eventually(t, func() error {
		if n := xds.ClusterState(s.Server); n != 1 {
			return fmt.Errorf("state kept for %d clusters %s after the streams closed, want 1 (shop)", n, grace)
		}
		return nil
	})
	if n := xds.Snapshots(s.Server, names); n != 0 {
		t.Errorf("%d snapshots of the throwaway clusters left, want 0", n)
	}
	if w, n := xds.Held(s.Server); w != 0 || n != 2 {
		t.Errorf("%d held watches and %d node hashes left, want none and shop's 2 (one per artifact)", w, n)
	}
	if got := s.Targets(); len(got) != 1 || got["shop"] != "v0" {
		t.Errorf("targets %d clusters (shop %q), want shop alone", len(got), got["shop"])
	}
	if n := xds.Snapshots(s.Server, []string{"shop"}); n != 2 {
		t.Errorf("shop has %d snapshots, want 2 (one per artifact)", n)
	}
	// The kept cluster is still rebuilt and pushed.
	s.change(t, "shop", "v1")
	if r := shop.next(); r.GetVersionInfo() != "v1" {
		t.Fatalf("shop: version %q, want v1", r.GetVersionInfo())
	}

	// A proxy of a forgotten cluster that comes back gets it built again.
	back := connectArtifact(t, s.addr, xds.APIECDS, "back", names[7], nil)
	back.request("", "", "")
	if r := back.next(); r.GetVersionInfo() != "v0" {
		t.Fatalf("returning proxy: version %q, want v0", r.GetVersionInfo())
	}
	if v, ok := s.Version(names[7]); !ok || v != "v0" {
		t.Errorf("returning cluster version %q (%v), want v0", v, ok)
	}
}

// TestClusterForgottenWhileStreamArrives: streams of one cluster come and
// go while idle clusters are forgotten as fast as can be; every stream
// gets its configuration, and a cluster is never forgotten under a stream
// that uses it (a write still reaches it).
func TestClusterForgottenWhileStreamArrives(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{}}, xds.WithClusterGrace(time.Nanosecond))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			xds.ForgetIdle(s.Server)
		}
	})
	defer func() { cancel(); wg.Wait() }()
	for i := range 100 {
		api := []string{xds.APIADS, xds.APIECDS}[i%2]
		c := connect(t, s.addr, api, fmt.Sprintf("n-%d", i), "churn")
		c.request("", "", "")
		r := c.next()
		c.ack(r)
		if i%10 == 0 {
			// Passes that run while it is connected keep its cluster.
			xds.ForgetIdle(s.Server)
			xds.ForgetIdle(s.Server)
			v := fmt.Sprintf("v%d", i+1)
			s.change(t, "churn", v)
			c.expect(v)
		}
		c.close()
	}
}

// TestClusterIdleClockFromLastStream: a cluster is forgotten a grace
// period after its last stream closed, however briefly that stream lived:
// a short-lived stream of a cluster idle for most of its grace period
// gives it a whole grace period again.
func TestClusterIdleClockFromLastStream(t *testing.T) {
	const grace = time.Second
	s := startServer(t, &versions{v: map[string]string{}}, xds.WithClusterGrace(grace))
	use := func() time.Time {
		c := connect(t, s.addr, xds.APIADS, "short", "brief")
		c.request("", "", "")
		c.ack(c.expect("v0"))
		c.close()
		gone(t, s, "short")
		return time.Now()
	}
	// known polls until deadline, failing if the cluster is forgotten.
	known := func(until time.Time) {
		t.Helper()
		for time.Now().Before(until) {
			if _, ok := s.Version("brief"); !ok {
				t.Fatalf("cluster forgotten %v before its grace period ended", time.Until(until))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	closed := use()
	known(closed.Add(grace * 8 / 10))
	closed = use()
	known(closed.Add(grace * 9 / 10))
	eventually(t, func() error {
		if _, ok := s.Version("brief"); ok {
			return errors.New("cluster not forgotten")
		}
		return nil
	})
	if d := time.Since(closed); d > grace*5/4+200*time.Millisecond {
		t.Errorf("cluster forgotten %v after its last stream closed, want at most 1.25×%v", d, grace)
	}
}
