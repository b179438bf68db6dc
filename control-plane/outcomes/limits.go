package outcomes

// Bounds of what proxies send (the metrics_service sink is a trust
// boundary): input over a bound is dropped where it enters and counted in
// allot_outcomes_dropped_total{reason}; the stream stays up.
const (
	// MaxNameBytes bounds a metric family's name: the longest outcome stat
	// (the "wasmcustom." prefix, a 63-byte key, a two-digit variation and
	// "response_time_ms") is 117 bytes. A longer name is no Allot outcome
	// and is dropped unread (reason "name").
	MaxNameBytes = 256
	// MaxSeriesPerProxy bounds the (experiment, variation) series one proxy
	// reports: 100 observed experiments (the filter's bound) of 64
	// variations (the experiment's), the most one configuration can hold.
	// Only series of the store's observed experiments are kept at all; a
	// further series is dropped (reason "series"). allotd keeps about 50
	// bytes per series and proxy.
	MaxSeriesPerProxy = 100 * 64
	// MaxProxies bounds the proxies allotd keeps track of (the series each
	// reported): when that many have a metrics stream open, one more
	// proxy's stream is
	// refused (RESOURCE_EXHAUSTED) and its message dropped (reason
	// "proxies"). A proxy without a stream is forgotten when a new one
	// needs its room.
	MaxProxies = 10000
	// MaxStreamsPerProxy bounds the metrics streams one node id has open at
	// once (Envoy opens one; two let a reconnect overlap the stream it
	// replaces); one more is refused (RESOURCE_EXHAUSTED, reason
	// "streams").
	MaxStreamsPerProxy = 2
	// MaxStreams bounds the metrics streams open at once, of every proxy
	// (as many as MaxProxies: one each); one more is refused
	// (RESOURCE_EXHAUSTED, reason "streams").
	MaxStreams = MaxProxies
	// MaxDelta bounds one counter delta or histogram increment of one
	// flush; a larger, negative, fractional or non-finite value is dropped
	// (reason "value").
	MaxDelta = 1 << 32
	// MaxWindowMinutes bounds GET …/outcomes?minutes=N, and the minutes
	// of tallies kept, in memory and (several replicas) in the shared
	// records: older minute records are deleted at the next sweep.
	MaxWindowMinutes = 60
	// DefaultWindowMinutes is the window when ?minutes is omitted.
	DefaultWindowMinutes = 5
)

// Reasons of allot_outcomes_dropped_total.
const (
	reasonIdentity   = "identity"    // a stream whose first message has no node id, or one too long (the stream is refused)
	reasonName       = "name"        // a family name over MaxNameBytes
	reasonOther      = "other_stat"  // not an outcome stat of an observed experiment (Envoy's own stats)
	reasonNotApplied = "not_applied" // the proxy has not applied the experiment's current revision
	reasonSeries     = "series"      // over MaxSeriesPerProxy
	reasonProxies    = "proxies"     // over MaxProxies
	reasonStreams    = "streams"     // over MaxStreamsPerProxy or MaxStreams (the stream is refused)
	reasonValue      = "value"       // a value out of range, or a histogram with other buckets than LatencyBounds
)

// LatencyBounds are the upper bounds (ms) of the latency histogram buckets
// allotd accepts: Envoy's default histogram buckets, which the bootstraps
// keep (no histogram_bucket_settings). A histogram with other bounds is
// dropped (reason "value"), so that every proxy's samples sum into the
// same buckets.
var LatencyBounds = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

// Bounds of the records replicas share through etcd (shared.go;
// control-plane/README.md, "Outcomes across replicas"): PublishInterval
// bounds each replica's write rate (one publish per 2 s: at most one
// transaction per MaxCommitRecords records or MaxCommitBytes, and only
// for experiments whose figures changed — their total and the minutes
// that changed, usually one); store/etcd.MaxOutcomeBytes (64 KiB) bounds
// a record (the largest, 64 variations × 6 counts and 20 buckets, is
// about 35 KB); store/etcd.MaxOutcomeReplicas (64) bounds an experiment's
// totals and each minute's records that a report reads (the live
// replicas, the dead ones not yet folded, the retired record), and a
// report reads its window's minutes only (at most MaxWindowMinutes+1);
// FoldAfter and SweepInterval bound how long a dead replica's total stays
// a record of its own (a live replica folds it into the retired record),
// so that replica restarts under new ids do not grow the records; minute
// records are never folded, they expire.
