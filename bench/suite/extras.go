package suite

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
	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/harness"
)

// machine describes where the numbers were taken.
type machine struct {
	NProc  int    `json:"nproc"`
	CPU    string `json:"cpu"`
	Kernel string `json:"kernel"`
	Envoy  string `json:"envoy"`
	Go     string `json:"go"`
}

func describeMachine(o Options) machine {
	m := machine{NProc: runtime.NumCPU()}
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

// micro holds the engine benchmarks and the configuration costs.
type micro struct {
	Command       string       `json:"command"`
	Assign        []benchLine  `json:"assign"`
	Output        string       `json:"output"`
	WasmBytes     int64        `json:"wasm_bytes"`
	MinWasmBytes  int64        `json:"min_wasm_bytes"`
	NativeBytes   int64        `json:"native_bytes,omitempty"`
	ParseJSON     benchSummary `json:"parse_json"`
	ParseStruct   benchSummary `json:"parse_struct"`
	ConfigBytes   int          `json:"config_json_bytes"`
	ConfigPBBytes int          `json:"config_struct_bytes"`
}

type benchLine struct {
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"ns_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	AllocsPerOp float64 `json:"allocs_per_op"`
}

type benchSummary struct {
	NsPerOp     float64 `json:"ns_per_op"`
	AllocsPerOp int64   `json:"allocs_per_op"`
	BytesPerOp  int64   `json:"bytes_per_op"`
}

var benchRe = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

func runMicro(ctx context.Context, o Options, p *paths) (*micro, error) {
	m := &micro{Command: "go test -run '^$' -bench 'Assign' -benchmem ./filter/engine"}
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
		bl := benchLine{Name: g[1]}
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
	if st, err := os.Stat(p.allotWasm); err == nil {
		m.WasmBytes = st.Size()
	}
	if st, err := os.Stat(p.minWasm); err == nil {
		m.MinWasmBytes = st.Size()
	}
	if st, err := os.Stat(p.allotSO); err == nil {
		m.NativeBytes = st.Size()
	}

	// on_configure's work for 1,000 experiments, natively: from the JSON
	// and from the Struct encoding Envoy hands the plugin.
	js := filterConfigJSON(1000)
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
		out  *benchSummary
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
		*c.out = benchSummary{NsPerOp: float64(br.NsPerOp()), AllocsPerOp: br.AllocsPerOp(), BytesPerOp: br.AllocedBytesPerOp()}
	}
	return m, nil
}

// loadTime is how long Envoy takes from exec to /ready with Allot's filter
// configured inline with 1 and with 1,000 experiments (the difference is
// mostly on_configure of the 1,000 experiments in the main-thread and worker
// VMs).
type loadTime struct {
	Ready1    []float64 `json:"ready_ms_1"`
	Ready1000 []float64 `json:"ready_ms_1000"`
	// The same with Allot's dynamic module.
	NativeReady1    []float64 `json:"native_ready_ms_1,omitempty"`
	NativeReady1000 []float64 `json:"native_ready_ms_1000,omitempty"`
}

func measureLoadTime(ctx context.Context, o Options, p *paths) (*loadTime, error) {
	lt := &loadTime{}
	type boot struct {
		name   string
		path   string
		module func(*paths) string
		out    *[]float64
	}
	var boots []boot
	for _, c := range []struct {
		name    string
		filters func(*paths) ([]any, error)
		module  func(*paths) string
		out     *[]float64
	}{
		{"allot-1", wasmAllot(mainWasm, 1, typical), nil, &lt.Ready1},
		{"allot-1000", wasmAllot(mainWasm, 1000, typical), nil, &lt.Ready1000},
		{"native-1", nativeAllot(1, typical), allotSO, &lt.NativeReady1},
		{"native-1000", nativeAllot(1000, typical), allotSO, &lt.NativeReady1000},
	} {
		path, err := writeBootstrap(p, c.name, c.filters, 0, 0)
		if err != nil {
			return nil, err
		}
		boots = append(boots, boot{c.name, path, c.module, c.out})
	}
	for range 3 {
		for _, b := range boots {
			e, err := startEnvoy(ctx, o.Envoy, p.raw, "load-"+b.name, b.path, 1, o.EnvoyCPU, moduleEnv(variant{module: b.module}, p))
			if err != nil {
				return nil, err
			}
			*b.out = append(*b.out, float64(e.ready.Microseconds())/1e3)
			e.Terminate()
		}
	}
	return lt, nil
}

// memory compares Envoy's RSS at --concurrency 2 without a filter and with
// Allot holding 1,000 experiments and a full cache in every worker VM.
type memory struct {
	Experiments int     `json:"experiments"`
	CacheSize   int     `json:"cache_size_per_vm"`
	CacheBytes  int     `json:"cache_max_bytes_per_vm"`
	Requests    uint64  `json:"fill_requests"`
	FillSeconds float64 `json:"fill_seconds"`
	BaseRSS     int64   `json:"baseline_rss"`
	// MinimalRSS (variant E's filter) and OneRSS (Allot with one
	// experiment) are idle, before traffic: what the Go module costs
	// before any configuration.
	MinimalRSS  int64   `json:"minimal_go_rss"`
	OneRSS      int64   `json:"allot_1_rss"`
	AllotRSS    int64   `json:"allot_rss"`
	AllotIdle   int64   `json:"allot_rss_before_fill"`
	Misses      int64   `json:"cache_misses"`
	Errors      uint64  `json:"errors"`
	HeadersEach float64 `json:"headers_per_request"`
	// The same for Allot's dynamic module (bin/liballot.so) with its warm
	// path on: idle and after the fill and the second pass, with the
	// minimal Go module (N) idle beside it.
	MinDynmodRSS int64   `json:"min_dynmod_rss,omitempty"`
	NativeIdle   int64   `json:"native_rss_before_fill,omitempty"`
	NativeRSS    int64   `json:"native_rss,omitempty"`
	NativeFill   float64 `json:"native_fill_seconds,omitempty"`
	NativeMisses int64   `json:"native_cache_misses,omitempty"`
	NativeErrors uint64  `json:"native_errors,omitempty"`
	// NativeHits are the warm module's cache hits, all of the second pass
	// (the fill's ids are distinct): secondPass requests over the fill's
	// last secondPassUnits ids, answered by the C cache first.
	NativeHits int64 `json:"native_cache_hits,omitempty"`
	// NativePassCPU and NativeGoPassCPU are Envoy's CPU µs per request
	// over the second pass, the warm path on and off: hits served in C
	// cost less than in Go.
	NativePassCPU   float64 `json:"native_pass_cpu_us_per_req,omitempty"`
	NativeGoPassCPU float64 `json:"native_go_pass_cpu_us_per_req,omitempty"`
	// CServed of CMarked are the requests the warm path served in C,
	// counted on the module's allotfault build (countServedInC).
	CServed int64 `json:"native_served_in_c,omitempty"`
	CMarked int64 `json:"native_marked,omitempty"`
	// NativeGoIdle and NativeGoRSS are the module with its warm path off
	// (Go's cache only), idle and after the same fill and second pass.
	NativeGoIdle int64 `json:"native_go_rss_before_fill,omitempty"`
	NativeGoRSS  int64 `json:"native_go_rss,omitempty"`
	NativeGoHits int64 `json:"native_go_cache_hits,omitempty"`
}

const (
	memoryFill = 30000 // distinct ids: > 10,000 (the cache) per worker VM
	// secondPass requests cycle through the fill's last secondPassUnits
	// ids after it, eight each: fewer units than a worker's byte bound
	// holds (with 1,000 experiments about 800 fit its 1 MiB), so each
	// worker's Go cache keeps them, and from a unit's second request on a
	// worker (Go's cache has seen it) Go hands it to that worker's C cache.
	// The fill alone does not fill the C caches: its units are all new, so
	// the workers skip their looks and Go hands C no new unit
	// (filter/dynmod/wcache.h).
	secondPass      = 8 * secondPassUnits
	secondPassUnits = 700
)

// memID appends the memory section's user id i.
func memID(dst []byte, i uint64) []byte { return strconv.AppendUint(append(dst, "mem-"...), i, 10) }

func measureMemory(ctx context.Context, o Options, p *paths) (*memory, error) {
	m := &memory{Experiments: 1000, CacheSize: config.DefaultCacheSize, CacheBytes: config.DefaultCacheMaxBytes, Requests: memoryFill}
	hp, err := profileAllot(1000, false)
	if err != nil {
		return nil, err
	}
	m.HeadersEach = hp.HeadersAdded
	for _, c := range []struct {
		name    string
		filters func(*paths) ([]any, error)
		fill    bool
		module  func(*paths) string
		goPath  bool
	}{
		{"mem-A", func(*paths) ([]any, error) { return nil, nil }, true, nil, false},
		{"mem-minimal", minWasm, false, nil, false},
		{"mem-allot-1", wasmAllot(mainWasm, 1, typical), false, nil, false},
		{"mem-allot-1000", wasmAllot(mainWasm, 1000, typical), true, nil, false},
		{"mem-mindynmod", moduleFilter(minDynmod, nil), false, minDynmod, false},
		{"mem-native-1000", nativeAllot(1000, typical), true, allotSO, false},
		{"mem-native-go-1000", nativeAllot(1000, typical), true, allotSO, true},
	} {
		path, err := writeBootstrap(p, c.name, c.filters, 0, 0)
		if err != nil {
			return nil, err
		}
		e, err := startEnvoy(ctx, o.Envoy, p.raw, c.name, path, 2, o.EnvoyCPU, moduleEnv(variant{module: c.module, goPath: c.goPath}, p))
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
		req := load.Request("/", requestHeaders, memID)
		t0 := time.Now()
		r, err := load.MaxThroughput(ctx, e.listener, 8, 3*time.Minute, memoryFill, req, 0)
		fill := time.Since(t0)
		if err != nil {
			e.Terminate()
			return nil, fmt.Errorf("%s fill: %w", c.name, err)
		}
		passCPU := 0.0
		if c.module != nil && c.module(p) == p.allotSO {
			if passCPU, err = memorySecondPass(ctx, e, requestHeaders); err != nil {
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
			m.NativeMisses = e.stat(metricsNamespace + "." + wire.MetricCacheMisses)
			m.NativeHits = e.stat(metricsNamespace + "." + wire.MetricCacheHits)
			m.NativePassCPU = passCPU
		case "mem-native-go-1000":
			m.NativeGoIdle, m.NativeGoRSS = idle, rss
			m.NativeGoHits = e.stat(metricsNamespace + "." + wire.MetricCacheHits)
			m.NativeGoPassCPU = passCPU
		default:
			m.BaseRSS = rss
		}
		e.Terminate()
	}
	return m, nil
}

// countServedInC counts the requests Allot's native module serves in C
// after the memory section's fill and second pass: on its allotfault build
// (buildFaultModule), the same 1,000 experiments, fill and second pass,
// then secondPass more requests over the same units, each marked with
// faultHeader — a request of them that enters Go fails open, one the warm
// path serves never does. It sets m.CServed and m.CMarked and returns the
// build's command.
func countServedInC(ctx context.Context, o Options, p *paths, m *memory) (string, error) {
	cmd, err := buildFaultModule(ctx, o, p)
	if err != nil {
		return "", err
	}
	path, err := writeBootstrap(p, "mem-native-fault-1000", nativeAllotOf(allotFaultSO, 1000, typical), 0, 0)
	if err != nil {
		return "", err
	}
	e, err := startEnvoy(ctx, o.Envoy, p.raw, "mem-native-fault-1000", path, 2, o.EnvoyCPU, moduleEnv(variant{module: allotFaultSO}, p))
	if err != nil {
		return "", err
	}
	defer e.Terminate()
	if _, err := load.MaxThroughput(ctx, e.listener, 8, 3*time.Minute, memoryFill, load.Request("/", requestHeaders, memID), 0); err != nil {
		return "", fmt.Errorf("fill: %w", err)
	}
	if _, err := memorySecondPass(ctx, e, requestHeaders); err != nil {
		return "", fmt.Errorf("second pass: %w", err)
	}
	if _, err := memorySecondPass(ctx, e, append(slices.Clone(requestHeaders), [2]string{faultHeader, "read"})); err != nil {
		return "", fmt.Errorf("marked pass: %w", err)
	}
	// Every request is counted evaluated or failed open, on the counters'
	// one-second flush.
	sent := int64(memoryFill + 2*secondPass)
	evaluated, failOpen := metricsNamespace+"."+wire.MetricEvaluated, metricsNamespace+"."+wire.MetricFailOpen
	deadline := time.Now().Add(5 * time.Second)
	for e.stat(evaluated)+e.stat(failOpen) != sent {
		if time.Now().After(deadline) {
			return "", fmt.Errorf("counted %d evaluated and %d failed open of %d requests", e.stat(evaluated), e.stat(failOpen), sent)
		}
		time.Sleep(100 * time.Millisecond)
	}
	m.CMarked, m.CServed = secondPass, secondPass-e.stat(failOpen)
	return cmd, nil
}

// memorySecondPass sends secondPass requests with headers, cycling through
// the fill's last secondPassUnits ids, to e and returns Envoy's CPU µs per
// request over them.
func memorySecondPass(ctx context.Context, e *envoy, headers [][2]string) (float64, error) {
	again := load.Request("/", headers, func(dst []byte, i uint64) []byte {
		return memID(dst, memoryFill-secondPassUnits+i%secondPassUnits)
	})
	c0, err := harness.CPUNanos(e.Pid())
	if err != nil {
		return 0, err
	}
	r, err := load.MaxThroughput(ctx, e.listener, 8, time.Minute, secondPass, again, 0)
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

// loadavg is /proc/loadavg, the machine's load before and after a run.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}
