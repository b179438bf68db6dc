package report

import (
	"time"

	"github.com/allotmesh/allot/bench/variant"
)

// results is everything the report shows; it is also written to
// bench/raw/results.json.
type Results struct {
	Started    time.Time             `json:"started"`
	Duration   time.Duration         `json:"duration"`
	Machine    Machine               `json:"machine"`
	Options    variant.Options       `json:"options"`
	Variants   []variant.VariantInfo `json:"variants"`
	Runs       []Run                 `json:"runs"`
	Paired     *Paired               `json:"paired,omitempty"`
	Profiles   []HostProfile         `json:"host_profiles"`
	Micro      *Micro                `json:"micro,omitempty"`
	Memory     *Memory               `json:"memory,omitempty"`
	LoadTime   *LoadTime             `json:"load_time,omitempty"`
	Propagate  Propagation           `json:"propagation"`
	Replicas   *ReplicasResult       `json:"replicas,omitempty"`
	Commands   []string              `json:"commands"`
	LoadBefore string                `json:"loadavg_before"`
	LoadAfter  string                `json:"loadavg_after"`
}
