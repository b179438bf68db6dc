package xds_test

import (
	"context"
	"fmt"
	"github.com/allotmesh/allot/control-plane/rollout"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/allotmesh/allot/control-plane/xds"
	"github.com/allotmesh/allot/control-plane/xds/loadgen"
)

// TestLoadgenStreamsPerConn: the load generator opens no more streams on
// a connection than the server serves at once.
func TestLoadgenStreamsPerConn(t *testing.T) {
	if loadgen.MaxStreamsPerConn != xds.MaxStreamsPerConnection {
		t.Errorf("loadgen.MaxStreamsPerConn = %d, want xds.MaxStreamsPerConnection (%d)", loadgen.MaxStreamsPerConn, xds.MaxStreamsPerConnection)
	}
}

// TestManyProxies rolls three changes out to 200 simulated proxies (the
// load generator the benchmark and allot-xdsload use).
func TestManyProxies(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{"load": "v0"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := loadgen.Connect(ctx, loadgen.Config{Addr: s.addr, Clients: 200, Conns: 10, Cluster: "load"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Await(ctx, "v0"); err != nil {
		t.Fatal(err)
	}
	<-f.Results() // v0, at connect
	for _, v := range []string{"v1", "v2", "v0"} {
		before := s.Targets()
		s.change(t, "load", v)
		r, err := s.WaitFor(ctx, s.Targets().Changed(before))
		if err != nil || r.Count(rollout.StateApplied) != 200 {
			t.Fatalf("%s: %d applied, %v", v, r.Count(rollout.StateApplied), err)
		}
		if res := <-f.Results(); res.Version != v || res.Clients != 200 {
			t.Errorf("fleet result %v, want %s by 200", res, v)
		}
	}
	if got := s.metric(t, "allot_xds_pushes_total", ""); got != 800 {
		t.Errorf("pushes_total = %v, want 800", got)
	}
}

// BenchmarkRollout measures write → every proxy ACKed with 1000 simulated
// proxies: each iteration changes the cluster's version, refreshes and
// waits with WaitFor. It also reports the fleet's own view: p50/p99 of the
// ACKs after the first proxy received the version.
//
//	go test -run '^$' -bench Rollout -benchtime 20x ./control-plane/xds/
func BenchmarkRollout(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("proxies=%d", n), func(b *testing.B) {
			vs := &versions{v: map[string]string{"load": "v0"}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			x := xds.New(ctx, vs.build)
			g := grpc.NewServer()
			x.Register(g)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			go g.Serve(ln)
			defer g.Stop()
			f, err := loadgen.Connect(ctx, loadgen.Config{Addr: ln.Addr().String(), Clients: n, Conns: 50, Cluster: "load"})
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
			defer wcancel()
			if err := f.Await(wctx, "v0"); err != nil {
				b.Fatal(err)
			}
			var p50, p99 time.Duration
			b.ResetTimer()
			for i := range b.N {
				before := x.Targets()
				vs.set("load", fmt.Sprintf("v%d", i+1))
				if err := x.Refresh(ctx); err != nil {
					b.Fatal(err)
				}
				r, err := x.WaitFor(wctx, x.Targets().Changed(before))
				if err != nil || len(r.Proxies) != n {
					b.Fatalf("WaitFor: %d proxies, %v", len(r.Proxies), err)
				}
				res := <-f.Results()
				p50 += res.P50
				p99 += res.P99
			}
			b.ReportMetric(float64(p50)/float64(time.Millisecond)/float64(b.N), "fleet-p50-ms")
			b.ReportMetric(float64(p99)/float64(time.Millisecond)/float64(b.N), "fleet-p99-ms")
		})
	}
}
