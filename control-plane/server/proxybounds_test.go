package server

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	rolloutetcd "github.com/allotmesh/allot/control-plane/rollout/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
)

// rawADS is one ADS stream speaking like Envoy, sending requests of any
// size (gRPC clients refuse to send more than 4 MiB by default only).
type rawADS struct {
	st   discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node *corev3.Node
}

func dialADS(t *testing.T, addr, node, cluster string) *rawADS {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return &rawADS{st: st, node: &corev3.Node{Id: node, Cluster: cluster}}
}

// send sends an ECDS request; the node goes on every request.
func (p *rawADS) send(nonce, nack string) error {
	req := &discoveryv3.DiscoveryRequest{Node: p.node, TypeUrl: resource.ExtensionConfigType, ResourceNames: []string{"allot"}, ResponseNonce: nonce}
	if nack != "" {
		req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: nack}
	}
	return p.st.Send(req)
}

// nackOnce connects node of cluster, receives its first configuration and
// rejects it with a message of size bytes, then waits until allotd handled
// the NACK: refused it (the stream ended) or counted it.
func nackOnce(t *testing.T, r *replica, node string, size int) {
	t.Helper()
	p := dialADS(t, r.addrs.XDS.String(), node, "web")
	if err := p.send("", ""); err != nil {
		t.Fatal(err)
	}
	resp, err := p.st.Recv()
	if err != nil {
		t.Fatalf("%s's first response: %v", node, err)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := p.st.Recv()
		ended <- err
	}()
	p.send(resp.GetNonce(), strings.Repeat("x", size)) // refused or not, the stream may end
	eventually(t, 10*time.Second, "the NACK handled", func() error {
		select {
		case err := <-ended:
			ended <- err
			return nil
		default:
		}
		if _, body := get(t, http.DefaultClient, "http://"+r.addrs.Admin.String()+"/metrics"); strings.Contains(body, "\nallot_xds_rejections_total 1\n") {
			return nil
		}
		return errors.New("neither refused nor counted yet")
	})
}

// TestHostileProxiesCannotStopPublishes: a proxy sending a 1.6 MB NACK
// message or a 1.6 MB cluster name (each once made the replica's records
// larger than etcd accepts, so that every later publish failed) does not
// stop the replica from publishing: a proxy connecting after it appears
// in the mesh registry, in the record the hostile one's would share, and
// the replica's own record counts it. A NACK under the message limit is
// published cut to 1 KiB.
func TestHostileProxiesCannotStopPublishes(t *testing.T) {
	for _, tt := range []struct {
		name    string
		hostile func(t *testing.T, r *replica)
	}{
		{"NACK of 1.6 MB", func(t *testing.T, r *replica) { nackOnce(t, r, "hostile", 1_600_000) }},
		{"NACK of 900 KB", func(t *testing.T, r *replica) { nackOnce(t, r, "hostile", 900_000) }},
		{"cluster of 1.6 MB", func(t *testing.T, r *replica) {
			p := dialADS(t, r.addrs.XDS.String(), "hostile", strings.Repeat("c", 1_600_000))
			p.send("", "")
			p.st.Recv() // refused (or, before the limits, served): handled either way
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := etcdtest.Start(t, 1)
			r := startReplica(t, c, c.Endpoints()[0], "r1")
			tt.hostile(t, r)
			reader, err := etcd.Open(t.Context(), clientv3.Config{Endpoints: c.Endpoints()}, etcd.WithPrefix("/replica-test/"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { reader.Close() })
			reg := rolloutetcd.New(reader.Conn(), "reader", time.Second)

			// The newcomer's record shares the hostile proxy's (the registry
			// spreads proxies over 64 records by FNV-1a of the node id).
			shard := func(id string) uint32 { h := fnv.New32a(); h.Write([]byte(id)); return h.Sum32() % 64 }
			newcomer := "newcomer"
			for i := 0; shard(newcomer) != shard("hostile"); i++ {
				newcomer = fmt.Sprintf("newcomer-%d", i)
			}
			late := dialADS(t, r.addrs.XDS.String(), newcomer, "web")
			if err := late.send("", ""); err != nil {
				t.Fatal(err)
			}
			if _, err := late.st.Recv(); err != nil {
				t.Fatalf("newcomer's first response: %v", err)
			}
			eventually(t, 10*time.Second, "newcomer in the mesh registry", func() error {
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
				defer cancel()
				v, err := reg.View(ctx)
				if err != nil {
					return err
				}
				web, found := 0, false
				for _, p := range v.Proxies {
					if p.Cluster == "web" {
						web++
					}
					found = found || p.NodeID == newcomer
					if p.Rejected != nil && len(p.Rejected.Error) > 1024+64 {
						return fmt.Errorf("%s's rejection is published whole: %d bytes", p.NodeID, len(p.Rejected.Error))
					}
				}
				if !found {
					return fmt.Errorf("%s missing from the registry's %d proxies", newcomer, len(v.Proxies))
				}
				rep := v.Replicas["r1"]
				if got := rep.Proxies["web"].Proxies; got != web {
					return fmt.Errorf("replica r1's record counts %d proxies of web, the registry lists %d: its record is stale", got, web)
				}
				for c := range rep.Targets {
					if len(c) > 128 {
						return fmt.Errorf("replica r1 lists a cluster of %d bytes", len(c))
					}
				}
				return nil
			})
		})
	}
}
