package report

import (
	"time"
)

const (
	ReplicaCount = 3
)

// ReplicaFleets are the fleet sizes the replicas section measures, each
// with its target on the write → all-ACK p99.
var ReplicaFleets = []ReplicaFleet{
	{Clients: 1000, Writes: 40, TargetP99: 250 * time.Millisecond},
	{Clients: 10000, Writes: 20, TargetP99: time.Second},
}

// ReplicaFleet is one measurement of the replicas section.
type ReplicaFleet struct {
	// Clients is the number of simulated proxies over all replicas.
	Clients int
	// Writes is the number of waited writes timed.
	Writes int
	// TargetP99 bounds the write → all-ACK p99.
	TargetP99 time.Duration
}

// replicasResult is the replicas section's figures.
type ReplicasResult struct {
	// NotMeasured says why, when a fleet could not be measured.
	NotMeasured string `json:"not_measured,omitempty"`
	Replicas    int    `json:"replicas"`
	EtcdMembers int    `json:"etcd_members"`
	// ServerCPU and ClientCPU are the CPUs etcd and allotd, and the
	// simulated clients, are pinned to.
	ServerCPU int             `json:"server_cpu"`
	ClientCPU int             `json:"client_cpu"`
	Fleets    []ReplicaSpread `json:"fleets"`
	// Outcomes is the outcomes load (outcomeload.go).
	Outcomes *OutcomeLoad `json:"outcomes,omitempty"`
}

// replicaSpread is one fleet's waited writes.
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
}
