package report

import (
	"slices"

	"github.com/allotmesh/allot/bench/stats"
)

// propagation is write→all-ACK latency of a configuration change, measured
// through allotd's admin API: a write with ?wait= returns when every
// connected proxy of the clusters it changed has applied (ACKed) or rejected
// the new version, so the request's duration is write → last ACK.
type Propagation struct {
	// NotMeasured says why, when a part could not be measured.
	NotMeasured string  `json:"not_measured,omitempty"`
	Real        *Spread `json:"real_envoys,omitempty"`
	Simulated   *Spread `json:"simulated_clients,omitempty"`
}

// spread summarises write→ACK latencies over several writes.
type Spread struct {
	Proxies int       `json:"proxies"`
	Writes  int       `json:"writes"`
	AllAck  []float64 `json:"all_ack_ms"` // per write: until the last proxy ACKed
	P50     float64   `json:"p50_ms"`
	P99     float64   `json:"p99_ms"`
	Max     float64   `json:"max_ms"`
	Note    string    `json:"note,omitempty"`
}

// summarize sets P50, P99 and Max from AllAck.
func (s *Spread) Summarize() {
	sorted := slices.Sorted(slices.Values(s.AllAck))
	s.P50, s.P99, s.Max = stats.Quantile(sorted, 0.5), stats.Quantile(sorted, 0.99), stats.Quantile(sorted, 1)
}
