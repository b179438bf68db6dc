package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/stats"
	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/internal/harness"
)

// The replicas section: write → all-ACK latency when allotd runs as
// report.ReplicaCount replicas sharing as many etcd members, with N
// simulated xDS clients spread evenly over the replicas. A waited write
// returns when every live proxy of the whole mesh — read from the etcd
// registry, whichever replica holds its stream — acknowledged it, so its
// duration is write → last ACK across the mesh.
const (
	// replicaLeaseTTL is allotd's -lease-ttl (its default).
	replicaLeaseTTL = 10 * time.Second
	// replicaConns is each fleet's gRPC connections, as propagation's.
	replicaConns = 50
	// replicaWait bounds each waited write (?wait=).
	replicaWait = 30 * time.Second
)

// MeasureReplicas runs the replicas section over fleets; a fleet that
// fails ends the section with NotMeasured set and the fleets measured so
// far kept.
func MeasureReplicas(ctx context.Context, o variant.Options, p *variant.Paths, fleets []report.ReplicaFleet, logf func(string, ...any)) (report.ReplicasResult, []string) {
	res := report.ReplicasResult{Replicas: report.ReplicaCount, EtcdMembers: report.ReplicaCount, ServerCPU: o.EnvoyCPU, ClientCPU: o.LoadCPU, Experiments: report.ReplicaExperiments}
	if o.ReplicaProfile > 0 {
		// etcd reads its flags from the environment too: its members serve
		// /debug/pprof/ on their client URLs.
		os.Setenv("ETCD_ENABLE_PPROF", "true")
	}
	bins, cmds, err := buildReplicaBins(ctx, o, p)
	if err != nil {
		res.NotMeasured = err.Error()
		return res, cmds
	}
	for _, f := range fleets {
		logf("replicas: %d etcd members, %d allotd replicas, %d simulated clients, %d waited writes", report.ReplicaCount, report.ReplicaCount, f.Clients, f.Writes)
		s, err := replicaRun(ctx, o, p, bins, f, logf)
		if err != nil {
			res.NotMeasured = fmt.Sprintf("%d clients: %v", f.Clients, err)
			break
		}
		logf("replicas: %d clients: write → all ACKs p50 %.1f ms, p99 %.1f ms, max %.1f ms; floor p50 %.1f ms, p99 %.1f ms; replicated floor p50 %.1f ms, p99 %.1f ms",
			f.Clients, s.P50, s.P99, s.Max, s.Floor.P50, s.Floor.P99, s.Replicated.P50, s.Replicated.P99)
		logf("replicas: %d clients: CPU per write (median ms): allotd %.0f, etcd %.0f, clients %.0f; floor %.0f, its clients %.0f; replicated floor %.0f, etcd %.0f; RSS peak MiB: allotd %.0f, etcd %.0f, floor %.0f",
			f.Clients, stats.Median(s.CPU.Allotd), stats.Median(s.CPU.Etcd), stats.Median(s.CPU.Load), stats.Median(s.CPU.Floor), stats.Median(s.CPU.FloorLoad),
			stats.Median(s.CPU.Replicated), stats.Median(s.CPU.ReplicatedEtcd),
			float64(s.RSS.AllotdPeak)/(1<<20), float64(s.RSS.EtcdPeak)/(1<<20), float64(s.RSS.FloorPeak)/(1<<20))
		res.Fleets = append(res.Fleets, *s)
	}
	logf("outcomes: %d etcd members, %d allotd replicas, %d simulated proxies reporting every %v", report.ReplicaCount, report.ReplicaCount, OutcomeClients, outcomeInterval)
	ol := measureOutcomeLoad(ctx, o, p, bins, logf)
	res.Outcomes = &ol
	cmds = append(cmds,
		fmt.Sprintf("taskset -c %d bench/raw/bin/etcd --name m<i> --listen-client-urls http://127.0.0.1:<port> --initial-cluster m0=…,m1=…,m2=… --auto-compaction-mode periodic --auto-compaction-retention 1m   # 3 members", o.EnvoyCPU),
		fmt.Sprintf("taskset -c %d bench/raw/bin/allotd -store etcd://127.0.0.1:<port>,… -replica-id r<i> -lease-ttl %v -admin-addr 127.0.0.1:<port> -xds-addr 127.0.0.1:<port> -tokens envoy-configs/dev-tokens.json   # 3 replicas", o.EnvoyCPU, replicaLeaseTTL),
		fmt.Sprintf("taskset -c %d bench/raw/bin/allot-xdsload -addr <replica i's xDS address> -clients <N/3> -conns %d -cluster sim -node r<i>-sim   # one per replica", o.LoadCPU, replicaConns),
		"curl -X POST -H 'Authorization: Bearer <admin token>' '127.0.0.1:<replica (write mod 3)'s port>/v1/experiments?wait=30s' -d '{\"key\":\"rep-…\",…}'   # timed; GET /v1/rollout through the next replica checks all N applied",
		fmt.Sprintf("taskset -c %d bench/raw/bin/allot-xdsload -addr <replica i's xDS address> -clients %d -conns 0 -cluster sim -node r<i>-sim -report-interval %v -report-experiments obs-0,…,obs-%d   # outcomes: one per replica; SIGUSR1 starts the exports, SIGUSR2 stops them", o.LoadCPU, OutcomeClients/report.ReplicaCount, outcomeInterval, outcomeExperiments-1))
	return res, cmds
}

// buildReplicaBins builds allotd (unless -allotd names one), allot-xdsload
// and the etcd server.
func buildReplicaBins(ctx context.Context, o variant.Options, p *variant.Paths) (map[string]string, []string, error) {
	bins := map[string]string{}
	var cmds []string
	for name, pkg := range map[string]string{
		"allotd": "./control-plane/cmd/allotd", "allot-xdsload": "./control-plane/cmd/allot-xdsload", "etcd": harness.EtcdPackage,
		"allot-xdsfloor": "./bench/cmd/allot-xdsfloor",
	} {
		if name == "allotd" && o.Allotd != "" {
			bins[name] = o.Allotd
			cmds = append(cmds, "# allotd: "+o.Allotd+" (-allotd), not built from this tree")
			continue
		}
		out := filepath.Join(p.Raw, "bin", name)
		if err := harness.GoBuild(ctx, o.Root, out, pkg, nil); err != nil {
			return nil, cmds, fmt.Errorf("%s does not build: %w", pkg, err)
		}
		bins[name] = out
	}
	cmds = append(cmds, "go build -o bench/raw/bin/etcd "+harness.EtcdPackage)
	return bins, cmds, nil
}

// replica is one running allotd replica.
type replica struct {
	id, admin, xds string
	pprof          string // -pprof-addr, when profiling
	proc           *harness.Process
}

// replicaRun starts a fresh etcd cluster, the replicas and the fleets, and
// times f.Writes waited writes, each through the next replica in turn.
func replicaRun(ctx context.Context, o variant.Options, p *variant.Paths, bins map[string]string, f report.ReplicaFleet, logf func(string, ...any)) (*report.ReplicaSpread, error) {
	dir := filepath.Join(p.Raw, fmt.Sprintf("replicas-%d", f.Clients))
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cluster, members, err := harness.StartEtcd(bins["etcd"], dir, report.ReplicaCount, o.EnvoyCPU)
	defer func() {
		for _, m := range members {
			m.Terminate()
		}
	}()
	if err != nil {
		return nil, err
	}

	reps, err := startReplicas(o, p, dir, bins["allotd"], cluster)
	defer func() {
		// Replicas first, so that none outlives its store.
		for _, r := range reps {
			r.proc.Terminate()
		}
	}()
	if err != nil {
		return nil, err
	}

	s := &report.ReplicaSpread{TargetP99: ms(f.TargetP99), TargetRatio: f.TargetRatio}
	s.Proxies, s.Writes = f.Clients, f.Writes
	t0 := time.Now()
	loads, err := startFleets(o, dir, bins, reps, s)
	defer func() {
		for _, l := range loads {
			l.Terminate()
		}
	}()
	if err != nil {
		return nil, err
	}
	// Every replica must see the whole fleet, applied.
	for i := range reps {
		if err := waitMesh(ctx, reps[i], reps, s.PerReplica, "", 120*time.Second); err != nil {
			return nil, fmt.Errorf("the fleet connecting: %w", err)
		}
	}
	s.Connect = ms(time.Since(t0))
	logf("replicas: %d clients connected and applied in %.1f s", f.Clients, s.Connect/1e3)

	// The floors and their fleets, connected and on Allot's resource of now.
	fs, err := startFloors(ctx, o, dir, bins, cluster, s)
	defer fs.stop()
	if err != nil {
		return nil, err
	}
	fl, rf := fs.fl, fs.rf

	if o.ReplicaProfile > 0 {
		wait := profileRun(ctx, o, dir, reps, cluster, fl, rf)
		defer func() {
			if err := wait(); err != nil {
				logf("replicas: %v", err)
			}
		}()
	}
	procs := make([]*harness.Process, len(reps))
	for i, r := range reps {
		procs[i] = r.proc
	}
	fs.groups["allotd"], fs.groups["etcd"], fs.groups["load"] = procs, members, loads
	cpu := newCPUCounter(fs.groups)
	s.Applied = f.Clients
	for i := range f.Writes {
		if err := replicaRound(ctx, i, reps, fl, rf, cluster, cpu, s); err != nil {
			return nil, err
		}
	}
	s.Summarize()
	s.Floor.Summarize()
	s.Replicated.Summarize()
	if s.RSS, err = memory(reps, members, fl, rf); err != nil {
		return nil, err
	}
	s.Note = fmt.Sprintf("%d replicas on a %d-member etcd cluster (pinned to CPU %d); %s clients simulated by allot-xdsload, one fleet per replica (%s streams over %d gRPC connections each, pinned to CPU %d); write i goes to replica i mod 3.",
		report.ReplicaCount, report.ReplicaCount, o.EnvoyCPU, variant.Thousands(f.Clients), variant.JoinInts(s.PerReplica, "/"), replicaConns, o.LoadCPU)
	s.Note += fmt.Sprintf(" Each timed window started once every process of the section was idle (under %.0f%% of a CPU over %v), at most %v after the step before it; %d of %d did not get there.",
		settleIdle*100, settleWindow, settleWait, cpu.busy, cpu.starts)
	return s, nil
}

// floors are a fleet's floor and replicated floor, their processes (to
// stop) and the groups of them whose CPU time the rounds count.
type floors struct {
	fl     *floorServer
	rf     *replicatedFloor
	procs  []*harness.Process
	groups map[string][]*harness.Process
}

// stop stops the floors' processes.
func (fs *floors) stop() {
	for _, p := range fs.procs {
		p.Terminate()
	}
	if fs.rf != nil {
		fs.rf.close()
	}
}

// startFloors starts the floor and the replicated floor, each with a
// fleet of s.Proxies split as s.PerReplica, has each push the resource
// Allot's fleet last received, and sets up s.Floor and s.Replicated. The
// caller stops them, even with an error.
func startFloors(ctx context.Context, o variant.Options, dir string, bins map[string]string, cluster *harness.EtcdCluster, s *report.ReplicaSpread) (*floors, error) {
	fs := &floors{groups: map[string][]*harness.Process{}}
	fl, procs, err := startFloor(ctx, o, dir, bins, "floor", s.PerReplica)
	fs.fl, fs.procs = fl, append(fs.procs, procs...)
	if err != nil {
		return fs, fmt.Errorf("the floor: %w", err)
	}
	fs.groups["floor"], fs.groups["floor-load"] = procs[:1], procs[1:]
	fl.resources = filepath.Join(dir, "resource.pb")
	s.Floor = &report.Spread{Proxies: s.Proxies, Writes: s.Writes}
	res, err := floorPush(ctx, fl, "", s.Proxies, &report.Spread{})
	if err != nil {
		return fs, fmt.Errorf("the floor's first push: %w", err)
	}
	// The replicated floor: as many servers as replicas, on the same etcd.
	rf, procs, err := startReplicatedFloor(ctx, o, dir, bins, cluster, s.PerReplica)
	fs.rf, fs.procs = rf, append(fs.procs, procs...)
	if err != nil {
		return fs, fmt.Errorf("the replicated floor: %w", err)
	}
	s.Replicated = &report.Spread{Proxies: s.Proxies, Writes: s.Writes}
	if err := rf.push(ctx, res, s.Proxies, &report.Spread{}); err != nil {
		return fs, fmt.Errorf("its first push: %w", err)
	}
	for _, f := range rf.servers {
		fs.groups["replicated"] = append(fs.groups["replicated"], f.proc)
	}
	fs.groups["replicated-load"] = rf.loads
	return fs, nil
}

// startFleets starts the simulated proxies: an even share of s.Proxies on
// each replica (recorded in s.PerReplica), node ids prefixed with the
// replica's id; the first fleet writes what it last received to
// dir/resource.pb (the floor pushes it). The caller stops the processes
// it returns, even with an error.
func startFleets(o variant.Options, dir string, bins map[string]string, reps []replica, s *report.ReplicaSpread) ([]*harness.Process, error) {
	var loads []*harness.Process
	for i, r := range reps {
		n := s.Proxies / report.ReplicaCount
		if i < s.Proxies%report.ReplicaCount {
			n++
		}
		s.PerReplica = append(s.PerReplica, n)
		args := []string{"-addr", r.xds, "-clients", strconv.Itoa(n), "-conns", strconv.Itoa(min(replicaConns, n)), "-cluster", "sim", "-node", r.id + "-sim"}
		if i == 0 {
			args = append(args, "-resource-out", filepath.Join(dir, "resource.pb"))
		}
		load, err := startProc("allot-xdsload-"+r.id, filepath.Join(dir, "xdsload-"+r.id+".log"), o.LoadCPU, nil, bins["allot-xdsload"], args...)
		if err != nil {
			return loads, err
		}
		loads = append(loads, load)
	}
	return loads, nil
}

// profileRun starts CPU profiles of every replica, etcd member, the floor
// and the replicated floor's servers, and allocation profiles of the
// replicas (-replica-profile); the function it returns waits for them.
func profileRun(ctx context.Context, o variant.Options, dir string, reps []replica, cluster *harness.EtcdCluster, fl *floorServer, rf *replicatedFloor) func() error {
	secs := int(o.ReplicaProfile.Seconds())
	cpu := func(base string) string { return fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", base, secs) }
	targets := map[string]string{"floor": cpu(fl.ctl)}
	for i, f := range rf.servers {
		targets[rf.ids[i]] = cpu(f.ctl)
	}
	for i, r := range reps {
		targets["allotd-"+r.id] = cpu(r.pprof)
		targets["allotd-"+r.id+".allocs"] = fmt.Sprintf("http://%s/debug/pprof/allocs?seconds=%d", r.pprof, secs)
		targets["etcd-"+cluster.Members[i].Name] = cpu(cluster.Members[i].Endpoint())
	}
	return profileServers(ctx, targets, filepath.Join(dir, "profiles"), o.ReplicaProfile)
}

// replicaRound is round i: a waited write through replica i mod 3, timed
// and checked (its rollout counts every proxy applied; another replica's
// status, untimed, lists every proxy on the written version), then the
// floor's push of the resource it produced, timed, then the replicated
// floor's; each one's CPU time goes to s.CPU.
func replicaRound(ctx context.Context, i int, reps []replica, fl *floorServer, rf *replicatedFloor, cluster *harness.EtcdCluster, cpu *cpuCounter, s *report.ReplicaSpread) error {
	via, check := reps[i%len(reps)], reps[(i+1)%len(reps)]
	if old := i - report.ReplicaExperiments; old >= 0 {
		if err := waitedDelete(ctx, check.admin, replicaKey(s.Proxies, old), s.Proxies); err != nil {
			return fmt.Errorf("before write %d: delete through %s: %w", i, check.id, err)
		}
		// What the delete left (its publishes) stays out of the write's
		// etcd requests, read next.
		if err := cpu.settle(ctx); err != nil {
			return err
		}
	}
	ops, err := readEtcdOps(ctx, cluster)
	if err != nil {
		return err
	}
	if err := cpu.start(ctx); err != nil {
		return err
	}
	d, ro, err := waitedWrite(ctx, via.admin, replicaKey(s.Proxies, i))
	if err != nil {
		return fmt.Errorf("write %d through %s: %w", i, via.id, err)
	}
	if err := errors.Join(cpu.add(&s.CPU.Allotd, "allotd"), cpu.add(&s.CPU.Etcd, "etcd"), cpu.add(&s.CPU.Load, "load")); err != nil {
		return err
	}
	after, err := readEtcdOps(ctx, cluster)
	if err != nil {
		return err
	}
	s.Ops = append(s.Ops, after.since(ops))
	if ro.Targets["sim"] == "" {
		return fmt.Errorf("write %d through %s: the rollout waited for no new version of cluster sim: %v", i, via.id, ro.Targets)
	}
	// A waited write counts the proxies and lists those that did not
	// apply: there must be none.
	s.Applied = min(s.Applied, ro.Counts["applied"])
	if ro.Result != "applied" || ro.Counts["applied"] != s.Proxies || len(ro.Proxies) != 0 {
		return fmt.Errorf("write %d through %s: the waited write's rollout: %s (%s), applied by %d of %d, %d listed as not",
			i, via.id, ro.Result, ro.Error, ro.Counts["applied"], s.Proxies, len(ro.Proxies))
	}
	// Cross-check, outside the write's window: another replica's status
	// lists the whole fleet, each proxy on its replica, on the written
	// version. It is timed on its own, with the replicas' CPU: what
	// listing every proxy of the mesh costs.
	if err := cpu.start(ctx); err != nil {
		return err
	}
	st, took, err := rolloutStatus(ctx, check.admin)
	if err == nil {
		err = cpu.add(&s.CPU.Status, "allotd")
	}
	if err == nil {
		_, err = checkRollout(st, reps, s.PerReplica, ro.Targets["sim"])
	}
	if err != nil {
		return fmt.Errorf("write %d through %s: status through %s right after: %w", i, via.id, check.id, err)
	}
	s.Status = append(s.Status, ms(took))
	s.AllAck = append(s.AllAck, ms(d))
	// The floor pushes what this write produced, to as many proxies.
	if err := cpu.start(ctx); err != nil {
		return err
	}
	res, err := floorPush(ctx, fl, ro.Targets["sim"], s.Proxies, s.Floor)
	if err != nil {
		return fmt.Errorf("after write %d: %w", i, err)
	}
	if err := errors.Join(cpu.add(&s.CPU.Floor, "floor"), cpu.add(&s.CPU.FloorLoad, "floor-load")); err != nil {
		return err
	}
	if ops, err = readEtcdOps(ctx, cluster); err != nil {
		return err
	}
	if err := cpu.start(ctx); err != nil {
		return err
	}
	if err := rf.push(ctx, res, s.Proxies, s.Replicated); err != nil {
		return fmt.Errorf("after write %d: %w", i, err)
	}
	if err := errors.Join(cpu.add(&s.CPU.Replicated, "replicated"), cpu.add(&s.CPU.ReplicatedEtcd, "etcd"),
		cpu.add(&s.CPU.ReplicatedLoad, "replicated-load")); err != nil {
		return err
	}
	if after, err = readEtcdOps(ctx, cluster); err != nil {
		return err
	}
	s.ReplicatedOps = append(s.ReplicatedOps, after.since(ops))
	return nil
}

// startReplicas starts replicaCount allotd replicas on cluster, pinned to
// the server CPU, and waits until each is ready. The caller stops the
// replicas it returns, even with an error.
func startReplicas(o variant.Options, p *variant.Paths, dir, bin string, cluster *harness.EtcdCluster) ([]replica, error) {
	var reps []replica
	var cmds []harness.Allotd
	for i := range report.ReplicaCount {
		a, err := cluster.Replica(i, replicaLeaseTTL)
		if err != nil {
			return reps, err
		}
		a.Tokens, a.Wasm, a.LogLevel = devTokens(o), p.AllotWasm, "warn"
		r := replica{id: a.ReplicaID, admin: a.Admin, xds: a.XDS}
		if o.ReplicaProfile > 0 {
			port, err := harness.FreePort()
			if err != nil {
				return reps, err
			}
			r.pprof = "127.0.0.1:" + strconv.Itoa(port)
			a.Extra = append(a.Extra, "-pprof-addr", r.pprof)
		}
		if r.proc, err = harness.LaunchAllotd("allotd-"+r.id, filepath.Join(dir, "allotd-"+r.id+".log"), bin, o.EnvoyCPU, a); err != nil {
			return reps, err
		}
		reps, cmds = append(reps, r), append(cmds, a)
	}
	for i, r := range reps {
		if err := cmds[i].WaitReady(r.proc, 30*time.Second); err != nil {
			return reps, err
		}
	}
	return reps, nil
}

// rolloutJSON is the part of the admin API's Rollout the section reads.
type rolloutJSON struct {
	Result  string            `json:"result"`
	Error   string            `json:"error"`
	Targets map[string]string `json:"targets"`
	Counts  map[string]int    `json:"counts"`
	Proxies []rolloutProxy    `json:"proxies"`
}

type rolloutProxy struct {
	Replica string `json:"replica"`
	NodeID  string `json:"nodeId"`
	State   string `json:"state"`
	Target  string `json:"targetVersion"`
	Acked   string `json:"ackedVersion"`
}

// waitedWrite creates experiment key through admin with ?wait= and returns
// how long the request took until its whole response was read, and the
// rollout it reported.
func waitedWrite(ctx context.Context, admin, key string) (time.Duration, *rolloutJSON, error) {
	body := json.RawMessage(fmt.Sprintf(`{"key":%q,"variations":["a","b"],"weights":[0.5,0.5]}`, key))
	t0 := time.Now()
	code, b, err := harness.AdminCall(ctx, slowClient, "http://"+admin, adminToken, http.MethodPost, "/v1/experiments?wait="+replicaWait.String(), body, nil)
	d := time.Since(t0)
	if err != nil {
		return 0, nil, err
	}
	if code != http.StatusCreated {
		return 0, nil, fmt.Errorf("%d %s: %.300s", code, http.StatusText(code), b)
	}
	var out struct {
		Rollout rolloutJSON `json:"rollout"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return 0, nil, err
	}
	return d, &out.Rollout, nil
}

// replicaKey is the key of the experiment write i of a fleet of n creates.
func replicaKey(n, i int) string { return fmt.Sprintf("rep-%d-%d", n, i) }

// waitedDelete deletes the experiment key through the admin API at admin,
// waiting until every one of the fleet's n proxies applied the deletion.
func waitedDelete(ctx context.Context, admin, key string, n int) error {
	code, b, err := harness.AdminCall(ctx, slowClient, "http://"+admin, adminToken, http.MethodDelete, "/v1/experiments/"+key+"?wait="+replicaWait.String(), nil, nil)
	if err != nil {
		return err
	}
	// A waited delete answers 200 with its rollout (204 is a delete that
	// waited for nothing).
	if code != http.StatusOK {
		return fmt.Errorf("%d %s: %.300s", code, http.StatusText(code), b)
	}
	var out struct {
		Rollout *rolloutJSON `json:"rollout"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return err
	}
	if ro := out.Rollout; ro == nil || ro.Result != "applied" || ro.Targets["sim"] == "" || ro.Counts["applied"] != n {
		return fmt.Errorf("%s: the waited delete's rollout did not count all %d proxies applied on a new version of cluster sim: %.300s", key, n, b)
	}
	return nil
}

// slowClient is client with room for a waited write.
var slowClient = &http.Client{Timeout: replicaWait + 10*time.Second, Transport: client.Transport}

// checkRollout checks that ro counts every proxy of every fleet — on the
// replica it was started on — as applied on version target (if not empty),
// and returns how many it counted applied.
func checkRollout(ro *rolloutJSON, reps []replica, perReplica []int, target string) (int, error) {
	if ro.Result != "applied" && ro.Result != "status" {
		return 0, fmt.Errorf("result %q (%s)", ro.Result, ro.Error)
	}
	applied := 0
	count := map[string]int{}
	seen := map[string]bool{}
	var errs []error
	for _, px := range ro.Proxies {
		if seen[px.NodeID] {
			errs = append(errs, fmt.Errorf("%s listed twice", px.NodeID))
		}
		seen[px.NodeID] = true
		count[px.Replica]++
		if !strings.HasPrefix(px.NodeID, px.Replica+"-sim-") {
			errs = append(errs, fmt.Errorf("%s listed on replica %s", px.NodeID, px.Replica))
		}
		switch {
		case px.State != "applied":
			errs = append(errs, fmt.Errorf("%s is %s", px.NodeID, px.State))
		case target != "" && (px.Target != target || px.Acked != target):
			errs = append(errs, fmt.Errorf("%s acked %s with target %s, want %s", px.NodeID, px.Acked, px.Target, target))
		default:
			applied++
		}
	}
	for i, r := range reps {
		if count[r.id] != perReplica[i] {
			errs = append(errs, fmt.Errorf("replica %s has %d proxies, want %d", r.id, count[r.id], perReplica[i]))
		}
	}
	if len(errs) > 0 {
		return applied, fmt.Errorf("%d of %d proxies applied: %w", applied, len(ro.Proxies), errors.Join(errs[:min(len(errs), 5)]...))
	}
	return applied, nil
}

// waitMesh polls GET /v1/rollout through r until it lists every fleet's
// proxies applied (on version target, if not empty), for at most timeout
// (once when timeout is 0).
func waitMesh(ctx context.Context, r replica, reps []replica, perReplica []int, target string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ro, _, err := rolloutStatus(ctx, r.admin)
		if err == nil {
			_, err = checkRollout(ro, reps, perReplica, target)
		}
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// rolloutStatus is GET /v1/rollout through admin, and how long it took
// until the whole response was read (not decoded).
func rolloutStatus(ctx context.Context, admin string) (*rolloutJSON, time.Duration, error) {
	start := time.Now()
	code, b, err := harness.AdminCall(ctx, slowClient, "http://"+admin, adminToken, http.MethodGet, "/v1/rollout", nil, nil)
	took := time.Since(start)
	if err != nil {
		return nil, took, err
	}
	if code != http.StatusOK {
		return nil, took, fmt.Errorf("GET /v1/rollout: %d %s: %.300s", code, http.StatusText(code), b)
	}
	var ro rolloutJSON
	if err := json.Unmarshal(b, &ro); err != nil {
		return nil, took, fmt.Errorf("GET /v1/rollout: decode %.300s: %w", b, err)
	}
	return &ro, took, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// ReplicaFleets are the fleets of sizes clients: ReplicaFleets' (with
// their targets) where they list the size, else 20 writes and no target.
// No sizes: every fleet of ReplicaFleets.
func ReplicaFleets(clients []int) []report.ReplicaFleet {
	if len(clients) == 0 {
		return report.ReplicaFleets
	}
	var out []report.ReplicaFleet
	for _, n := range clients {
		f := report.ReplicaFleet{Clients: n, Writes: 20}
		for _, known := range report.ReplicaFleets {
			if known.Clients == n {
				f = known
			}
		}
		out = append(out, f)
	}
	return out
}

// RunReplicas is the replicas section alone (`make bench-replicas`,
// -replicas): bench/raw/REPLICAS.md and replicas.json.
func RunReplicas(ctx context.Context, o variant.Options, p *variant.Paths, logf func(string, ...any)) error {
	start := time.Now()
	res := &report.Results{Started: start, Options: o, Machine: DescribeMachine(o), Commands: []string{o.Command}, LoadBefore: Loadavg()}
	rep, cmds := MeasureReplicas(ctx, o, p, ReplicaFleets(o.ReplicaClients), logf)
	res.Replicas = &rep
	res.Commands = append(res.Commands, cmds...)
	res.LoadAfter = Loadavg()
	res.Duration = time.Since(start)
	report, err := report.RenderReplicas(res)
	if err != nil {
		return err
	}
	if err := writeOutputs(o, p.Raw, "replicas.json", res, "REPLICAS.md", report, res.Duration, logf); err != nil {
		return err
	}
	if rep.NotMeasured != "" {
		return fmt.Errorf("replicas: %s", rep.NotMeasured)
	}
	return nil
}
