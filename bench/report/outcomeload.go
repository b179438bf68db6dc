package report

import ()

// outcomeLoad is the outcomes load's figures.
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
