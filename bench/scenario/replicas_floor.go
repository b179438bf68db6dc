package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/bench/xdsfloor"
	"github.com/allotmesh/allot/internal/harness"
)

// The replicas section's floor: a bare go-control-plane server
// (bench/xdsfloor, one process pinned to the servers' CPU) with a fleet of
// the same size as Allot's, simulated the same way (one allot-xdsload per
// third of it, on the clients' CPU). After each waited write of Allot's,
// the floor pushes the resource that write produced — read from what
// Allot's first simulated proxy received (allot-xdsload -resource-out) —
// and times it until every proxy of its fleet acknowledged it: the same
// bytes to as many proxies, without a store, a registry or replicas.

// floorServer is a running floor server with its control address.
type floorServer struct {
	proc      *harness.Process
	xds, ctl  string
	resources string // the file Allot's first fleet writes its last response to
}

// startFloor starts a floor server named name (with extra arguments) and,
// once it listens, its fleets, one per share of shares, and waits until
// every stream is open. The caller stops the processes it returns (the
// server first), even with an error.
func startFloor(ctx context.Context, o variant.Options, dir string, bins map[string]string, name string, shares []int, extra ...string) (*floorServer, []*harness.Process, error) {
	var procs []*harness.Process
	var addrs [2]string
	for i := range addrs {
		port, err := harness.FreePort()
		if err != nil {
			return nil, nil, err
		}
		addrs[i] = "127.0.0.1:" + strconv.Itoa(port)
	}
	fl := &floorServer{xds: addrs[0], ctl: addrs[1]}
	var err error
	fl.proc, err = startProc("allot-xdsfloor-"+name, filepath.Join(dir, "xds"+name+".log"), o.EnvoyCPU, nil, bins["allot-xdsfloor"],
		append([]string{"-xds-addr", fl.xds, "-http-addr", fl.ctl}, extra...)...)
	if err != nil {
		return nil, nil, err
	}
	procs = append(procs, fl.proc)
	if err := fl.proc.WaitHTTP("http://"+fl.ctl+"/streams", 30*time.Second); err != nil {
		return fl, procs, err
	}
	total := 0
	for i, n := range shares {
		load, err := startProc(fmt.Sprintf("allot-xdsload-%s-%d", name, i), filepath.Join(dir, fmt.Sprintf("xdsload-%s-%d.log", name, i)), o.LoadCPU, nil,
			bins["allot-xdsload"], "-addr", fl.xds, "-clients", strconv.Itoa(n), "-conns", strconv.Itoa(min(replicaConns, n)),
			"-cluster", "sim", "-node", fmt.Sprintf("%s-%d-sim", name, i))
		if err != nil {
			return fl, procs, err
		}
		procs = append(procs, load)
		total += n
	}
	deadline := time.Now().Add(120 * time.Second)
	for {
		n, err := fl.streams(ctx)
		if err == nil && n == total {
			return fl, procs, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fl, procs, fmt.Errorf("%s's fleet connecting: %d of %d streams open (%v)", name, n, total, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The replicated floor: report.ReplicaCount floor servers following the
// fleet's etcd cluster (xdsfloor.Follow), each with a fleet of one
// replica's share, written to by this process (xdsfloor.Writer). A push is
// a commit of the resource, each server's push to its fleet, each one's
// commit that its fleet applied it, and the writer's watch delivering the
// last: what any replicated control plane on etcd does for a waited write,
// and nothing else.
type replicatedFloor struct {
	servers []*floorServer
	ids     []string
	loads   []*harness.Process // the servers' fleets
	etcd    *clientv3.Client
	w       *xdsfloor.Writer
}

// replicatedPrefix is the replicated floor's keys in the fleet's etcd.
const replicatedPrefix = "/bench/floor-replicated/"

// startReplicatedFloor starts the replicated floor on cluster, one server
// and fleet per share of shares, and its writer. The caller stops the
// processes it returns and closes the floor, even with an error.
func startReplicatedFloor(ctx context.Context, o variant.Options, dir string, bins map[string]string, cluster *harness.EtcdCluster, shares []int) (*replicatedFloor, []*harness.Process, error) {
	var eps []string
	for _, m := range cluster.Members {
		eps = append(eps, "http://"+m.Endpoint())
	}
	rf := &replicatedFloor{}
	var procs []*harness.Process
	for i, n := range shares {
		id := fmt.Sprintf("fr%d", i+1)
		fl, ps, err := startFloor(ctx, o, dir, bins, id, []int{n}, "-etcd", strings.Join(eps, ","), "-id", id, "-prefix", replicatedPrefix)
		procs = append(procs, ps...)
		if err != nil {
			return rf, procs, err
		}
		rf.servers = append(rf.servers, fl)
		rf.ids = append(rf.ids, id)
		rf.loads = append(rf.loads, ps[1:]...) // startFloor starts the server first
	}
	var err error
	rf.etcd, err = clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return rf, procs, err
	}
	rf.w, err = xdsfloor.NewWriter(ctx, rf.etcd, replicatedPrefix)
	return rf, procs, err
}

// close closes the floor's etcd client.
func (rf *replicatedFloor) close() {
	if rf.etcd != nil {
		rf.etcd.Close()
	}
}

// push has the replicated floor apply resource and adds its time to s.
func (rf *replicatedFloor) push(ctx context.Context, resource []byte, clients int, s *report.Spread) error {
	ctx, cancel := context.WithTimeout(ctx, replicaWait)
	defer cancel()
	t0 := time.Now()
	n, err := rf.w.Write(ctx, resource, rf.ids)
	d := time.Since(t0)
	if err != nil {
		return fmt.Errorf("the replicated floor: %w", err)
	}
	if n != clients {
		return fmt.Errorf("the replicated floor: %d of %d streams acknowledged", n, clients)
	}
	s.AllAck = append(s.AllAck, ms(d))
	return nil
}

// streams is the floor's count of open streams.
func (fl *floorServer) streams(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+fl.ctl+"/streams", nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// push has the floor push resource (a TypedExtensionConfig) and returns
// how long it took until the whole answer was read, and how many streams
// acknowledged it.
func (fl *floorServer) push(ctx context.Context, resource []byte) (time.Duration, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+fl.ctl+"/push?wait="+replicaWait.String(), bytes.NewReader(resource))
	if err != nil {
		return 0, 0, err
	}
	t0 := time.Now()
	resp, err := slowClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	d := time.Since(t0)
	if err != nil {
		return 0, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("floor push: %s: %.300s", resp.Status, b)
	}
	var out struct {
		Acked int `json:"acked"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, 0, fmt.Errorf("floor push: %w", err)
	}
	return d, out.Acked, nil
}

// allotResource is the resource of the last response Allot's first
// simulated proxy received, once that response is version (any version if
// empty): the file is written after every proxy of its fleet acknowledged
// it, so it is polled for a short while.
func allotResource(path, version string) ([]byte, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			var resp discoveryv3.DiscoveryResponse
			if err := proto.Unmarshal(b, &resp); err != nil {
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			if len(resp.GetResources()) != 1 {
				return nil, fmt.Errorf("%s: %d resources, want 1", path, len(resp.GetResources()))
			}
			if version == "" || resp.GetVersionInfo() == version {
				return resp.GetResources()[0].GetValue(), nil
			}
			err = fmt.Errorf("version %s, want %s", resp.GetVersionInfo(), version)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("Allot's resource as its proxies received it (%s): %w", path, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// floorPush pushes the resource Allot's write of version produced to the
// floor's fleet of clients, adds its time to s, and returns the resource.
func floorPush(ctx context.Context, fl *floorServer, version string, clients int, s *report.Spread) ([]byte, error) {
	res, err := allotResource(fl.resources, version)
	if err != nil {
		return nil, err
	}
	d, n, err := fl.push(ctx, res)
	if err != nil {
		return nil, err
	}
	if n != clients {
		return nil, fmt.Errorf("floor push: %d of %d streams acknowledged", n, clients)
	}
	s.AllAck = append(s.AllAck, ms(d))
	return res, nil
}

// memory reads the peak and current RSS of every allotd replica, etcd
// member, the floor and the replicated floor's servers, summed per kind.
func memory(reps []replica, members []*harness.Process, fl *floorServer, rf *replicatedFloor) (report.ReplicaRSS, error) {
	var m report.ReplicaRSS
	add := func(p *harness.Process, peak, now *int64) error {
		hwm, err := harness.ReadPeakRSS(p.Pid())
		if err != nil {
			return fmt.Errorf("%s: %w", p.Name(), err)
		}
		rss, err := harness.ReadRSS(p.Pid())
		if err != nil {
			return fmt.Errorf("%s: %w", p.Name(), err)
		}
		*peak += hwm
		*now += rss
		return nil
	}
	for _, r := range reps {
		if err := add(r.proc, &m.AllotdPeak, &m.Allotd); err != nil {
			return m, err
		}
	}
	for _, p := range members {
		if err := add(p, &m.EtcdPeak, &m.Etcd); err != nil {
			return m, err
		}
	}
	for _, f := range rf.servers {
		if err := add(f.proc, &m.ReplicatedPeak, &m.Replicated); err != nil {
			return m, err
		}
	}
	return m, add(fl.proc, &m.FloorPeak, &m.Floor)
}

// profileServers takes the profiles of d from each of targets (name → URL
// of a /debug/pprof/ profile, with its seconds) at once, into
// dir/<name>.pprof; the function it returns waits for them and reports the
// first failure.
func profileServers(ctx context.Context, targets map[string]string, dir string, d time.Duration) func() error {
	errs := make(chan error, len(targets))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return func() error { return err }
	}
	c := &http.Client{Timeout: d + 30*time.Second}
	for name, url := range targets {
		go func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				errs <- err
				return
			}
			resp, err := c.Do(req)
			if err != nil {
				errs <- fmt.Errorf("profile %s: %w", name, err)
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: %.200s", resp.Status, b)
			}
			if err == nil {
				err = os.WriteFile(filepath.Join(dir, name+".pprof"), b, 0o644)
			}
			if err != nil {
				err = fmt.Errorf("profile %s: %w", name, err)
			}
			errs <- err
		}()
	}
	return func() error {
		var first error
		for range targets {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		return first
	}
}

// cpuNanos is the CPU time the processes used so far, summed.
func cpuNanos(procs ...*harness.Process) (int64, error) {
	var total int64
	for _, p := range procs {
		n, err := harness.CPUNanos(p.Pid())
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p.Name(), err)
		}
		total += n
	}
	return total, nil
}

// cpuCounter measures the CPU time groups of processes use over a window:
// start waits until they are idle and reads every group, add appends one
// group's use since start, in ms.
type cpuCounter struct {
	groups map[string][]*harness.Process
	at     map[string]int64
	starts int // windows started
	busy   int // of them, those that started before the processes were idle (settleWait passed)
}

func newCPUCounter(groups map[string][]*harness.Process) *cpuCounter {
	return &cpuCounter{groups: groups, at: map[string]int64{}}
}

// A window starts once every process of the section, together, used less
// than settleIdle of a CPU over settleWindow, or after settleWait.
const (
	settleWindow = 25 * time.Millisecond
	settleIdle   = 0.1
	settleWait   = 2 * time.Second
)

// settle waits until every process of the groups is idle (see
// settleWindow), so that a timed push pays for neither the work the one
// before it left (its last publishes, its garbage collection) nor the
// bench's own reads between them (etcd's metrics, the status check), all
// on the same CPUs. It counts a wait that ran out in c.busy.
func (c *cpuCounter) settle(ctx context.Context) error {
	var all []*harness.Process
	for _, procs := range c.groups {
		all = append(all, procs...)
	}
	deadline := time.Now().Add(settleWait)
	last, err := cpuNanos(all...)
	if err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(settleWindow):
		}
		n, err := cpuNanos(all...)
		switch {
		case err != nil:
			return err
		case float64(n-last) < settleIdle*float64(settleWindow):
			return nil
		case time.Now().After(deadline):
			c.busy++
			return nil
		}
		last = n
	}
}

// start begins a window: once the processes are idle (settle), it reads
// every group's CPU time.
func (c *cpuCounter) start(ctx context.Context) error {
	if err := c.settle(ctx); err != nil {
		return err
	}
	c.starts++
	for name, procs := range c.groups {
		n, err := cpuNanos(procs...)
		if err != nil {
			return err
		}
		c.at[name] = n
	}
	return nil
}

// add adds group name's CPU time since start, in ms, to dst.
func (c *cpuCounter) add(dst *[]float64, name string) error {
	n, err := cpuNanos(c.groups[name]...)
	if err != nil {
		return err
	}
	*dst = append(*dst, float64(n-c.at[name])/1e6)
	return nil
}

// etcdOps counts what the etcd members did: raft proposals committed (the
// writes, each applied by every member), and, summed over the members,
// the Range, Txn and Put requests they served and the events their
// watches sent.
type etcdOps struct {
	Proposals, Ranges, Txns, Puts, WatchEvents float64
}

// readEtcdOps reads the members' counters from their /metrics.
func readEtcdOps(ctx context.Context, cluster *harness.EtcdCluster) (etcdOps, error) {
	var o etcdOps
	for i, m := range cluster.Members {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+m.Endpoint()+"/metrics", nil)
		if err != nil {
			return o, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return o, fmt.Errorf("etcd %s metrics: %w", m.Name, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return o, fmt.Errorf("etcd %s metrics: %w", m.Name, err)
		}
		for _, m := range samples(b) {
			switch name := m.series; {
			case name == "etcd_server_proposals_committed_total" && i == 0:
				o.Proposals = m.value
			case name == "etcd_debugging_mvcc_events_total":
				o.WatchEvents += m.value
			case strings.HasPrefix(name, "grpc_server_handled_total{") && strings.Contains(name, `grpc_service="etcdserverpb.KV"`):
				switch {
				case strings.Contains(name, `grpc_method="Range"`):
					o.Ranges += m.value
				case strings.Contains(name, `grpc_method="Txn"`):
					o.Txns += m.value
				case strings.Contains(name, `grpc_method="Put"`):
					o.Puts += m.value
				}
			}
		}
	}
	return o, nil
}

// since is o minus an earlier reading.
func (o etcdOps) since(was etcdOps) report.EtcdOps {
	return report.EtcdOps{Proposals: o.Proposals - was.Proposals, Ranges: o.Ranges - was.Ranges, Txns: o.Txns - was.Txns,
		Puts: o.Puts - was.Puts, WatchEvents: o.WatchEvents - was.WatchEvents}
}
