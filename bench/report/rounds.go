package report

import ()

// run is one variant in one round.
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

// quantiles are the latency quantiles the report shows, by name.
var Quantiles = []struct {
	Name string
	Q    float64
}{{"p50", 0.50}, {"p90", 0.90}, {"p99", 0.99}, {"p99.9", 0.999}}
