package xds_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/allotmesh/allot/control-plane/rollout"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	extensionv3 "github.com/envoyproxy/go-control-plane/envoy/service/extension/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/control-plane/xds"
)

const resourceName = "allot"

// quiet bounds how long a test watches for a response that must not come.
// It is not what proves the absence: every such check is followed by a
// real change whose response must be the next one received.
const quiet = 300 * time.Millisecond

// versions is a Builder whose per-cluster version the test sets; the
// resource carries the version so responses can be told apart.
type versions struct {
	mu sync.Mutex
	v  map[string]string
}

func (b *versions) set(cluster, version string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.v[cluster] = version
}

func (b *versions) build(cluster string) (string, *corev3.TypedExtensionConfig, error) {
	b.mu.Lock()
	v, ok := b.v[cluster]
	b.mu.Unlock()
	if !ok {
		v = "v0"
	}
	if v == "broken" {
		return "", nil, errors.New("broken definitions")
	}
	st, err := structpb.NewStruct(map[string]any{"version": v})
	if err != nil {
		return "", nil, err
	}
	a, err := anypb.New(st)
	if err != nil {
		return "", nil, err
	}
	return v, &corev3.TypedExtensionConfig{Name: resourceName, TypedConfig: a}, nil
}

// testServer is an xds.Server serving on 127.0.0.1:0.
type testServer struct {
	*xds.Server
	b    *versions
	addr string
	reg  *prometheus.Registry
}

func startServer(t *testing.T, b *versions, opts ...xds.Option) *testServer {
	t.Helper()
	return startServerOn(t, b, xds.ServerOptions(), opts...)
}

// startServerOn is startServer with the gRPC server options gopts.
func startServerOn(t *testing.T, b *versions, gopts []grpc.ServerOption, opts ...xds.Option) *testServer {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	x := xds.New(ctx, b.build, opts...)
	g := grpc.NewServer(gopts...)
	x.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(func() { cancel(); g.Stop() })
	reg := prometheus.NewRegistry()
	reg.MustRegister(x.Collectors()...)
	return &testServer{Server: x, b: b, addr: ln.Addr().String(), reg: reg}
}

// change sets cluster's version and refreshes like a store write does.
func (s *testServer) change(t *testing.T, cluster, version string) {
	t.Helper()
	s.b.set(cluster, version)
	if err := s.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// metric returns the value of a counter or gauge (with label state if set).
func (s *testServer) metric(t *testing.T, name, state string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if state != "" && (len(m.GetLabel()) == 0 || m.GetLabel()[0].GetValue() != state) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	t.Fatalf("metric %s{state=%q} not found", name, state)
	return 0
}

// client is an xDS client speaking like Envoy on one stream: ADS or the
// dedicated ECDS service.
type client struct {
	t     *testing.T
	node  *corev3.Node
	send  func(*discoveryv3.DiscoveryRequest) error
	resps chan *discoveryv3.DiscoveryResponse
	close func()
	first bool
	// untyped: requests carry no type URL, which an ECDS stream implies.
	untyped bool
	// err is why the stream ended, once resps is closed.
	err error
}

func connect(t *testing.T, addr, api, node, cluster string) *client {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &client{t: t, node: &corev3.Node{Id: node, Cluster: cluster}, resps: make(chan *discoveryv3.DiscoveryResponse, 100), first: true}
	var recv func() (*discoveryv3.DiscoveryResponse, error)
	switch api {
	case xds.APIADS:
		st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.send, recv = st.Send, st.Recv
	case xds.APIECDS:
		st, err := extensionv3.NewExtensionConfigDiscoveryServiceClient(conn).StreamExtensionConfigs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c.send, recv = st.Send, st.Recv
	default:
		t.Fatalf("api %q", api)
	}
	go func() {
		defer close(c.resps)
		for {
			r, err := recv()
			if err != nil {
				c.err = err
				return
			}
			c.resps <- r
		}
	}()
	c.close = func() { cancel(); conn.Close() }
	t.Cleanup(c.close)
	return c
}

// request sends a DiscoveryRequest for the ECDS resource; the node goes on
// the first request only, as Envoy does.
func (c *client) request(version, nonce, errDetail string) {
	c.t.Helper()
	req := &discoveryv3.DiscoveryRequest{
		TypeUrl:       resource.ExtensionConfigType,
		ResourceNames: []string{resourceName},
		VersionInfo:   version,
		ResponseNonce: nonce,
	}
	if c.first {
		req.Node, c.first = c.node, false
	}
	if c.untyped {
		req.TypeUrl = ""
	}
	if errDetail != "" {
		req.ErrorDetail = &status.Status{Code: 3, Message: errDetail}
	}
	if err := c.send(req); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *client) ack(r *discoveryv3.DiscoveryResponse) {
	c.request(r.GetVersionInfo(), r.GetNonce(), "")
}

// nack rejects r while still running version running.
func (c *client) nack(r *discoveryv3.DiscoveryResponse, running, why string) {
	c.request(running, r.GetNonce(), why)
}

// next returns the next response, failing after 5 s.
func (c *client) next() *discoveryv3.DiscoveryResponse {
	c.t.Helper()
	select {
	case r, ok := <-c.resps:
		if !ok {
			c.t.Fatalf("%s: stream closed", c.node.Id)
		}
		return r
	case <-time.After(5 * time.Second):
		c.t.Fatalf("%s: no response within 5s", c.node.Id)
	}
	return nil
}

// expect returns the next response and checks its version and resource.
func (c *client) expect(version string) *discoveryv3.DiscoveryResponse {
	c.t.Helper()
	r := c.next()
	if r.GetVersionInfo() != version || r.GetTypeUrl() != resource.ExtensionConfigType {
		c.t.Fatalf("%s: response version %q type %s, want %q", c.node.Id, r.GetVersionInfo(), r.GetTypeUrl(), version)
	}
	if len(r.GetResources()) != 1 {
		c.t.Fatalf("%s: %d resources, want 1", c.node.Id, len(r.GetResources()))
	}
	ext := &corev3.TypedExtensionConfig{}
	if err := r.GetResources()[0].UnmarshalTo(ext); err != nil {
		c.t.Fatal(err)
	}
	st := &structpb.Struct{}
	if err := ext.GetTypedConfig().UnmarshalTo(st); err != nil {
		c.t.Fatal(err)
	}
	if ext.GetName() != resourceName || st.GetFields()["version"].GetStringValue() != version {
		c.t.Fatalf("%s: resource %s carries %v, want %s with version %s", c.node.Id, ext.GetName(), st, resourceName, version)
	}
	return r
}

// silent checks that no response arrives for a short while.
func (c *client) silent() {
	c.t.Helper()
	select {
	case r := <-c.resps:
		c.t.Fatalf("%s: unexpected response version %q", c.node.Id, r.GetVersionInfo())
	case <-time.After(quiet):
	}
}

// proxy returns node's status, failing if it is not connected.
func proxy(t *testing.T, s *testServer, node string) rollout.ProxyStatus {
	t.Helper()
	p, ok := find(s, node)
	if !ok {
		t.Fatalf("proxy %s not connected; proxies: %+v", node, s.Proxies())
	}
	return p
}

func find(s *testServer, node string) (rollout.ProxyStatus, bool) {
	for _, p := range s.Proxies() {
		if p.NodeID == node {
			return p, true
		}
	}
	return rollout.ProxyStatus{}, false
}

// eventually retries f until it returns nil, failing after 5 s.
func eventually(t *testing.T, f func() error) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func wantState(t *testing.T, s *testServer, node string, state rollout.State, acked string) {
	t.Helper()
	eventually(t, func() error {
		p, ok := find(s, node)
		if !ok {
			return fmt.Errorf("proxy %s not connected", node)
		}
		if p.State != state || p.Acked != acked {
			return fmt.Errorf("%s: state %s acked %q, want %s acked %q (%+v)", node, p.State, p.Acked, state, acked, p)
		}
		return nil
	})
}

func TestApplyAndReject(t *testing.T) {
	for _, api := range []string{xds.APIADS, xds.APIECDS} {
		t.Run(api, func(t *testing.T) {
			s := startServer(t, &versions{v: map[string]string{"shop": "v1"}})
			c := connect(t, s.addr, api, "shop-1", "shop")
			c.untyped = api == xds.APIECDS // its type is ECDS's

			c.request("", "", "")
			r := c.expect("v1")
			p := proxy(t, s, "shop-1")
			if p.Cluster != "shop" || p.API != api || p.Sent != "v1" || p.Pushes != 1 || p.State != rollout.StatePending || p.Address == "" {
				t.Errorf("before ACK: %+v", p)
			}
			c.ack(r)
			wantState(t, s, "shop-1", rollout.StateApplied, "v1")

			// v2 is rejected: recorded, and not sent again.
			s.change(t, "shop", "v2")
			r = c.expect("v2")
			c.nack(r, "v1", "allot: configuration rejected: experiments[0].weights: sum 0.9, want 1")
			eventually(t, func() error {
				p := proxy(t, s, "shop-1")
				if p.State != rollout.StateRejected || p.Rejected == nil || p.Rejected.Version != "v2" ||
					!strings.Contains(p.Rejected.Error, "sum 0.9") || p.Acked != "v1" {
					return fmt.Errorf("after NACK: %+v (rejected %+v)", p, p.Rejected)
				}
				return nil
			})
			c.silent()
			if got := s.metric(t, "allot_xds_rejections_total", ""); got != 1 {
				t.Errorf("rejections_total = %v, want 1", got)
			}

			// The next valid change arrives, and is the next response: the
			// rejected one was never repeated.
			s.change(t, "shop", "v3")
			r = c.expect("v3")
			c.ack(r)
			wantState(t, s, "shop-1", rollout.StateApplied, "v3")
			if p := proxy(t, s, "shop-1"); p.Pushes != 3 {
				t.Errorf("pushes = %d, want 3 (v1, v2, v3)", p.Pushes)
			}
			if got := s.metric(t, "allot_xds_pushes_total", ""); got != 3 {
				t.Errorf("pushes_total = %v, want 3", got)
			}
			if got := s.metric(t, "allot_xds_apply_seconds", ""); got != 2 {
				t.Errorf("apply_seconds observations = %v, want 2 (v1 and v3; not the rejected v2)", got)
			}
		})
	}
}

func TestRejectFirstConfiguration(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{"shop": "v1"}})
	c := connect(t, s.addr, xds.APIADS, "shop-1", "shop")
	c.request("", "", "")
	r := c.expect("v1")
	c.nack(r, "", "bad")
	eventually(t, func() error {
		if p := proxy(t, s, "shop-1"); p.State != rollout.StateRejected || p.Acked != "" {
			return fmt.Errorf("%+v", p)
		}
		return nil
	})
	c.silent()
	s.change(t, "shop", "v2")
	c.ack(c.expect("v2"))
	wantState(t, s, "shop-1", rollout.StateApplied, "v2")
}

// A proxy that rejected v2 runs v1; going back to v1 must not send it v1
// again, and it counts as applied.
func TestRevertAfterReject(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{"shop": "v1"}})
	c := connect(t, s.addr, xds.APIADS, "shop-1", "shop")
	c.request("", "", "")
	c.ack(c.expect("v1"))
	s.change(t, "shop", "v2")
	c.nack(c.expect("v2"), "v1", "bad")
	wantState(t, s, "shop-1", rollout.StateRejected, "v1")
	s.change(t, "shop", "v1")
	wantState(t, s, "shop-1", rollout.StateApplied, "v1")
	c.silent()
	s.change(t, "shop", "v3")
	c.expect("v3")
}

// A proxy reconnecting with the version it runs (allotd restarted, same
// data) gets nothing until the next change; one with an older version gets
// the current one at once.
func TestReconnect(t *testing.T) {
	b := &versions{v: map[string]string{"shop": "v1"}}
	first := startServer(t, b)
	c := connect(t, first.addr, xds.APIADS, "shop-1", "shop")
	c.request("", "", "")
	c.ack(c.expect("v1"))

	s := startServer(t, b) // the restarted control plane
	c = connect(t, s.addr, xds.APIADS, "shop-1", "shop")
	c.request("v1", "", "")
	wantState(t, s, "shop-1", rollout.StateApplied, "v1")
	c.silent()
	if p := proxy(t, s, "shop-1"); p.Pushes != 0 {
		t.Errorf("pushes = %d, want 0", p.Pushes)
	}
	s.change(t, "shop", "v2")
	c.ack(c.expect("v2"))
	wantState(t, s, "shop-1", rollout.StateApplied, "v2")

	old := connect(t, s.addr, xds.APIECDS, "shop-2", "shop")
	old.request("v1", "", "")
	old.ack(old.expect("v2"))
	wantState(t, s, "shop-2", rollout.StateApplied, "v2")
}

func TestWaitFor(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{"shop": "v1", "cart": "c1"}})
	clients := map[string]*client{}
	for _, n := range []struct{ node, cluster, version string }{
		{"shop-1", "shop", "v1"}, {"shop-2", "shop", "v1"}, {"shop-3", "shop", "v1"}, {"cart-1", "cart", "c1"},
	} {
		c := connect(t, s.addr, xds.APIADS, n.node, n.cluster)
		c.request("", "", "")
		c.ack(c.expect(n.version))
		wantState(t, s, n.node, rollout.StateApplied, n.version)
		clients[n.node] = c
	}
	if got := s.metric(t, "allot_xds_connected_proxies", ""); got != 4 {
		t.Errorf("connected_proxies = %v, want 4", got)
	}

	type result struct {
		r   rollout.Rollout
		err error
	}
	waitFor := func(ctx context.Context, targets rollout.Targets) chan result {
		ch := make(chan result, 1)
		go func() {
			r, err := s.WaitFor(ctx, targets)
			ch <- result{r, err}
		}()
		return ch
	}
	write := func(version string) rollout.Targets {
		before := s.Targets()
		s.change(t, "shop", version)
		changed := s.Targets().Changed(before)
		if len(changed) != 1 || changed["shop"] != version {
			t.Fatalf("changed = %v, want only shop: %s", changed, version)
		}
		return changed
	}

	t.Run("returns once all proxies of changed clusters applied", func(t *testing.T) {
		targets := write("v2")
		done := waitFor(context.Background(), targets)
		late := connect(t, s.addr, xds.APIADS, "shop-late", "shop") // not waited for
		late.request("", "", "")
		late.expect("v2")
		for _, n := range []string{"shop-1", "shop-2"} {
			clients[n].ack(clients[n].expect("v2"))
		}
		r3 := clients["shop-3"].expect("v2")
		select {
		case res := <-done:
			t.Fatalf("returned before shop-3 applied: %+v %v", res.r, res.err)
		case <-time.After(quiet):
		}
		clients["shop-3"].ack(r3)
		res := <-done
		if res.err != nil {
			t.Fatal(res.err)
		}
		if len(res.r.Proxies) != 3 || res.r.Count(rollout.StateApplied) != 3 {
			t.Errorf("rollout: %+v, want shop-1..3 applied (not cart-1, not shop-late)", res.r.Proxies)
		}
		if p := proxy(t, s, "shop-late"); p.State != rollout.StatePending {
			t.Errorf("shop-late: %+v", p)
		}
		if got := s.metric(t, "allot_xds_proxies", "pending"); got != 1 {
			t.Errorf("proxies{state=pending} = %v, want 1", got)
		}
		late.close()
		eventually(t, func() error {
			if n := len(s.Proxies()); n != 4 {
				return fmt.Errorf("%d proxies after shop-late left, want 4", n)
			}
			return nil
		})
	})

	t.Run("a rejection ends the wait for that proxy", func(t *testing.T) {
		targets := write("v3")
		done := waitFor(context.Background(), targets)
		clients["shop-1"].ack(clients["shop-1"].expect("v3"))
		clients["shop-2"].ack(clients["shop-2"].expect("v3"))
		clients["shop-3"].nack(clients["shop-3"].expect("v3"), "v2", "unknown field")
		res := <-done
		if !errors.Is(res.err, rollout.ErrRejected) || !strings.Contains(res.err.Error(), "unknown field") {
			t.Fatalf("err = %v, want ErrRejected naming the reason", res.err)
		}
		if res.r.Count(rollout.StateApplied) != 2 || res.r.Count(rollout.StateRejected) != 1 {
			t.Errorf("rollout: %+v", res.r.Proxies)
		}
		if u := res.r.Unfinished(); len(u) != 1 || u[0].NodeID != "shop-3" || u[0].Rejected.Version != "v3" {
			t.Errorf("unfinished: %+v", u)
		}
		if got := s.metric(t, "allot_xds_proxies", "rejected"); got != 1 {
			t.Errorf("proxies{state=rejected} = %v, want 1", got)
		}
	})

	t.Run("the deadline reports pending and rejected proxies", func(t *testing.T) {
		targets := write("v4")
		ctx, cancel := context.WithTimeout(context.Background(), quiet)
		defer cancel()
		done := waitFor(ctx, targets)
		clients["shop-1"].ack(clients["shop-1"].expect("v4"))
		clients["shop-2"].nack(clients["shop-2"].expect("v4"), "v3", "bad")
		clients["shop-3"].expect("v4") // never answered
		res := <-done
		if !errors.Is(res.err, context.DeadlineExceeded) || !errors.Is(res.err, rollout.ErrRejected) {
			t.Fatalf("err = %v, want deadline and rejection", res.err)
		}
		got := map[string]rollout.State{}
		for _, p := range res.r.Proxies {
			got[p.NodeID] = p.State
		}
		want := map[string]rollout.State{"shop-1": rollout.StateApplied, "shop-2": rollout.StateRejected, "shop-3": rollout.StatePending}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("states = %v, want %v", got, want)
		}
	})

	t.Run("nothing to wait for", func(t *testing.T) {
		r, err := s.WaitFor(context.Background(), s.Targets().Changed(s.Targets()))
		if err != nil || len(r.Proxies) != 0 {
			t.Errorf("WaitFor(no change) = %+v, %v", r, err)
		}
	})
}

func TestRefreshErrorKeepsConfiguration(t *testing.T) {
	s := startServer(t, &versions{v: map[string]string{"shop": "v1"}})
	c := connect(t, s.addr, xds.APIADS, "shop-1", "shop")
	c.request("", "", "")
	c.ack(c.expect("v1"))
	s.b.set("shop", "broken")
	if err := s.Refresh(context.Background()); err == nil || !strings.Contains(err.Error(), `cluster "shop"`) {
		t.Fatalf("Refresh = %v, want the build error for shop", err)
	}
	if got := s.metric(t, "allot_xds_push_errors_total", ""); got != 1 {
		t.Errorf("push_errors_total = %v, want 1", got)
	}
	if v, _ := s.Version("shop"); v != "v1" {
		t.Errorf("version = %q, want v1 kept", v)
	}
	s.change(t, "shop", "v2")
	c.expect("v2")
}

// TestFirstBuildRacingAWrite: a proxy of a new cluster connects, and its
// first snapshot is built from the store as it was before a write; that
// write's Refresh runs while the build is still in progress. The proxy must
// end up with the written version, not stay on the stale one until the
// next write.
func TestFirstBuildRacingAWrite(t *testing.T) {
	b := &versions{v: map[string]string{}}
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	slow := func(cluster string) (string, *corev3.TypedExtensionConfig, error) {
		v, ext, err := b.build(cluster) // reads the "store"
		once.Do(func() {                // the first build: hold it until the write's refresh has begun
			close(entered)
			<-release
		})
		return v, ext, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	x := xds.New(ctx, slow)
	g := grpc.NewServer()
	x.Register(g)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.Serve(ln)
	t.Cleanup(func() { cancel(); g.Stop() })

	c := connect(t, ln.Addr().String(), xds.APIADS, "late-1", "late")
	c.request("", "", "")
	<-entered // the first build has read v0
	b.set("late", "v1")
	refreshed := make(chan error, 1)
	go func() { refreshed <- x.Refresh(context.Background()) }()
	select { // let the write's refresh take its list of clusters (it may wait for the build)
	case err := <-refreshed:
		refreshed <- err
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-refreshed; err != nil {
		t.Fatal(err)
	}
	r := c.next()
	if r.GetVersionInfo() == "v0" {
		c.ack(r)
		r = c.expect("v1")
	}
	if r.GetVersionInfo() != "v1" {
		t.Fatalf("the proxy got %q, want the written v1", r.GetVersionInfo())
	}
	if v, _ := x.Version("late"); v != "v1" {
		t.Fatalf("cluster version %q, want v1", v)
	}
}
