package wire

import "strconv"

// Namespace is the namespace Envoy shows a Wasm plugin's metrics under,
// and the one allotd gives the native module (its metrics_namespace), so
// that both artifacts emit the same stat names
// (wasmcustom.allot.requests_evaluated) and dashboards, alerts and tests
// do not depend on the artifact.
const Namespace = "wasmcustom"

// NativeNamespace is the native module's metrics namespace: Namespace.
const NativeNamespace = Namespace

// StatName is the name Envoy lists metric (one of the names below) under,
// and the OpenTelemetry stat sink sends it as: Namespace + "." + metric.
func StatName(metric string) string { return Namespace + "." + metric }

// Metric names of the counters every configuration defines.
const (
	MetricEvaluated   = "allot.requests_evaluated"
	MetricCacheHits   = "allot.cache_hits"
	MetricCacheMisses = "allot.cache_misses"
	MetricFailOpen    = "allot.fail_open"
)

// Metric names of sticky bucketing, defined only by configurations with a
// sticky cookie.
const (
	// MetricStickyInvalid counts evaluations that ignored a sticky cookie
	// which was malformed, signed by no configured key, or altered.
	MetricStickyInvalid = "allot.sticky_cookie_invalid"
	// MetricStickyOversized counts evaluations that ignored a sticky
	// cookie longer than cookie.MaxValue.
	MetricStickyOversized = "allot.sticky_cookie_oversized"
	// MetricStickyStale counts evaluations that ignored a sticky cookie
	// of the previous format (cookie.Stale: attribute values in clear).
	MetricStickyStale = "allot.sticky_cookie_stale_format"
	// MetricStickyWritten counts responses given a new sticky cookie (the
	// unit's sticky assignments changed).
	MetricStickyWritten = "allot.sticky_cookie_written"
	// MetricStickyDropped counts sticky cookies not written because they
	// would be longer than cookie.MaxValue even after pruning.
	MetricStickyDropped = "allot.sticky_cookie_dropped"
)

// MetricOutcomesUnrecorded counts observed requests whose outcome is not
// counted because the host could not keep what their response needs (the
// native module: no memory for the stream's observe state). Defined only
// by configurations with an observed experiment.
const MetricOutcomesUnrecorded = "allot.outcomes_unrecorded"

// Metric names of the OFREP endpoint, defined only by configurations that
// enable it (ofrep.enabled).
const (
	// MetricOfrepEvaluations counts OFREP evaluations answered 200 or 304.
	MetricOfrepEvaluations = "allot.ofrep_evaluations"
	// MetricOfrepErrors counts OFREP requests answered with an error: the
	// spec's 400, 404 and 413, and 404 or 405 for a path or method the
	// protocol does not have. An internal failure counts in
	// MetricFailOpen instead.
	MetricOfrepErrors = "allot.ofrep_errors"
)

// Metric names of the Wasm VM's own figures (the Go runtime's, read on
// every tick). Every worker VM adds its share, so each stat is the sum
// over the proxy's VMs.
const (
	MetricVMMemory      = "allot.vm.memory_bytes"
	MetricVMHeap        = "allot.vm.heap_bytes"
	MetricVMAllocations = "allot.vm.allocations"
	MetricVMCollections = "allot.vm.collections"
)

// VariationMetric names the counter of units assigned to variation v of
// experiment key.
func VariationMetric(key string, v int) string {
	return "allot.experiment." + key + ".variation." + strconv.Itoa(v)
}
