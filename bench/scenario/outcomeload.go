package scenario

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/internal/harness"
)

// The outcomes load: what receiving outcome reports costs allotd. The
// replicas section's setting (replicaCount replicas on a replicaCount-member
// etcd cluster) with OutcomeClients simulated proxies, each on its own
// connection (allotd takes an export to be the proxy's whose xDS stream
// shares its connection), reporting outcomeExperiments observed experiments
// of 2 variations every outcomeInterval as Envoy's OpenTelemetry stat sink
// does. allotd's and etcd's CPU and allotd's RSS are read over a window
// with the fleet connected and idle, then over one with it reporting.
const (
	// OutcomeClients is the simulated proxies of the outcomes load.
	OutcomeClients     = 10000
	outcomeExperiments = 5
	outcomeInterval    = 5 * time.Second // the bootstraps' stats_flush_interval
	outcomeRequests    = 10              // responses per variation per export
	outcomeWindow      = 30 * time.Second
)

// measureOutcomeLoad runs the outcomes load on a fresh etcd cluster and
// replicas.
func measureOutcomeLoad(ctx context.Context, o variant.Options, p *variant.Paths, bins map[string]string, logf func(string, ...any)) (res report.OutcomeLoad) {
	res = report.OutcomeLoad{Clients: OutcomeClients, Experiments: outcomeExperiments, IntervalS: outcomeInterval.Seconds(), WindowS: outcomeWindow.Seconds()}
	if err := outcomeLoadRun(ctx, o, p, bins, &res, logf); err != nil {
		res.NotMeasured = err.Error()
	}
	return res
}

func outcomeLoadRun(ctx context.Context, o variant.Options, p *variant.Paths, bins map[string]string, res *report.OutcomeLoad, logf func(string, ...any)) error {
	dir := filepath.Join(p.Raw, "outcomes")
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cluster, members, err := harness.StartEtcd(bins["etcd"], dir, report.ReplicaCount, o.EnvoyCPU)
	defer func() {
		for _, m := range members {
			m.Terminate()
		}
	}()
	if err != nil {
		return err
	}
	reps, err := startReplicas(o, p, dir, bins["allotd"], cluster)
	defer func() {
		for _, r := range reps {
			r.proc.Terminate()
		}
	}()
	if err != nil {
		return err
	}
	keys, err := createObserved(ctx, reps[0].admin)
	if err != nil {
		return err
	}
	fleets, err := startOutcomeFleets(ctx, o, dir, bins["allot-xdsload"], reps, keys)
	defer func() {
		for i := len(fleets) - 1; i >= 0; i-- {
			fleets[i].Terminate()
		}
	}()
	if err != nil {
		return err
	}
	logf("outcomes: %d proxies connected and applied; %v idle", OutcomeClients, outcomeWindow)

	var allotds []*harness.Process
	for _, r := range reps {
		allotds = append(allotds, r.proc)
	}
	if res.AllotdIdle, res.EtcdIdle, res.RSSIdle, err = cpuWindow(ctx, allotds, members); err != nil {
		return err
	}
	if err := measureReporting(ctx, reps, fleets, allotds, members, res); err != nil {
		return err
	}
	logf("outcomes: %.0f exports/s: allotd %.3f → %.3f cores, etcd %.3f → %.3f", res.Exports, res.AllotdIdle, res.AllotdReporting, res.EtcdIdle, res.EtcdReporting)
	return countOutcomes(ctx, reps, fleets, keys[0], res)
}

// createObserved creates the outcomeExperiments observed experiments
// (obs-0, obs-1, …) through the admin API at admin and returns their keys.
func createObserved(ctx context.Context, admin string) ([]string, error) {
	var keys []string
	for i := range outcomeExperiments {
		key := fmt.Sprintf("obs-%d", i)
		keys = append(keys, key)
		body := json.RawMessage(fmt.Sprintf(`{"key":%q,"variations":["a","b"],"weights":[0.5,0.5],"observe":true}`, key))
		code, b, err := harness.AdminCall(ctx, slowClient, "http://"+admin, adminToken, http.MethodPost, "/v1/experiments", body, nil)
		if err != nil {
			return nil, err
		}
		if code != http.StatusCreated {
			return nil, fmt.Errorf("create %s: %d %.300s", key, code, b)
		}
	}
	return keys, nil
}

// startOutcomeFleets starts one allot-xdsload fleet per replica, together
// OutcomeClients simulated proxies reporting keys' outcomes (once told to,
// SIGUSR1), and waits until every replica lists the whole mesh as applied.
// The caller stops the fleets it returns, even with an error.
func startOutcomeFleets(ctx context.Context, o variant.Options, dir, bin string, reps []replica, keys []string) ([]*harness.Process, error) {
	var perReplica []int
	var fleets []*harness.Process
	for i, r := range reps {
		n := OutcomeClients / report.ReplicaCount
		if i < OutcomeClients%report.ReplicaCount {
			n++
		}
		perReplica = append(perReplica, n)
		load, err := startProc("allot-xdsload-"+r.id, filepath.Join(dir, "xdsload-"+r.id+".log"), o.LoadCPU, nil, bin,
			"-addr", r.xds, "-clients", strconv.Itoa(n), "-conns", "0", "-cluster", "sim", "-node", r.id+"-sim",
			"-report-interval", outcomeInterval.String(), "-report-experiments", strings.Join(keys, ","), "-report-variations", "2",
			"-report-requests", strconv.Itoa(outcomeRequests), "-report-errors-permille", "100")
		if err != nil {
			return fleets, err
		}
		fleets = append(fleets, load)
	}
	for i := range reps {
		if err := waitMesh(ctx, reps[i], reps, perReplica, "", 180*time.Second); err != nil {
			return fleets, fmt.Errorf("the fleet connecting: %w", err)
		}
	}
	return fleets, nil
}

// pidsOf are the process ids of ps.
func pidsOf(ps []*harness.Process) []int {
	var out []int
	for _, q := range ps {
		out = append(out, q.Pid())
	}
	return out
}

// cpuWindow measures one outcomeWindow: the CPU cores the allotds and the
// etcd members used over it, and each allotd's RSS (MiB) at its end.
func cpuWindow(ctx context.Context, allotds, members []*harness.Process) (allotd, etcd float64, rss []float64, err error) {
	a0, e0 := cpuSum(pidsOf(allotds)), cpuSum(pidsOf(members))
	t0 := time.Now()
	select {
	case <-time.After(outcomeWindow):
	case <-ctx.Done():
		return 0, 0, nil, ctx.Err()
	}
	secs := time.Since(t0).Seconds()
	allotd, etcd = float64(cpuSum(pidsOf(allotds))-a0)/1e9/secs, float64(cpuSum(pidsOf(members))-e0)/1e9/secs
	for _, q := range allotds {
		b, err := q.RSS()
		if err != nil {
			return 0, 0, nil, err
		}
		rss = append(rss, float64(b)/(1<<20))
	}
	return allotd, etcd, rss, nil
}

// measureReporting tells the fleets to report (SIGUSR1) and measures a
// window of the replicas exporting: CPU, RSS, exports and bytes a second.
func measureReporting(ctx context.Context, reps []replica, fleets, allotds, members []*harness.Process, res *report.OutcomeLoad) error {
	for _, f := range fleets {
		if err := f.Signal(syscall.SIGUSR1); err != nil {
			return err
		}
	}
	// One interval for every proxy's first export, one more to settle.
	time.Sleep(2 * outcomeInterval)
	m0, b0, err := received(ctx, reps)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if res.AllotdReporting, res.EtcdReporting, res.RSSReporting, err = cpuWindow(ctx, allotds, members); err != nil {
		return err
	}
	m1, b1, err := received(ctx, reps)
	if err != nil {
		return err
	}
	secs := time.Since(t0).Seconds()
	res.Exports, res.Bytes = (m1-m0)/secs, (b1-b0)/secs
	if res.Exports > 0 {
		res.PerExport = (res.AllotdReporting - res.AllotdIdle) * 1e6 / res.Exports
	}
	return nil
}

// countOutcomes stops the fleets' exports (SIGUSR2), adds up the exports
// they had taken and refused, and waits for every replica's count of key's
// variation 0 to stop changing: the mesh's total, or (one replica's
// proxies each) a share of it.
func countOutcomes(ctx context.Context, reps []replica, fleets []*harness.Process, key string, res *report.OutcomeLoad) error {
	for _, f := range fleets {
		if err := f.Signal(syscall.SIGUSR2); err != nil {
			return err
		}
	}
	for _, f := range fleets {
		taken, refused, err := stoppedExports(f, 30*time.Second)
		if err != nil {
			return err
		}
		res.Taken += taken
		res.Refused += refused
	}
	res.Expected = res.Taken * outcomeRequests
	deadline := time.Now().Add(30 * time.Second)
	for {
		res.Counted = res.Counted[:0]
		var sum int64
		same := true
		for _, r := range reps {
			n, err := countedRequests(ctx, r.admin, key)
			if err != nil {
				return err
			}
			res.Counted = append(res.Counted, n)
			sum += n
			same = same && n == res.Expected
		}
		if same {
			res.Mesh = true
			return nil
		}
		if time.Now().After(deadline) {
			if sum != res.Expected {
				return fmt.Errorf("the replicas counted %v requests of %s's variation 0 (sum %d); the fleets' taken exports make %d", res.Counted, key, sum, res.Expected)
			}
			return nil
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// sample is one series of a Prometheus text exposition (/metrics): its
// name with its labels as written, and its value.
type sample struct {
	series string
	value  float64
}

// samples reads the series of a /metrics body, skipping comments and any
// line it cannot read.
func samples(b []byte) []sample {
	var out []sample
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i <= 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out = append(out, sample{series: line[:i], value: v})
	}
	return out
}

// cpuSum is the CPU time of the processes pids, ns (0 for one that is gone).
func cpuSum(pids []int) int64 {
	var n int64
	for _, pid := range pids {
		c, _ := harness.CPUNanos(pid)
		n += c
	}
	return n
}

// received sums allot_outcomes_messages_total and …_received_bytes_total
// over the replicas' /metrics.
func received(ctx context.Context, reps []replica) (msgs, bytes float64, err error) {
	for _, r := range reps {
		code, b, err := harness.AdminCall(ctx, slowClient, "http://"+r.admin, "", http.MethodGet, "/metrics", nil, nil)
		if err != nil {
			return 0, 0, err
		}
		if code != http.StatusOK {
			return 0, 0, fmt.Errorf("%s /metrics: %d", r.id, code)
		}
		for _, m := range samples(b) {
			switch m.series {
			case "allot_outcomes_messages_total":
				msgs += m.value
			case "allot_outcomes_received_bytes_total":
				bytes += m.value
			}
		}
	}
	return msgs, bytes, nil
}

var stoppedLine = regexp.MustCompile(`exports stopped: (\d+) taken, (\d+) refused`)

// stoppedExports waits for fleet f's "exports stopped" line.
func stoppedExports(f *harness.Process, timeout time.Duration) (taken, refused int64, err error) {
	deadline := time.Now().Add(timeout)
	for {
		if file, err := os.Open(f.LogPath()); err == nil {
			sc := bufio.NewScanner(file)
			for sc.Scan() {
				if m := stoppedLine.FindStringSubmatch(sc.Text()); m != nil {
					taken, _ = strconv.ParseInt(m[1], 10, 64)
					refused, _ = strconv.ParseInt(m[2], 10, 64)
					file.Close()
					return taken, refused, nil
				}
			}
			file.Close()
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("%s: no \"exports stopped\" line within %v: %s", f.Name(), timeout, f.LogTail(5))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// countedRequests is the total requests of key's variation 0 in admin's
// GET …/outcomes.
func countedRequests(ctx context.Context, admin, key string) (int64, error) {
	var out struct {
		Total []struct {
			Requests string `json:"requests"` // protojson: an int64 as a string
		} `json:"total"`
	}
	code, b, err := harness.AdminCall(ctx, slowClient, "http://"+admin, adminToken, http.MethodGet, "/v1/experiments/"+key+"/outcomes", nil, &out)
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK || len(out.Total) == 0 {
		return 0, fmt.Errorf("GET %s outcomes: %d %.300s", key, code, b)
	}
	if out.Total[0].Requests == "" {
		return 0, nil
	}
	return strconv.ParseInt(out.Total[0].Requests, 10, 64)
}
