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

// floorServer is the running floor with its control address.
type floorServer struct {
	proc      *harness.Process
	xds, ctl  string
	resources string // the file Allot's first fleet writes its last response to
}

// startFloor starts the floor and, once it listens, its fleets, one per
// share of perReplica, and waits until every stream is open.
func startFloor(ctx context.Context, o variant.Options, dir string, bins map[string]string, perReplica []int) (*floorServer, []*harness.Process, error) {
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
	fl.proc, err = startProc("allot-xdsfloor", filepath.Join(dir, "xdsfloor.log"), o.EnvoyCPU, nil, bins["allot-xdsfloor"],
		"-xds-addr", fl.xds, "-http-addr", fl.ctl)
	if err != nil {
		return nil, nil, err
	}
	procs = append(procs, fl.proc)
	if err := fl.proc.WaitHTTP("http://"+fl.ctl+"/streams", 30*time.Second); err != nil {
		return fl, procs, err
	}
	total := 0
	for i, n := range perReplica {
		load, err := startProc(fmt.Sprintf("allot-xdsload-floor%d", i), filepath.Join(dir, fmt.Sprintf("xdsload-floor%d.log", i)), o.LoadCPU, nil,
			bins["allot-xdsload"], "-addr", fl.xds, "-clients", strconv.Itoa(n), "-conns", strconv.Itoa(min(replicaConns, n)),
			"-cluster", "sim", "-node", fmt.Sprintf("f%d-sim", i))
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
			return fl, procs, fmt.Errorf("the floor's fleet connecting: %d of %d streams open (%v)", n, total, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
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
// floor's fleet of clients, and adds its time to s.
func floorPush(ctx context.Context, fl *floorServer, version string, clients int, s *report.Spread) error {
	res, err := allotResource(fl.resources, version)
	if err != nil {
		return err
	}
	d, n, err := fl.push(ctx, res)
	if err != nil {
		return err
	}
	if n != clients {
		return fmt.Errorf("floor push: %d of %d streams acknowledged", n, clients)
	}
	s.AllAck = append(s.AllAck, ms(d))
	return nil
}

// memory reads the peak and current RSS of every allotd replica, etcd
// member and the floor, summed per kind.
func memory(reps []replica, members []*harness.Process, fl *floorServer) (report.ReplicaRSS, error) {
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
	return m, add(fl.proc, &m.FloorPeak, &m.Floor)
}

// profileServers takes a CPU profile of d from each of targets (name →
// base URL of a /debug/pprof/ endpoint) at once, into dir/<name>.pprof; the
// function it returns waits for them and reports the first failure.
func profileServers(ctx context.Context, targets map[string]string, dir string, d time.Duration) func() error {
	errs := make(chan error, len(targets))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return func() error { return err }
	}
	c := &http.Client{Timeout: d + 30*time.Second}
	for name, base := range targets {
		go func() {
			url := fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", base, int(d.Seconds()))
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
// start reads every group, add appends one group's use since
// start, in ms.
type cpuCounter struct {
	groups map[string][]*harness.Process
	at     map[string]int64
}

func newCPUCounter(groups map[string][]*harness.Process) *cpuCounter {
	return &cpuCounter{groups: groups, at: map[string]int64{}}
}

func (c *cpuCounter) start() error {
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

// etcdCommits times n puts of one small key, one after the other, on the
// fleet's etcd cluster from this process: what one durable write through
// etcd costs at that moment, with the fleets connected and idle. A waited
// write needs at least two, one after the other — its own, then a
// replica's record saying its proxies applied it, which the waiting
// replica's watch then delivers — beside the push the floor measures.
func etcdCommits(ctx context.Context, cluster *harness.EtcdCluster, n int) (report.Spread, error) {
	var eps []string
	for _, m := range cluster.Members {
		eps = append(eps, m.Endpoint())
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return report.Spread{}, err
	}
	defer c.Close()
	s := report.Spread{Writes: n}
	for i := range n {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t0 := time.Now()
		_, err := c.Put(cctx, "/bench/commit", strconv.Itoa(i))
		d := time.Since(t0)
		cancel()
		if err != nil {
			return s, fmt.Errorf("etcd put %d: %w", i, err)
		}
		s.AllAck = append(s.AllAck, ms(d))
	}
	s.Summarize()
	return s, nil
}
