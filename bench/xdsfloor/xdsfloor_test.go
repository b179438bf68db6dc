package xdsfloor_test

import (
	"context"
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allotmesh/allot/bench/xdsfloor"
	"github.com/allotmesh/allot/control-plane/xds/loadgen"
)

// TestPushWaitsForEveryStream: over real gRPC streams, a push returns once
// every connected simulated proxy acknowledged its version — on ADS and on
// ECDS — and each push is a new version that each proxy receives.
func TestPushWaitsForEveryStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s, addr := serve(ctx, t)
	fleets := []*loadgen.Fleet{connect(ctx, t, s, addr, 30, false), connect(ctx, t, s, addr, 30, true)}
	for i, want := range []string{"v1", "v2"} {
		cfg, err := anypb.New(wrapperspb.String(want))
		if err != nil {
			t.Fatal(err)
		}
		v, n, err := s.Push(ctx, &corev3.TypedExtensionConfig{Name: loadgen.ResourceName, TypedConfig: cfg})
		if err != nil || v != want || n != 60 {
			t.Fatalf("push %d: version %q, %d acked (%v); want %s by 60", i, v, n, err, want)
		}
		for _, f := range fleets {
			if err := f.Await(ctx, want); err != nil {
				t.Fatal(err)
			}
			if got := f.Latest().GetVersionInfo(); got != want {
				t.Errorf("the first proxy last received %q, want %q", got, want)
			}
		}
	}
}

// serve serves a floor on a loopback port until the test ends.
func serve(ctx context.Context, t *testing.T) (*xdsfloor.Server, string) {
	s := xdsfloor.New(ctx)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	s.Register(g)
	go func() { _ = g.Serve(lis) }()
	t.Cleanup(g.Stop)
	return s, lis.Addr().String()
}

// connect connects n simulated proxies (ECDS or ADS streams) to s at addr
// and waits until s counts them with those it had.
func connect(ctx context.Context, t *testing.T, s *xdsfloor.Server, addr string, n int, ecds bool) *loadgen.Fleet {
	want := s.Streams() + n
	f, err := loadgen.Connect(ctx, loadgen.Config{Addr: addr, Clients: n, Conns: 2, Cluster: "sim", ECDS: ecds})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	for s.Streams() != want {
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d streams open", s.Streams(), want)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return f
}
