//go:build e2e && reliability

package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	rolloutetcd "github.com/allotmesh/allot/control-plane/rollout/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/xds/loadgen"
	"github.com/allotmesh/allot/internal/harness"
)

// TestReliabilityRegistryLeaderKills: two allotd replicas on three real
// etcd members publish their proxies while the etcd leader is killed
// (SIGKILL) and restarted, again and again, and simulated proxies (real
// gRPC xDS streams, control-plane/xds/loadgen) connect to and leave both
// replicas throughout. Afterwards the registry lists exactly the proxies
// still connected — in every replica's view (GET /v1/rollout) and in the
// node keys (Roster) —, every replica still publishes (a proxy connecting
// last appears), and a waited write through each replica is applied by
// all of them rather than waiting for a proxy that left.
func TestReliabilityRegistryLeaderKills(t *testing.T) {
	const (
		kills   = 4
		staying = 5 // proxies per replica connected throughout
		cluster = "registry-svc"
	)
	h := startReplicated(t, 2)
	ctx := t.Context()
	xdsAddr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", h.replicas[i].xdsPort) }
	connected := map[string]bool{}
	connect := func(i int, prefix string, n int) *loadgen.Fleet {
		t.Helper()
		f, err := loadgen.Connect(ctx, loadgen.Config{Addr: xdsAddr(i), Clients: n, Cluster: cluster, Node: prefix})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.Close)
		return f
	}
	for i := range h.replicas {
		prefix := fmt.Sprintf("stay-%d", i+1)
		connect(i, prefix, staying)
		for k := range staying {
			connected[fmt.Sprintf("%s-%d", prefix, k)] = true
		}
	}

	// Churn: on each replica, fleets of 3 proxies connect, stay 50–250 ms
	// and leave, one after the other, until the kills are over.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var joined atomic.Int64
	var churnErrs []string
	var errMu sync.Mutex
	for i := range h.replicas {
		wg.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				f, err := loadgen.Connect(ctx, loadgen.Config{Addr: xdsAddr(i), Clients: 3, Cluster: cluster,
					Node: fmt.Sprintf("churn-%d-%d", i+1, n)})
				if err != nil {
					errMu.Lock()
					churnErrs = append(churnErrs, err.Error())
					errMu.Unlock()
					return
				}
				joined.Add(3)
				select {
				case <-stop:
				case <-time.After(time.Duration(50+n*37%200) * time.Millisecond):
				}
				f.Close()
			}
		})
	}

	var elections []time.Duration
	for range kills {
		leader := h.etcd.leader()
		killed := time.Now()
		h.etcd.members[leader].proc.Kill()
		// The replicas publish through the election: wait for a new leader.
		harness.MustEventually(t, 20*time.Second, func() error {
			i, err := h.etcd.layout.Leader()
			if err != nil {
				return err
			}
			if i == leader {
				return fmt.Errorf("member %d still leads", i)
			}
			return nil
		})
		elections = append(elections, time.Since(killed))
		h.etcd.restart(leader)
	}
	close(stop)
	wg.Wait()
	if len(churnErrs) > 0 {
		t.Fatalf("churn: %s", strings.Join(churnErrs, "; "))
	}

	// The last proxy to connect, on each replica: a replica whose
	// publishing wedged never lists it.
	for i := range h.replicas {
		prefix := fmt.Sprintf("last-%d", i+1)
		connect(i, prefix, 1)
		connected[prefix+"-0"] = true
	}
	want := slices.Sorted(maps.Keys(connected))

	db, err := etcd.Open(ctx, clientv3.Config{Endpoints: strings.Split(strings.TrimPrefix(h.etcd.storeFlag(), "etcd://"), ",")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	observer := rolloutetcd.New(db.Conn(), "observer", 0) // reads only: it never publishes
	// diff compares what a view lists with the connected proxies.
	diff := func(listed []string) (ghosts, lost []string) {
		seen := map[string]bool{}
		for _, n := range listed {
			if !connected[n] || seen[n] {
				ghosts = append(ghosts, n)
			}
			seen[n] = true
		}
		for _, n := range want {
			if !seen[n] {
				lost = append(lost, n)
			}
		}
		return ghosts, lost
	}
	var ghosts, lost []string
	var wedged []string
	start := time.Now()
	// A ghost lives as long as its replica's lease, i.e. forever: wait
	// well past the lease TTL and the publish retries.
	deadline := start.Add(leaseTTL + 10*time.Second)
	for {
		ghosts, lost, wedged = nil, nil, nil
		for i := range h.replicas {
			var ro rolloutJSON
			if code := h.replicas[i].api("GET", "/v1/rollout", nil, &ro); code != http.StatusOK {
				t.Fatalf("GET /v1/rollout through replica %d: %d", i+1, code)
			}
			var listed []string
			for _, p := range ro.Proxies {
				listed = append(listed, p.NodeID)
			}
			g, l := diff(listed)
			ghosts, lost = append(ghosts, prefixAll(fmt.Sprintf("view of r%d: ", i+1), g)...), append(lost, prefixAll(fmt.Sprintf("view of r%d: ", i+1), l)...)
			if slices.Contains(l, fmt.Sprintf("last-%d-0", i+1)) {
				wedged = append(wedged, replicaID(i))
			}
		}
		roster, err := observer.Roster(ctx)
		if err != nil {
			t.Fatalf("roster: %v", err)
		}
		var nodes []string
		for k := range roster.Nodes {
			nodes = append(nodes, k.NodeID)
		}
		g, l := diff(nodes)
		ghosts, lost = append(ghosts, prefixAll("roster: ", g)...), append(lost, prefixAll("roster: ", l)...)
		if len(ghosts)+len(lost) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	converged := time.Since(start)
	for _, g := range ghosts {
		t.Errorf("ghost: %s is listed but not connected", g)
	}
	for _, l := range lost {
		t.Errorf("lost: %s is connected but not listed", l)
	}

	// A waited write through each replica is applied by every connected
	// proxy: none waits for a proxy that left.
	var writes []string
	for i := range h.replicas {
		var ww waitedWrite
		began := time.Now()
		h.replicas[i].mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s",
			map[string]any{"key": fmt.Sprintf("after-kills-%d", i+1), "variations": []string{"a", "b"}}, &ww)
		if !ww.Rollout.appliedBy(len(want)) {
			t.Errorf("waited write through replica %d: %+v, want applied by %d proxies", i+1, ww.Rollout, len(want))
		}
		writes = append(writes, time.Since(began).Round(10*time.Millisecond).String())
	}

	failed := 0
	for i := range h.replicas {
		failed += int(metricValue(t, h.replicas[i], "allot_replica_publish_failures_total"))
	}
	report(t, "faults", fmt.Sprintf("%d kills (SIGKILL) of the etcd leader under 2 publishing allotd replicas, %d proxies joined and left meanwhile, %d stayed", kills, joined.Load(), len(want)),
		fmt.Sprintf("%d wedged publishes, %d ghosts, %d lost (Roster and every replica's view equal the connected proxies %s after the churn; elections %s; %d failed publishes retried); a waited write through each replica applied by all %d proxies in %s",
			len(wedged), len(ghosts), len(lost), converged.Round(10*time.Millisecond), durations(elections), failed, len(want), strings.Join(writes, ", ")),
		len(lost))
}

// prefixAll returns each of ss after p.
func prefixAll(p string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = p + s
	}
	return out
}
