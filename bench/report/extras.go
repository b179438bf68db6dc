package report

import ()

// machine describes where the numbers were taken.
type Machine struct {
	NProc  int    `json:"nproc"`
	CPU    string `json:"cpu"`
	Kernel string `json:"kernel"`
	Envoy  string `json:"envoy"`
	Go     string `json:"go"`
}

// micro holds the engine benchmarks and the configuration costs.
type Micro struct {
	Command       string       `json:"command"`
	Assign        []BenchLine  `json:"assign"`
	Output        string       `json:"output"`
	WasmBytes     int64        `json:"wasm_bytes"`
	MinWasmBytes  int64        `json:"min_wasm_bytes"`
	NativeBytes   int64        `json:"native_bytes,omitempty"`
	ParseJSON     BenchSummary `json:"parse_json"`
	ParseStruct   BenchSummary `json:"parse_struct"`
	ConfigBytes   int          `json:"config_json_bytes"`
	ConfigPBBytes int          `json:"config_struct_bytes"`
}

type BenchLine struct {
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"ns_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	AllocsPerOp float64 `json:"allocs_per_op"`
}

type BenchSummary struct {
	NsPerOp     float64 `json:"ns_per_op"`
	AllocsPerOp int64   `json:"allocs_per_op"`
	BytesPerOp  int64   `json:"bytes_per_op"`
}

// loadTime is how long Envoy takes from exec to /ready with Allot's filter
// configured inline with 1 and with 1,000 experiments (the difference is
// mostly on_configure of the 1,000 experiments in the main-thread and worker
// VMs).
type LoadTime struct {
	Ready1    []float64 `json:"ready_ms_1"`
	Ready1000 []float64 `json:"ready_ms_1000"`
	// The same with Allot's dynamic module.
	NativeReady1    []float64 `json:"native_ready_ms_1,omitempty"`
	NativeReady1000 []float64 `json:"native_ready_ms_1000,omitempty"`
}

// memory compares Envoy's RSS at --concurrency 2 without a filter and with
// Allot holding 1,000 experiments and a full cache in every worker VM.
type Memory struct {
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
	// secondPass requests cycle through the fill's last secondPassUnits
	// ids after it, eight each: fewer units than a worker's byte bound
	// holds (with 1,000 experiments about 800 fit its 1 MiB), so each
	// worker's Go cache keeps them, and from a unit's second request on a
	// worker (Go's cache has seen it) Go hands it to that worker's C cache.
	// The fill alone does not fill the C caches: its units are all new, so
	// the workers skip their looks and Go hands C no new unit
	// (filter/dynmod/wcache.h).
	SecondPass = 8 * SecondPassUnits
)

const (
	SecondPassUnits = 700
)
