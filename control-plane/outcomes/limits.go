package outcomes

import (
	"time"
)

// Bounds of what proxies send (the OpenTelemetry stat sink is a trust
// boundary): input over a bound is dropped where it enters and counted in
// allot_outcomes_dropped_total{reason} (in data points).
const (
	// MaxNameBytes bounds a metric's name: the longest outcome stat
	// (the "wasmcustom." prefix, a 63-byte key, a two-digit revision slot
	// and variation, and "response_time_ms") is 128 bytes. A longer name
	// is no Allot outcome and is dropped unread (reason "name").
	MaxNameBytes = 256
	// MaxPointsPerExport bounds the data points of one export; a larger
	// export is refused (RESOURCE_EXHAUSTED, reason "size"). The
	// bootstraps set the sink's max_data_points_per_request to
	// BootstrapPointsPerExport, so that Envoy splits a flush into exports
	// under it and under the listener's 1 MiB a message (a data point is
	// at most about 250 bytes).
	MaxPointsPerExport = 5000
	// BootstrapPointsPerExport is the envoy-configs bootstraps'
	// max_data_points_per_request (TestBootstrapsSplitFlushes).
	BootstrapPointsPerExport = 3500
	// MaxFlushPoints is one proxy's largest flush of one assignment
	// revision's stats: 100 observed experiments (the filter's bound) × 64
	// variations (the experiment's) × 7 stats. A flush carries only the
	// stats that changed since the previous one: an earlier revision's
	// while late responses still count in it.
	MaxFlushPoints = 100 * 64 * 7
	// MaxFlushExports is the exports of the largest flush, which Envoy
	// sends at once over the proxy's xDS connection: with its xDS stream
	// they must fit xds.MaxStreamsPerConnection, or the rest would go over
	// another connection and be refused (TestBootstrapsSplitFlushes,
	// e2e TestOutcomesLargestFlush).
	MaxFlushExports = (MaxFlushPoints + BootstrapPointsPerExport - 1) / BootstrapPointsPerExport
	// MaxExportsPerSecond bounds the exports one connection makes in a
	// second (the HTTP/2 connection an export arrives on, by its remote
	// address: what names the exporting proxy, Sink); one more is refused
	// (RESOURCE_EXHAUSTED, reason "rate"). One revision's largest flush is
	// MaxFlushExports, all over the proxy's xDS connection, once every
	// stats_flush_interval. The budget is the connection's, never a node
	// id's: a node id is what a proxy says, and under a policy that proves
	// the cluster alone (mtls, ".../cluster/{cluster}") a proxy of another
	// cluster may subscribe under one of our node ids (GET /v1/rollout
	// lists them); no proxy can export over another's connection.
	//
	// The count is kept for the current second only, one entry per
	// connection that exported in it, and each such connection has an
	// identified xDS stream (an export on any other is refused first,
	// reason "identity"): the xDS server's bound on streams
	// (-xds-max-streams) bounds the entries, with no table-wide bound of
	// the sink's own that a flood of connections could fill to refuse every
	// other proxy's exports.
	MaxExportsPerSecond = 16
	// MaxDelta bounds one counter delta or histogram bucket of one
	// flush; a larger, negative, fractional or non-finite value is dropped
	// (reason "value").
	MaxDelta = 1 << 32
	// MaxWindowMinutes bounds GET …/outcomes?minutes=N, and the minutes
	// of tallies kept, in memory and (several replicas) in the shared
	// records: older minute records are deleted at the next sweep.
	MaxWindowMinutes = 60
	// DefaultWindowMinutes is the window when ?minutes is omitted.
	DefaultWindowMinutes = 5
	// MaxRevisions bounds the assignment revisions of one experiment
	// whose responses allotd counts: the current one and up to
	// MaxRevisions-1 earlier ones (Outcomes.earlier), each for
	// RevisionGrace after it was replaced. A flush counting in an older
	// one is dropped (reason "other_stat"). It is below
	// wire.RevisionSlots, the revisions a proxy's stat names tell apart,
	// so that kept revisions never share names unless RevisionSlots
	// revisions came between them (then the newer keeps them, and a late
	// flush of the older counts in the newer).
	MaxRevisions = 8
	// RevisionGrace is how long a replaced revision's responses are still
	// counted: a proxy reports a request in the revision that assigned it
	// at its next stats flush (5 s in the bootstraps), or when it
	// reconnects.
	RevisionGrace = 10 * time.Minute
)

// Reasons of allot_outcomes_dropped_total.
const (
	reasonIdentity = "identity"   // an export on a connection where no one proxy's xDS streams are open (refused)
	reasonSize     = "size"       // an export over MaxPointsPerExport (refused)
	reasonRate     = "rate"       // an export over MaxExportsPerSecond on its connection (refused)
	reasonName     = "name"       // a family name over MaxNameBytes
	reasonOther    = "other_stat" // not an outcome stat of a kept revision of an observed experiment (Envoy's own stats, a revision no longer kept)
	reasonValue    = "value"      // not a monotonic delta sum or delta histogram, a value out of range, a histogram with other bounds than wire.LatencyBounds, or a series repeated within one export
	reasonCluster  = "cluster"    // an experiment that does not apply to the reporting proxy's cluster
)

// Bounds of the records replicas share through etcd (shared.go;
// docs/operators.md, "Outcomes across replicas"): PublishInterval
// bounds each replica's write rate (one publish per 2 s: at most one
// transaction per MaxCommitRecords records or MaxCommitBytes, and only
// for experiments whose figures changed — their total and the minutes
// that changed, usually one); outcomes/etcd.MaxRecordBytes (64 KiB) bounds
// a record (the largest, 64 variations × 6 counts and 20 buckets, is
// about 35 KB); a report reads an experiment's totals and its window's
// minutes only (at most MaxWindowMinutes+1), however many records they
// are, in pages of outcomes/etcd.MaxPage (64) records summed as they
// come, so that it holds one page (at most 4 MiB), this replica's own
// records and a tally per variation and minute (shares); FoldAfter and
// SweepInterval bound how long a dead replica's total stays a record of
// its own (a report or a sweep folds it into the retired record as its
// pages come, MaxCommitRecords-1 at a time: tidier), so that replica
// restarts under new ids do not grow the records; minute records are
// never folded, they expire.
