package xdsfloor_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allotmesh/allot/bench/xdsfloor"
	"github.com/allotmesh/allot/control-plane/store/etcd/etcdtest"
	"github.com/allotmesh/allot/control-plane/xds/loadgen"
)

// TestReplicatedFloor: two floor servers follow one etcd cluster; a write
// returns once both fleets acknowledged the resource it committed, counting
// every proxy of both, and each proxy received that resource. A write that
// waits for a server that follows nothing times out naming how many
// settled.
func TestReplicatedFloor(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cluster := etcdtest.Start(t, 1)
	dial := func() *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	const prefix = "/test/floor/"
	var fleets []*loadgen.Fleet
	followed := make(chan error, 2)
	for _, id := range []string{"a", "b"} {
		s, addr := serve(ctx, t)
		fleets = append(fleets, connect(ctx, t, s, addr, 20, false))
		c := dial()
		go func() { followed <- xdsfloor.Follow(ctx, c, s, prefix, id) }()
	}
	w, err := xdsfloor.NewWriter(ctx, dial(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	resource := func(v string) []byte {
		cfg, err := anypb.New(wrapperspb.String(v))
		if err != nil {
			t.Fatal(err)
		}
		res, err := proto.Marshal(&corev3.TypedExtensionConfig{Name: loadgen.ResourceName, TypedConfig: cfg})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, want := range []string{"one", "two"} {
		n, err := w.Write(ctx, resource(want), []string{"a", "b"})
		if err != nil || n != 40 {
			t.Fatalf("write %s: %d acknowledged (%v), want 40", want, n, err)
		}
		for i, f := range fleets {
			got := &corev3.TypedExtensionConfig{}
			if err := f.Latest().GetResources()[0].UnmarshalTo(got); err != nil {
				t.Fatal(err)
			}
			var s wrapperspb.StringValue
			if err := got.GetTypedConfig().UnmarshalTo(&s); err != nil || s.GetValue() != want {
				t.Errorf("write %s: fleet %d's first proxy last received %q (%v)", want, i, s.GetValue(), err)
			}
		}
	}
	short, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	defer stop()
	_, err = w.Write(short, resource("three"), []string{"a", "ghost"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "settled on 1 of 2 servers") {
		t.Errorf("a write waiting for a server that follows nothing: %v", err)
	}
	select {
	case err := <-followed:
		t.Errorf("a server stopped following: %v", err)
	default:
	}
}
