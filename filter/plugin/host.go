package plugin

import "github.com/allotmesh/allot/filter/wire"

// Host is the proxy as the filter needs it: its request headers, the
// properties attributes read, the exposure record, counters, a log and a
// tick. Two adapters implement it: the proxy-wasm one (filter/proxywasm,
// over abi.Host) and the Envoy dynamic module's (filter/nativemod, over
// filter/dynmod), each mapping a method onto the call of its ABI that does
// it.
//
// A method that fails returns an error: the plugin fails the request open
// (or loses only the exposure record or the property attribute it was
// writing or reading: docs/services.md, "Failure behaviour").
type Host interface {
	// Log writes msg to the proxy's log at level.
	Log(level wire.LogLevel, msg string)
	// Configuration returns the plugin configuration, size bytes, that the
	// proxy is delivering (Plugin.Configure). A host that hands the plugin its
	// configuration compiled (Install) has none to read.
	Configuration(size int) ([]byte, error)
	// RequestHeaders returns every request header, in order. The slice and
	// its strings are valid until the next RequestHeaders call.
	RequestHeaders() ([][2]string, error)
	// AddRequestHeader appends a request header (keeping existing copies).
	AddRequestHeader(name, value string) error
	// RemoveRequestHeader removes every copy of a request header.
	RemoveRequestHeader(name string) error
	// AddResponseHeader appends a response header (the sticky cookie's
	// Set-Cookie) from the response headers (Plugin.SetResponseCookie).
	AddResponseHeader(name, value string) error
	// Property reads a request property (per request) or a node property
	// (once per configuration). An error means the attribute is missing.
	Property(p *Property) ([]byte, error)
	// SetExposure records a request's assignments (the dictionary value)
	// as filter state the access log reads (wire.ExposureProperty).
	SetExposure(value []byte) error
	// DefineMetric defines a metric and returns its id.
	DefineMetric(kind MetricKind, name string) (uint32, error)
	// IncrementMetric adds delta to a metric.
	IncrementMetric(id uint32, delta int64) error
	// StartTicks asks for a tick (Plugin.Tick) every ms milliseconds, for the counters'
	// flush.
	StartTicks(ms uint32) error
	// ResponseStatus reads the response's :status, from the response headers
	// (outcomes of observed experiments).
	ResponseStatus() (string, error)
	// Now is the proxy's clock in nanoseconds (latencies of observed
	// experiments).
	Now() (int64, error)
	// RecordMetric records value in a histogram.
	RecordMetric(id uint32, value uint64) error
}

// OutcomeRecorder is a Host that records the outcomes of observed
// experiments itself: the native module, whose response path is C. The
// plugin then defines no outcome stats and keeps nothing per stream; the
// host reads each request's outcome slots (Plugin.Observed) after the
// request hook.
type OutcomeRecorder interface {
	// RecordsOutcomes reports whether the host records outcomes.
	RecordsOutcomes() bool
}

// HeaderRewriter is a Host that replaces the whole request header map
// with one call (proxy-wasm's proxy_set_header_map_pairs): the plugin
// makes more than maxSingleWrites changes that way.
type HeaderRewriter interface {
	// SetRequestHeaders replaces the request headers with pairs; the host
	// copies them.
	SetRequestHeaders(pairs [][2]string) error
}

// HeaderBatcher is a Host that adds and removes several request headers
// with one call from the plugin: the native module's, where each call
// from Go into Envoy is a crossing of the Go runtime. The plugin queues the
// headers it adds (QueueRequestHeader) and adds them with
// AddQueuedRequestHeaders, in order, however many; it removes more than
// maxSingleWrites forged names with RemoveRequestHeaders. The proxy-wasm
// host is not one: a Wasm host call is the crossing either way.
type HeaderBatcher interface {
	// QueueRequestHeader queues a request header to add; the host copies
	// name and value.
	QueueRequestHeader(name, value string)
	// AddQueuedRequestHeaders adds the queued headers in order (keeping
	// existing copies) and empties the queue. On an error some may have
	// been added. The host empties the queue at the start of every request
	// hook too, so a request whose plugin panicked between queueing and
	// adding leaves nothing to the next.
	AddQueuedRequestHeaders() error
	// RemoveRequestHeaders removes every copy of each of names. It tries
	// every name, even after one failed, and returns the first failure.
	RemoveRequestHeaders(names []string) error
}

// MetricKind is what a metric counts.
type MetricKind uint8

// Metric kinds.
const (
	// Counter only grows.
	Counter MetricKind = iota
	// Gauge moves both ways.
	Gauge
	// Histogram records samples (Envoy's default buckets).
	Histogram
)

// Property is a property an attribute reads, resolved once per
// configuration: what it means, when it is one the filter knows by
// meaning, and its Envoy attribute path, by which a proxy-wasm host reads
// any property.
type Property struct {
	// ID is the property's meaning; PropOther for any other path.
	ID PropertyID
	// Path is the attribute path, {"source", "address"} for
	// source.address.
	Path []string
}

// PropertyID names a property by its meaning: the request and connection
// properties Envoy's dynamic-module ABI answers, which the proxy-wasm ABI
// answers by path. The request properties Envoy also exposes as
// pseudo-headers (request.path, url_path, method, host, scheme) are read
// from the header map and never asked for.
type PropertyID uint8

// Properties known by meaning.
const (
	PropOther PropertyID = iota // any other path: only a proxy-wasm host answers it
	PropRequestReferer
	PropRequestUserAgent
	PropRequestID
	PropRequestProtocol
	PropRequestQuery
	PropSourceAddress
	PropSourcePort
	PropDestinationAddress
	PropDestinationPort
	PropConnectionID
	// NumProperties is one more than the last PropertyID.
	NumProperties
)

// propertyID is the meaning of the Envoy attribute name, if the plugin
// knows it by meaning.
func propertyID(name string) PropertyID {
	switch name {
	case "request.referer":
		return PropRequestReferer
	case "request.useragent":
		return PropRequestUserAgent
	case "request.id":
		return PropRequestID
	case "request.protocol":
		return PropRequestProtocol
	case "request.query":
		return PropRequestQuery
	case "source.address":
		return PropSourceAddress
	case "source.port":
		return PropSourcePort
	case "destination.address":
		return PropDestinationAddress
	case "destination.port":
		return PropDestinationPort
	case "connection.id":
		return PropConnectionID
	}
	return PropOther
}
