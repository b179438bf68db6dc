package report

import (
	"slices"
	"time"

	"github.com/allotmesh/allot/bench/stats"
	"github.com/allotmesh/allot/bench/variant"
)

// Results is everything the report shows; it is also written to
// bench/raw/results.json.
type Results struct {
	Started    time.Time       `json:"started"`
	Duration   time.Duration   `json:"duration"`
	Machine    Machine         `json:"machine"`
	Options    variant.Options `json:"options"`
	Variants   []variant.Info  `json:"variants"`
	Runs       []Run           `json:"runs"`
	Paired     *Paired         `json:"paired,omitempty"`
	Profiles   []HostProfile   `json:"host_profiles"`
	Micro      *Micro          `json:"micro,omitempty"`
	Memory     *Memory         `json:"memory,omitempty"`
	LoadTime   *LoadTime       `json:"load_time,omitempty"`
	Propagate  Propagation     `json:"propagation"`
	Replicas   *ReplicasResult `json:"replicas,omitempty"`
	Commands   []string        `json:"commands"`
	LoadBefore string          `json:"loadavg_before"`
	LoadAfter  string          `json:"loadavg_after"`
}

// Run is one variant in one round.
type Run struct {
	Variant   string  `json:"variant"`
	Round     int     `json:"round"`
	MaxRPS    float64 `json:"max_rps"`
	MaxErrors uint64  `json:"max_errors"`
	CPUPerReq float64 `json:"cpu_us_per_req"` // Envoy, max-throughput run
	AuthzCPU  float64 `json:"authz_cpu_us_per_req,omitempty"`
	// Fixed-rate run.
	Rate         float64            `json:"rate"`
	RateAchieved float64            `json:"rate_achieved"`
	RateErrors   uint64             `json:"rate_errors"`
	RateCPU      float64            `json:"rate_cpu_us_per_req"`
	Quantiles    map[string]float64 `json:"latency_us"`
	PacerLag     float64            `json:"pacer_lag_us"`
	RSS          int64              `json:"rss_bytes"`
	CacheHits    int64              `json:"cache_hits,omitempty"`
	CacheMisses  int64              `json:"cache_misses,omitempty"`
}

// Quantiles are the latency quantiles the report shows, by name.
var Quantiles = []struct {
	Name string
	Q    float64
}{{"p50", 0.50}, {"p90", 0.90}, {"p99", 0.99}, {"p99.9", 0.999}}

// HostProfile is what Allot's plugin does per request, counted natively on
// the fake host: the calls it makes into Envoy and the headers it adds.
type HostProfile struct {
	Experiments  int
	Lean         bool
	HostCalls    map[string]float64 // per request, by proxy-wasm call
	TotalCalls   float64
	HeadersAdded float64
}

// Machine describes where the numbers were taken.
type Machine struct {
	NProc  int    `json:"nproc"`
	CPU    string `json:"cpu"`
	Kernel string `json:"kernel"`
	Envoy  string `json:"envoy"`
	Go     string `json:"go"`
}

// Micro holds the engine benchmarks and the configuration costs.
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

// BenchLine is one line of `go test -bench` output.
type BenchLine struct {
	Name        string  `json:"name"`
	NsPerOp     float64 `json:"ns_per_op"`
	BytesPerOp  float64 `json:"bytes_per_op"`
	AllocsPerOp float64 `json:"allocs_per_op"`
}

// BenchSummary is one benchmark's cost per operation.
type BenchSummary struct {
	NsPerOp     float64 `json:"ns_per_op"`
	AllocsPerOp int64   `json:"allocs_per_op"`
	BytesPerOp  int64   `json:"bytes_per_op"`
}

// LoadTime is how long Envoy takes from exec to /ready with Allot's filter
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

// Memory compares Envoy's RSS at --concurrency 2 without a filter and with
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
	// SecondPass requests cycle through the fill's last secondPassUnits
	// ids after it, eight each: fewer units than a worker's byte bound
	// holds (with 1,000 experiments about 800 fit its 1 MiB), so each
	// worker's Go cache keeps them, and from a unit's second request on a
	// worker (Go's cache has seen it) Go hands it to that worker's C cache.
	// The fill alone does not fill the C caches: its units are all new, so
	// the workers skip their looks and Go hands C no new unit
	// (filter/dynmod/wcache.h).
	SecondPass      = 8 * SecondPassUnits
	SecondPassUnits = 700
)

// Propagation is write→all-ACK latency of a configuration change, measured
// through allotd's admin API: a write with ?wait= returns when every
// connected proxy of the clusters it changed has applied (ACKed) or rejected
// the new version, so the request's duration is write → last ACK.
type Propagation struct {
	// NotMeasured says why, when a part could not be measured.
	NotMeasured string  `json:"not_measured,omitempty"`
	Real        *Spread `json:"real_envoys,omitempty"`
	Simulated   *Spread `json:"simulated_clients,omitempty"`
}

// Spread summarises write→ACK latencies over several writes.
type Spread struct {
	Proxies int       `json:"proxies"`
	Writes  int       `json:"writes"`
	AllAck  []float64 `json:"all_ack_ms"` // per write: until the last proxy ACKed
	P50     float64   `json:"p50_ms"`
	P99     float64   `json:"p99_ms"`
	Max     float64   `json:"max_ms"`
	Note    string    `json:"note,omitempty"`
}

// Summarize sets P50, P99 and Max from AllAck.
func (s *Spread) Summarize() {
	sorted := slices.Sorted(slices.Values(s.AllAck))
	s.P50, s.P99, s.Max = stats.Quantile(sorted, 0.5), stats.Quantile(sorted, 0.99), stats.Quantile(sorted, 1)
}

// OutcomeLoad is the outcomes load's figures.
type OutcomeLoad struct {
	NotMeasured string  `json:"not_measured,omitempty"`
	Clients     int     `json:"clients"`
	Experiments int     `json:"experiments"`
	IntervalS   float64 `json:"interval_s"`
	WindowS     float64 `json:"window_s"`
	// Exports and Bytes are what the replicas received per second in the
	// reporting window (allot_outcomes_messages_total, …_bytes_total).
	Exports float64 `json:"exports_per_s"`
	Bytes   float64 `json:"bytes_per_s"`
	// AllotdIdle and AllotdReporting are the replicas' CPU, in cores
	// (CPU seconds per second, summed over the replicas); EtcdIdle and
	// EtcdReporting the etcd members'.
	AllotdIdle, AllotdReporting float64
	EtcdIdle, EtcdReporting     float64
	// PerExport is the replicas' added CPU per export, µs.
	PerExport float64 `json:"per_export_us"`
	// RSSIdle and RSSReporting are each replica's RSS, MiB.
	RSSIdle, RSSReporting []float64
	// Taken and Refused are the exports the fleets saw allotd take and
	// refuse; Expected is the requests per variation they reported in
	// all (Taken × outcomeRequests), Counted what each replica's API
	// reported for the first experiment's variation 0 afterwards.
	Taken, Refused int64
	Expected       int64
	Counted        []int64
	// Mesh says whether every replica answered with the whole mesh's
	// total (else the replicas' answers summed to it).
	Mesh bool
}

// ReplicaCount is the replicas section's allotd replicas and etcd
// members (scenario's replicas section runs that many of each).
const ReplicaCount = 3

// ReplicaFleets are the fleet sizes the replicas section measures, each
// with its target on the write → all-ACK p99.
var ReplicaFleets = []ReplicaFleet{
	{Clients: 1000, Writes: 200, TargetP99: 250 * time.Millisecond, TargetRatio: 1.25},
	{Clients: 10000, Writes: 20, TargetP99: 500 * time.Millisecond, TargetRatio: 1.25},
	{Clients: 30000, Writes: 20, TargetP99: 2 * time.Second, TargetRatio: 1.25},
}

// ReplicaExperiments bounds the experiments a fleet's writes keep: once a
// fleet holds that many, each round first deletes the oldest (a waited
// delete, outside every timed window), so that from then on every write
// and push carries a resource of ReplicaExperiments experiments however
// many rounds there are. A push's cost grows with the resource.
const ReplicaExperiments = 40

// ReplicaFleet is one measurement of the replicas section.
type ReplicaFleet struct {
	// Clients is the number of simulated proxies over all replicas.
	Clients int
	// Writes is the number of waited writes timed.
	Writes int
	// TargetP99 bounds the write → all-ACK p99.
	TargetP99 time.Duration
	// TargetRatio bounds the p99 as a multiple of the floor's (0: none).
	TargetRatio float64
}

// ReplicasResult is the replicas section's figures.
type ReplicasResult struct {
	// NotMeasured says why, when a fleet could not be measured.
	NotMeasured string `json:"not_measured,omitempty"`
	Replicas    int    `json:"replicas"`
	EtcdMembers int    `json:"etcd_members"`
	// ServerCPU and ClientCPU are the CPUs etcd and allotd, and the
	// simulated clients, are pinned to.
	ServerCPU int `json:"server_cpu"`
	ClientCPU int `json:"client_cpu"`
	// Experiments is the most experiments a fleet's writes keep
	// (ReplicaExperiments); 0 in results from before it was bounded.
	Experiments int             `json:"experiments,omitempty"`
	Fleets      []ReplicaSpread `json:"fleets"`
	// Outcomes is the outcomes load (scenario.MeasureReplicas).
	Outcomes *OutcomeLoad `json:"outcomes,omitempty"`
}

// ReplicaSpread is one fleet's waited writes.
type ReplicaSpread struct {
	Spread
	// TargetP99 is the target's bound on P99, ms.
	TargetP99 float64 `json:"target_p99_ms"`
	// PerReplica is how many proxies each replica held (r1, r2, ...).
	PerReplica []int `json:"proxies_per_replica"`
	// Applied is the fewest proxies a write's rollout counted as applied
	// (every write must count them all).
	Applied int `json:"applied_min"`
	// Connect is how long the fleet took from the first client started
	// to every proxy listed, by every replica, as applied.
	Connect float64 `json:"connect_ms"`
	// TargetRatio bounds P99 / Floor.P99 (0: none).
	TargetRatio float64 `json:"target_ratio,omitempty"`
	// Floor is the bare go-control-plane server's pushes of the same
	// resources to a fleet of the same size, push i right after write i
	// (scenario.floorPush).
	Floor *Spread `json:"floor,omitempty"`
	// Replicated is the replicated floor's pushes of the same resources
	// (as many go-control-plane servers as replicas, each with its share
	// of a fleet of the same size, on the same etcd cluster: a commit,
	// the pushes, each server's commit that its share applied it;
	// xdsfloor.Follow), push i right after the floor's push i.
	Replicated *Spread `json:"replicated,omitempty"`
	// RSS is the processes' memory once the writes are done.
	RSS ReplicaRSS `json:"rss"`
	// Ops and ReplicatedOps are what the etcd members did during each of
	// Allot's writes and each of the replicated floor's pushes.
	Ops           []EtcdOps `json:"etcd_ops"`
	ReplicatedOps []EtcdOps `json:"replicated_etcd_ops"`
	// CPU is the CPU time each kind of process used during each write
	// (Allot's) or push (the floor's).
	CPU ReplicaCPU `json:"cpu"`
	// Status is, after each write, how long GET /v1/rollout through the
	// next replica (the check that it lists every proxy applied) took
	// until its whole response was read, ms.
	Status []float64 `json:"status_ms,omitempty"`
}

// ReplicaCPU is CPU time per write or push, ms, one entry per write: the
// allotd replicas, the etcd members and the simulated proxies (summed per
// kind) during each waited write; the floor and its simulated proxies
// during each push; the replicated floor's servers, the etcd members and
// its simulated proxies during each of its pushes; the allotd replicas
// during each status check after a write (ReplicaSpread.Status).
type ReplicaCPU struct {
	Allotd         []float64 `json:"allotd_ms"`
	Etcd           []float64 `json:"etcd_ms"`
	Load           []float64 `json:"load_ms"`
	Floor          []float64 `json:"floor_ms"`
	FloorLoad      []float64 `json:"floor_load_ms"`
	Replicated     []float64 `json:"replicated_ms"`
	ReplicatedEtcd []float64 `json:"replicated_etcd_ms"`
	ReplicatedLoad []float64 `json:"replicated_load_ms"`
	Status         []float64 `json:"status_allotd_ms,omitempty"`
}

// EtcdOps is what an etcd cluster did over a window: raft proposals
// committed, and the Range, Txn and Put requests its members served and
// the events their watches sent.
type EtcdOps struct {
	Proposals   float64 `json:"proposals"`
	Ranges      float64 `json:"ranges"`
	Txns        float64 `json:"txns"`
	Puts        float64 `json:"puts"`
	WatchEvents float64 `json:"watch_events"`
}

// ReplicaRSS is the memory of a fleet's servers after its writes, in
// bytes: the sum over the allotd replicas, the sum over the etcd members,
// the floor, and the sum over the replicated floor's servers; peak (VmHWM)
// and current (VmRSS).
type ReplicaRSS struct {
	AllotdPeak     int64 `json:"allotd_peak"`
	Allotd         int64 `json:"allotd"`
	EtcdPeak       int64 `json:"etcd_peak"`
	Etcd           int64 `json:"etcd"`
	FloorPeak      int64 `json:"floor_peak"`
	Floor          int64 `json:"floor"`
	ReplicatedPeak int64 `json:"replicated_peak"`
	Replicated     int64 `json:"replicated"`
}

// MedianOps is the median of each count over ops (zero without any).
func MedianOps(ops []EtcdOps) EtcdOps {
	med := func(f func(EtcdOps) float64) float64 {
		if len(ops) == 0 {
			return 0
		}
		v := make([]float64, len(ops))
		for i, o := range ops {
			v[i] = f(o)
		}
		return stats.Median(v)
	}
	return EtcdOps{
		Proposals:   med(func(o EtcdOps) float64 { return o.Proposals }),
		Ranges:      med(func(o EtcdOps) float64 { return o.Ranges }),
		Txns:        med(func(o EtcdOps) float64 { return o.Txns }),
		Puts:        med(func(o EtcdOps) float64 { return o.Puts }),
		WatchEvents: med(func(o EtcdOps) float64 { return o.WatchEvents }),
	}
}
