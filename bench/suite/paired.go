package suite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/bench/load"
)

// paired is the CPU cost per request measured with every variant's Envoy
// running at once (all pinned to the Envoy CPU, idle when not loaded) and
// load sent to them in turn, a short slice each, for many rounds. A drift
// of the shared VM's speed then hits every variant alike, and each
// variant's addition is the median of its per-slice differences to A's
// slice of the same round: far steadier than whole runs on fresh Envoys,
// whose per-request CPU swings by ±15% between rounds here.
type paired struct {
	Rounds   int `json:"rounds"`
	Requests int `json:"requests_per_slice"`
	// CPU[v] are variant v's Envoy CPU µs per request, one per round.
	CPU map[string][]float64 `json:"cpu_us_per_req"`
	// Skipped names variants not measured this way, and why.
	Skipped string `json:"skipped,omitempty"`
}

// add is variant id's CPU addition over A: the median of per-round
// differences.
func (p *paired) add(id string) (float64, bool) {
	a, v := p.CPU["A"], p.CPU[id]
	if len(a) == 0 || len(v) != len(a) {
		return 0, false
	}
	d := make([]float64, len(v))
	for i := range v {
		d[i] = v[i] - a[i]
	}
	return median(d), true
}

// spread is the interquartile range of variant id's per-round additions.
func (p *paired) spread(id string) (lo, hi float64) {
	a, v := p.CPU["A"], p.CPU[id]
	d := make([]float64, len(v))
	for i := range v {
		d[i] = v[i] - a[i]
	}
	slices.Sort(d)
	return d[len(d)/4], d[(3*len(d))/4]
}

const (
	pairedRounds   = 12
	pairedRequests = 15000
	pairedWarmup   = 5000
)

// measurePaired runs the interleaved measurement over the bootstraps the
// rounds wrote (bench/raw/<variant>.json), pre-flight checked again.
func measurePaired(ctx context.Context, o Options, p *paths, vs []variant) (*paired, error) {
	res := &paired{Rounds: pairedRounds, Requests: pairedRequests, CPU: map[string][]float64{}}
	type running struct {
		v    variant
		e    *envoy
		req  load.RequestFunc
		next uint64
	}
	var rs []*running
	defer func() {
		for _, r := range rs {
			r.e.stop()
		}
	}()
	var skipped []string
	for i, v := range vs {
		if v.authz {
			skipped = append(skipped, v.ID+" (its ext_authz service would share the load generator's CPU)")
			continue
		}
		name := "paired-" + v.ID
		e, err := startEnvoy(ctx, o.Envoy, p.raw, name, filepath.Join(p.raw, v.ID+".json"), 1, o.EnvoyCPU)
		if err != nil {
			return nil, err
		}
		r := &running{v: v, e: e}
		rs = append(rs, r)
		seq := uint64(1000 + i)
		var check []string
		for j := range 4 {
			check = append(check, "user-"+strconv.Itoa(j*131))
			if v.cold {
				check = append(check, fmt.Sprintf("paired-%d-%d", seq, j))
			}
		}
		if err := preflight(e.listener, check, v.lean, v.expect); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		r.req = load.Request("/", requestHeaders, ids(v.cold, seq))
		if _, err := load.MaxThroughput(ctx, e.listener, o.Conns, o.Throughput, pairedWarmup, r.req, 0); err != nil {
			return nil, fmt.Errorf("%s warm-up: %w", name, err)
		}
		r.next = pairedWarmup
	}
	res.Skipped = strings.Join(skipped, "; ")
	for range pairedRounds {
		for _, r := range rs {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			c0, err := cpuNanos(r.e.pid())
			if err != nil {
				return nil, err
			}
			out, err := load.MaxThroughput(ctx, r.e.listener, o.Conns, 10*o.Throughput, pairedRequests, r.req, r.next)
			if err != nil {
				return nil, fmt.Errorf("paired-%s: %w", r.v.ID, err)
			}
			c1, err := cpuNanos(r.e.pid())
			if err != nil {
				return nil, err
			}
			r.next += pairedRequests
			if out.Errors > 0 || out.Requests == 0 {
				return nil, fmt.Errorf("paired-%s: %d errors in %d requests", r.v.ID, out.Errors, out.Requests)
			}
			res.CPU[r.v.ID] = append(res.CPU[r.v.ID], float64(c1-c0)/1e3/float64(out.Requests))
		}
	}
	return res, nil
}

// cpuNanos is the CPU time all of process pid's threads have run, in
// nanoseconds, from /proc/<pid>/task/*/schedstat (finer than the clock
// ticks of /proc/<pid>/stat).
func cpuNanos(pid int) (int64, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, t.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s/schedstat: %w", t.Name(), err)
		}
		total += n
	}
	return total, nil
}
