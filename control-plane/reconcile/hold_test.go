package reconcile

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allotmesh/allot/control-plane/rollout"
	"github.com/allotmesh/allot/control-plane/xds"
	"github.com/allotmesh/allot/control-plane/xds/loadgen"
)

// recordingRegistry keeps every record published, in order.
type recordingRegistry struct {
	failingRegistry
	mu   sync.Mutex
	recs []rollout.Replica
}

func (r *recordingRegistry) Publish(_ context.Context, rep rollout.Replica, _ []rollout.Proxy) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rep)
	return nil
}

// await waits until a record published after the first from satisfies ok,
// and returns the records from from on, up to it.
func (r *recordingRegistry) await(t *testing.T, from int, what string, ok func(rollout.Replica) bool) []rollout.Replica {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		recs := append([]rollout.Replica(nil), r.recs[min(from, len(r.recs)):]...)
		r.mu.Unlock()
		for i, rec := range recs {
			if ok(rec) {
				return recs[:i+1]
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no record %s among %+v", what, recs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (r *recordingRegistry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.recs)
}

// TestPublishHoldsASettledRecord: over real xDS streams, a replica whose
// record says it settled keeps that record through a new version until its
// proxies applied it (one publish for the write, no record saying they are
// pending), since the record stays true of the writes it covers; but a
// proxy that joins is published at once, unsettled, not after the hold.
func TestPublishHoldsASettledRecord(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var version atomic.Value
	version.Store("v1")
	x := xds.New(ctx, func(string) (string, *corev3.TypedExtensionConfig, error) {
		v := version.Load().(string)
		cfg, err := anypb.New(wrapperspb.String(v))
		return v, &corev3.TypedExtensionConfig{Name: loadgen.ResourceName, TypedConfig: cfg}, err
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	x.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	b := &Builder{}
	b.setApplied(1)
	reg := &recordingRegistry{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Publish(ctx, reg, x, b, rollout.Replica{ID: "r1"}, NewPublishFailures(), slog.New(slog.DiscardHandler))
	}()
	defer func() { cancel(); <-done }()

	fleet, err := loadgen.Connect(ctx, loadgen.Config{Addr: lis.Addr().String(), Clients: 2, Conns: 1, Cluster: "sim"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fleet.Close)
	settledAt := func(rev int64, n int) func(rollout.Replica) bool {
		return func(r rollout.Replica) bool { return r.Settled && r.Revision >= rev && r.AppliedProxies == n }
	}
	reg.await(t, 0, "settled on revision 1", settledAt(1, 2))

	// A write: a new version built from revision 2, applied by both.
	from := reg.len()
	version.Store("v2")
	if err := x.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	b.setApplied(2)
	for _, rec := range reg.await(t, from, "settled on revision 2", settledAt(2, 2)) {
		if !rec.Settled {
			t.Errorf("a record saying the proxies are pending was published during the write: %+v", rec)
		}
	}
	if err := fleet.Await(ctx, "v2"); err != nil {
		t.Fatal(err)
	}

	// A proxy joins and never acknowledges: the settled record is taken
	// back at once, well before the hold would end.
	from = reg.len()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	joined := time.Now()
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: "lazy", Cluster: "sim"},
		TypeUrl: loadgen.TypeURL, ResourceNames: []string{loadgen.ResourceName}}); err != nil {
		t.Fatal(err)
	}
	reg.await(t, from, "unsettled after the join", func(r rollout.Replica) bool { return !r.Settled })
	if d := time.Since(joined); d >= progressEvery {
		t.Errorf("the join was published %s after it, not at once (the hold is %s)", d, progressEvery)
	}
}
