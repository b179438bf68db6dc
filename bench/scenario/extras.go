package scenario

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/bench/load"
	"github.com/allotmesh/allot/bench/report"
	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/harness"
)

// DescribeMachine describes where the run measures: CPUs, kernel, Envoy
// and Go versions.
func DescribeMachine(o variant.Options) report.Machine {
	m := report.Machine{NProc: runtime.NumCPU()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if out, err := exec.Command("nproc", "--all").Output(); err == nil { // the machine, not this pinned process
		m.NProc, _ = strconv.Atoi(strings.TrimSpace(string(out)))
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if out, err := exec.Command(o.Envoy, "--version").Output(); err == nil {
		m.Envoy = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(out)), o.Envoy+"  version:"))
	}
	if out, err := exec.Command(o.Go, "version").Output(); err == nil {
		m.Go = strings.TrimSpace(string(out))
	}
	return m
}

var benchRe = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// RunMicro runs the engine micro-benchmarks and ParseConfig's, and
// measures the artifacts' and configurations' sizes.
func RunMicro(ctx context.Context, o variant.Options, p *variant.Paths) (*report.Micro, error) {
	m := &report.Micro{Command: "go test -run '^$' -bench 'Assign' -benchmem ./filter/engine"}
	cmd := exec.CommandContext(ctx, o.Go, "test", "-run", "^$", "-bench", "Assign", "-benchmem", "./filter/engine")
	cmd.Dir = o.Root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", m.Command, err, out)
	}
	m.Output = string(out)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		g := benchRe.FindStringSubmatch(sc.Text())
		if g == nil {
			continue
		}
		bl := report.BenchLine{Name: g[1]}
		f := strings.Fields(g[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, _ := strconv.ParseFloat(f[i], 64)
			switch f[i+1] {
			case "ns/op":
				bl.NsPerOp = v
			case "B/op":
				bl.BytesPerOp = v
			case "allocs/op":
				bl.AllocsPerOp = v
			}
		}
		m.Assign = append(m.Assign, bl)
	}
	if st, err := os.Stat(p.AllotWasm); err == nil {
		m.WasmBytes = st.Size()
	}
	if st, err := os.Stat(p.MinWasm); err == nil {
		m.MinWasmBytes = st.Size()
	}
	if st, err := os.Stat(p.AllotSO); err == nil {
		m.NativeBytes = st.Size()
	}

	// on_configure's work for 1,000 experiments, natively: from the JSON
	// and from the Struct encoding Envoy hands the plugin.
	js := variant.FilterConfigJSON(1000)
	st := &structpb.Struct{}
	if err := protojson.Unmarshal(js, st); err != nil {
		return nil, err
	}
	pb, err := proto.Marshal(st)
	if err != nil {
		return nil, err
	}
	m.ConfigBytes, m.ConfigPBBytes = len(js), len(pb)
	for _, c := range []struct {
		data []byte
		out  *report.BenchSummary
	}{{js, &m.ParseJSON}, {pb, &m.ParseStruct}} {
		if _, err := plugin.ParseConfig(c.data); err != nil {
			return nil, fmt.Errorf("ParseConfig(1,000 experiments): %w", err)
		}
		br := testing.Benchmark(func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				plugin.ParseConfig(c.data)
			}
		})
		*c.out = report.BenchSummary{NsPerOp: float64(br.NsPerOp()), AllocsPerOp: br.AllocsPerOp(), BytesPerOp: br.AllocedBytesPerOp()}
	}
	return m, nil
}

// MeasureLoadTime measures how long Envoy takes to be ready with Allot's
// filter configured with 1 and with 1,000 experiments.
func MeasureLoadTime(ctx context.Context, o variant.Options, p *variant.Paths) (*report.LoadTime, error) {
	lt := &report.LoadTime{}
	type boot struct {
		name   string
		path   string
		module func(*variant.Paths) string
		out    *[]float64
	}
	var boots []boot
	for _, c := range []struct {
		name    string
		filters func(*variant.Paths) ([]any, error)
		module  func(*variant.Paths) string
		out     *[]float64
	}{
		{"allot-1", variant.WasmAllot(variant.MainWasm, 1, variant.Typical), nil, &lt.Ready1},
		{"allot-1000", variant.WasmAllot(variant.MainWasm, 1000, variant.Typical), nil, &lt.Ready1000},
		{"native-1", variant.NativeAllot(1, variant.Typical), variant.AllotSO, &lt.NativeReady1},
		{"native-1000", variant.NativeAllot(1000, variant.Typical), variant.AllotSO, &lt.NativeReady1000},
	} {
		path, err := variant.WriteBootstrap(p, c.name, c.filters, 0, 0)
		if err != nil {
			return nil, err
		}
		boots = append(boots, boot{c.name, path, c.module, c.out})
	}
	for range 3 {
		for _, b := range boots {
			e, err := startEnvoy(ctx, o.Envoy, p.Raw, "load-"+b.name, b.path, 1, o.EnvoyCPU, variant.ModuleEnv(variant.Variant{Module: b.module}, p))
			if err != nil {
				return nil, err
			}
			*b.out = append(*b.out, float64(e.ready.Microseconds())/1e3)
			e.Terminate()
		}
	}
	return lt, nil
}

const (
	memoryFill = 30000 // distinct ids: > 10,000 (the cache) per worker VM
)

// memID appends the memory section's user id i.
func memID(dst []byte, i uint64) []byte { return strconv.AppendUint(append(dst, "mem-"...), i, 10) }

// MeasureMemory measures Envoy's RSS at --concurrency 2 with 1,000
// experiments, before and after every cache is full.
func MeasureMemory(ctx context.Context, o variant.Options, p *variant.Paths) (*report.Memory, error) {
	m := &report.Memory{Experiments: 1000, CacheSize: config.DefaultCacheSize, CacheBytes: config.DefaultCacheMaxBytes, Requests: memoryFill}
	hp, err := profileAllot(1000, false)
	if err != nil {
		return nil, err
	}
	m.HeadersEach = hp.HeadersAdded
	for _, c := range []struct {
		name    string
		filters func(*variant.Paths) ([]any, error)
		fill    bool
		module  func(*variant.Paths) string
		goPath  bool
	}{
		{"mem-A", func(*variant.Paths) ([]any, error) { return nil, nil }, true, nil, false},
		{"mem-minimal", variant.MinWasm, false, nil, false},
		{"mem-allot-1", variant.WasmAllot(variant.MainWasm, 1, variant.Typical), false, nil, false},
		{"mem-allot-1000", variant.WasmAllot(variant.MainWasm, 1000, variant.Typical), true, nil, false},
		{"mem-mindynmod", variant.ModuleFilter(variant.MinDynmod, nil), false, variant.MinDynmod, false},
		{"mem-native-1000", variant.NativeAllot(1000, variant.Typical), true, variant.AllotSO, false},
		{"mem-native-go-1000", variant.NativeAllot(1000, variant.Typical), true, variant.AllotSO, true},
	} {
		path, err := variant.WriteBootstrap(p, c.name, c.filters, 0, 0)
		if err != nil {
			return nil, err
		}
		e, err := startEnvoy(ctx, o.Envoy, p.Raw, c.name, path, 2, o.EnvoyCPU, variant.ModuleEnv(variant.Variant{Module: c.module, GoPath: c.goPath}, p))
		if err != nil {
			return nil, err
		}
		// Two of the allocator's 1 s release intervals (bootstrap's
		// memory_allocator_manager) before every sample: V8 frees the
		// module's compilation memory after /ready.
		time.Sleep(2100 * time.Millisecond)
		idle, _ := harness.ReadRSS(e.Pid())
		switch c.name {
		case "mem-minimal":
			m.MinimalRSS = idle
		case "mem-allot-1":
			m.OneRSS = idle
		case "mem-mindynmod":
			m.MinDynmodRSS = idle
		}
		if !c.fill {
			e.Terminate()
			continue
		}
		req := load.Request("/", variant.RequestHeaders, memID)
		t0 := time.Now()
		r, err := load.MaxThroughput(ctx, e.listener, 8, 3*time.Minute, memoryFill, req, 0)
		fill := time.Since(t0)
		if err != nil {
			e.Terminate()
			return nil, fmt.Errorf("%s fill: %w", c.name, err)
		}
		passCPU := 0.0
		if c.module != nil && c.module(p) == p.AllotSO {
			if passCPU, err = memorySecondPass(ctx, e, variant.RequestHeaders); err != nil {
				e.Terminate()
				return nil, fmt.Errorf("%s second pass: %w", c.name, err)
			}
		}
		time.Sleep(2100 * time.Millisecond) // also two of the counters' flushes
		rss, _ := harness.ReadRSS(e.Pid())
		switch c.name {
		case "mem-allot-1000":
			m.AllotIdle, m.AllotRSS, m.FillSeconds, m.Errors = idle, rss, fill.Seconds(), r.Errors
			m.Misses = e.stat("wasmcustom.allot.cache_misses")
		case "mem-native-1000":
			m.NativeIdle, m.NativeRSS, m.NativeFill, m.NativeErrors = idle, rss, fill.Seconds(), r.Errors
			m.NativeMisses = e.stat(variant.MetricsNamespace + "." + wire.MetricCacheMisses)
			m.NativeHits = e.stat(variant.MetricsNamespace + "." + wire.MetricCacheHits)
			m.NativePassCPU = passCPU
		case "mem-native-go-1000":
			m.NativeGoIdle, m.NativeGoRSS = idle, rss
			m.NativeGoHits = e.stat(variant.MetricsNamespace + "." + wire.MetricCacheHits)
			m.NativeGoPassCPU = passCPU
		default:
			m.BaseRSS = rss
		}
		e.Terminate()
	}
	return m, nil
}

// CountServedInC counts the requests Allot's native module serves in C
// after the memory section's fill and second pass: on its allotfault build
// (buildFaultModule), the same 1,000 experiments, fill and second pass,
// then secondPass more requests over the same units, each marked with
// faultHeader — a request of them that enters Go fails open, one the warm
// path serves never does. It sets m.CServed and m.CMarked and returns the
// build's command.
func CountServedInC(ctx context.Context, o variant.Options, p *variant.Paths, m *report.Memory) (string, error) {
	cmd, err := buildFaultModule(ctx, o, p)
	if err != nil {
		return "", err
	}
	path, err := variant.WriteBootstrap(p, "mem-native-fault-1000", variant.NativeAllotOf(variant.AllotFaultSO, 1000, variant.Typical), 0, 0)
	if err != nil {
		return "", err
	}
	e, err := startEnvoy(ctx, o.Envoy, p.Raw, "mem-native-fault-1000", path, 2, o.EnvoyCPU, variant.ModuleEnv(variant.Variant{Module: variant.AllotFaultSO}, p))
	if err != nil {
		return "", err
	}
	defer e.Terminate()
	if _, err := load.MaxThroughput(ctx, e.listener, 8, 3*time.Minute, memoryFill, load.Request("/", variant.RequestHeaders, memID), 0); err != nil {
		return "", fmt.Errorf("fill: %w", err)
	}
	if _, err := memorySecondPass(ctx, e, variant.RequestHeaders); err != nil {
		return "", fmt.Errorf("second pass: %w", err)
	}
	if _, err := memorySecondPass(ctx, e, append(slices.Clone(variant.RequestHeaders), [2]string{variant.FaultHeader, "read"})); err != nil {
		return "", fmt.Errorf("marked pass: %w", err)
	}
	// Every request is counted evaluated or failed open, on the counters'
	// one-second flush.
	sent := int64(memoryFill + 2*report.SecondPass)
	evaluated, failOpen := variant.MetricsNamespace+"."+wire.MetricEvaluated, variant.MetricsNamespace+"."+wire.MetricFailOpen
	deadline := time.Now().Add(5 * time.Second)
	for e.stat(evaluated)+e.stat(failOpen) != sent {
		if time.Now().After(deadline) {
			return "", fmt.Errorf("counted %d evaluated and %d failed open of %d requests", e.stat(evaluated), e.stat(failOpen), sent)
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.CMarked, m.CServed = report.SecondPass, report.SecondPass-e.stat(failOpen)
	return cmd, nil
}

// memorySecondPass sends secondPass requests with headers, cycling through
// the fill's last secondPassUnits ids, to e and returns Envoy's CPU µs per
// request over them.
func memorySecondPass(ctx context.Context, e *envoy, headers [][2]string) (float64, error) {
	again := load.Request("/", headers, func(dst []byte, i uint64) []byte {
		return memID(dst, memoryFill-report.SecondPassUnits+i%report.SecondPassUnits)
	})
	c0, err := harness.CPUNanos(e.Pid())
	if err != nil {
		return 0, err
	}
	r, err := load.MaxThroughput(ctx, e.listener, 8, time.Minute, report.SecondPass, again, 0)
	if err != nil {
		return 0, err
	}
	c1, err := harness.CPUNanos(e.Pid())
	if err != nil {
		return 0, err
	}
	if r.Errors > 0 || r.Requests == 0 {
		return 0, fmt.Errorf("%d errors in %d requests", r.Errors, r.Requests)
	}
	return float64(c1-c0) / 1e3 / float64(r.Requests), nil
}

// Loadavg is /proc/loadavg, the machine's load before and after a run.
func Loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}
