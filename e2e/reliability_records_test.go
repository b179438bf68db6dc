//go:build e2e && reliability

package e2e

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/allotmesh/allot/internal/harness"
)

// collidingNodes returns n node ids of 256 bytes that a client choosing
// them can make hash to one record group of the mesh registry: FNV-1a
// (32 bits), unkeyed, modulo 64, as store/etcd spreads a replica's proxies.
func collidingNodes(n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("crowd-%06d-", i)
		id += strings.Repeat("<", 256-len(id))
		h := fnv.New32a()
		h.Write([]byte(id))
		if h.Sum32()%64 == 0 {
			out = append(out, id)
		}
	}
	return out
}

// crowdClient holds an ADS stream for node until ctx ends: it rejects the
// first configuration with a 1 KiB message of characters JSON escapes (its
// registry record at its largest) and acknowledges every later one.
func crowdClient(ctx context.Context, addr string, node *corev3.Node) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return err
	}
	req := &discoveryv3.DiscoveryRequest{Node: node, TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}}
	if err := st.Send(req); err != nil {
		return err
	}
	req.Node = nil
	for first := true; ; first = false {
		resp, err := st.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		req.ResponseNonce, req.ErrorDetail = resp.GetNonce(), nil
		if first {
			req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: strings.Repeat("<", 1024)}
		} else {
			req.VersionInfo = resp.GetVersionInfo()
		}
		if err := st.Send(req); err != nil {
			return err
		}
	}
}

// TestReliabilityCrowdedShard: 200 xDS clients whose node ids hash to one
// group of the registry's records, each record at its largest (1.8 MB
// together: past etcd's request limit, which once wedged every publish of
// their replica), connect to a replica on etcd: all are listed, an Envoy
// connecting after them is listed and applies a waited write with them,
// and once they leave, only the Envoy is listed.
func TestReliabilityCrowdedShard(t *testing.T) {
	h := startReplicated(t, 1)
	xdsAddr := fmt.Sprintf("127.0.0.1:%d", h.replicas[0].xdsPort)
	nodes := collidingNodes(200)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, len(nodes))
	for _, id := range nodes {
		wg.Go(func() {
			if err := crowdClient(ctx, xdsAddr, &corev3.Node{Id: id, Cluster: "crowd-svc"}); err != nil {
				errs <- fmt.Errorf("%.16s…: %w", id, err)
			}
		})
	}
	defer func() { cancel(); wg.Wait() }()
	listed := func(want int) func() error {
		return func() error {
			var ro struct {
				Proxies []struct {
					NodeID string `json:"nodeId"`
				} `json:"proxies"`
			}
			if code := h.replicas[0].api("GET", "/v1/rollout", nil, &ro); code != http.StatusOK {
				return fmt.Errorf("GET /v1/rollout: %d", code)
			}
			n := 0
			for _, p := range ro.Proxies {
				if strings.HasPrefix(p.NodeID, "crowd-") {
					n++
				}
			}
			if n != want {
				return fmt.Errorf("%d of the crowd listed, want %d", n, want)
			}
			return nil
		}
	}
	harness.MustEventually(t, 30*time.Second, listed(len(nodes)))

	h.sidecars("late") // waits until the mesh rollout lists the Envoy on its replica
	var ww waitedWrite
	h.replicas[0].mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=20s", checkoutRamp(0.5), &ww)
	wedged := 0
	if !ww.Rollout.appliedBy(len(h.proxies) + len(nodes)) {
		wedged = 1
		t.Errorf("waited write with the crowd connected: %+v", ww.Rollout)
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("crowd client: %v", err)
	}
	harness.MustEventually(t, 30*time.Second, listed(0))
	report(t, "bad_input", fmt.Sprintf("%d xDS clients whose 256-byte node ids hash to one registry shard, each record at its largest (a 1 KiB NACK of characters JSON escapes), on a replica on etcd", len(nodes)),
		fmt.Sprintf("%d wedged publishes, 0 ghosts: all %d listed; an Envoy connecting after them listed and a waited write applied by all %d; once they left, none listed",
			wedged, len(nodes), len(h.proxies)+len(nodes)), 0)
}
