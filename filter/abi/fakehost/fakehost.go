// Package fakehost is a hand-written proxy-wasm host emulator for native
// tests: it implements abi.Host over in-memory header maps, buffers,
// properties and metrics, and drives an abi.Handler through the callback
// sequence Envoy uses (create root, vm start, configure, then one stream per
// request). Any host call can be made to fail or panic (Inject, Fail) and
// every call can be recorded (Trace), so a test can enumerate the calls a
// request makes and break each in turn. The plugin talks to it through the
// proxy-wasm adapter (filter/proxywasm), as it talks to Envoy in the Wasm
// module.
package fakehost

import (
	"errors"
	"strings"
	"sync"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/wire"
)

// Host is an in-memory abi.Host. The zero value is not ready; use New.
type Host struct {
	mu         sync.Mutex
	Buffers    map[abi.BufferType][]byte
	Headers    map[abi.MapType][][2]string
	Properties map[string][]byte // keyed by abi.JoinPath of the path
	Logs       []Log
	Metrics    map[string]*Metric
	metricIDs  []string
	TickMs     uint32
	// SetPairsCalls counts proxy_set_header_map_pairs calls.
	SetPairsCalls int
	// Fail, when set, is called before every host call with its name; a
	// non-nil result is returned from the call (fault injection).
	Fail func(call string) error
	// Trace, when set, records the name of every host call in Calls.
	Trace bool
	Calls []string

	// Fired counts the calls the fault armed with Inject broke.
	Fired int

	// Clock is what proxy_get_current_time_nanoseconds returns.
	Clock int64
	// BeforeResponse, when set, runs in Exchange between a stream's
	// request and its response (to move Clock, say).
	BeforeResponse func()

	// Replies are the local replies sent (proxy_send_local_response), in
	// order; replied is whether the stream in hand has sent one.
	Replies []*LocalReply
	replied bool
	// headersGone: the request headers went on (Send), so reading them
	// fails, as in Envoy's body callbacks.
	headersGone bool

	nextID uint32
}

// Fault makes host calls fail or panic; see Inject.
type Fault struct {
	// Call is the ABI name of the host function to break
	// ("proxy_add_header_map_value"); empty breaks any.
	Call string
	// Nth, when positive, breaks only the Nth call matching Call since
	// Inject (1-based); zero breaks every matching call.
	Nth int
	// Panic makes the call panic instead of returning an error.
	Panic bool
}

// ErrInjected is the status an injected failure returns.
const ErrInjected = abi.StatusInternalFailure

// Inject sets Fail to break the calls f names, in place of any Fail set
// before; its calls are counted from now. A broken call returns
// &abi.Error{Status: ErrInjected} (or panics) before touching the host's
// state. proxy_log cannot return an error: only a panic breaks it.
func (h *Host) Inject(f Fault) {
	matching := 0
	h.Fired = 0
	h.Fail = func(call string) error {
		if f.Call != "" && f.Call != call {
			return nil
		}
		matching++
		if f.Nth != 0 && f.Nth != matching {
			return nil
		}
		h.Fired++
		if f.Panic {
			panic("fakehost: injected panic in " + call)
		}
		return &abi.Error{Call: call, Status: ErrInjected}
	}
}

// Log is one proxy_log call.
type Log struct {
	Level wire.LogLevel
	Msg   string
}

// Metric is one defined metric and its value.
type Metric struct {
	Type  abi.MetricType
	Value int64
	// Samples are the values a histogram recorded, in order.
	Samples []uint64
}

var _ abi.Host = (*Host)(nil)

// New returns an empty host.
func New() *Host {
	return &Host{
		Buffers:    map[abi.BufferType][]byte{},
		Headers:    map[abi.MapType][][2]string{},
		Properties: map[string][]byte{},
		Metrics:    map[string]*Metric{},
		nextID:     1,
	}
}

func (h *Host) fail(call string) error {
	if h.Trace {
		h.Calls = append(h.Calls, call)
	}
	if h.Fail != nil {
		return h.Fail(call)
	}
	return nil
}

// Log implements abi.Host.
func (h *Host) Log(level wire.LogLevel, msg string) {
	h.fail("proxy_log") // only a panic can break it
	h.mu.Lock()
	defer h.mu.Unlock()
	h.Logs = append(h.Logs, Log{level, msg})
}

// GetBuffer implements abi.Host.
func (h *Host) GetBuffer(t abi.BufferType, start, max int) ([]byte, error) {
	if err := h.fail("proxy_get_buffer_bytes"); err != nil {
		return nil, err
	}
	b, ok := h.Buffers[t]
	if !ok {
		return nil, &abi.Error{Call: "proxy_get_buffer_bytes", Status: abi.StatusNotFound}
	}
	if start > len(b) {
		start = len(b)
	}
	end := min(start+max, len(b))
	return append([]byte(nil), b[start:end]...), nil
}

// GetHeaderMapPairs implements abi.Host; it round-trips through the wire
// format so the parser is exercised too.
func (h *Host) GetHeaderMapPairs(t abi.MapType) ([][2]string, error) {
	if err := h.fail("proxy_get_header_map_pairs"); err != nil {
		return nil, err
	}
	if h.headersGone && t == abi.RequestHeaders {
		return nil, &abi.Error{Call: "proxy_get_header_map_pairs", Status: abi.StatusBadArgument}
	}
	return abi.ParsePairs(abi.SerializePairs(h.Headers[t]))
}

// GetHeaderMapValue implements abi.Host: the first value of key (a
// missing header is "", as Envoy answers).
func (h *Host) GetHeaderMapValue(t abi.MapType, key string) (string, error) {
	if err := h.fail("proxy_get_header_map_value"); err != nil {
		return "", err
	}
	for _, kv := range h.Headers[t] {
		if strings.EqualFold(kv[0], key) {
			return kv[1], nil
		}
	}
	return "", nil
}

// AddHeaderMapValue implements abi.Host.
func (h *Host) AddHeaderMapValue(t abi.MapType, key, value string) error {
	if err := h.fail("proxy_add_header_map_value"); err != nil {
		return err
	}
	// key and value may be views of plugin memory; ToLower returns its
	// argument when it is lowercase already.
	h.Headers[t] = append(h.Headers[t], [2]string{strings.Clone(strings.ToLower(key)), strings.Clone(value)})
	return nil
}

// RemoveHeaderMapValue implements abi.Host.
func (h *Host) RemoveHeaderMapValue(t abi.MapType, key string) error {
	if err := h.fail("proxy_remove_header_map_value"); err != nil {
		return err
	}
	h.remove(t, key)
	return nil
}

func (h *Host) remove(t abi.MapType, key string) {
	kept := h.Headers[t][:0]
	for _, p := range h.Headers[t] {
		if !strings.EqualFold(p[0], key) {
			kept = append(kept, p)
		}
	}
	h.Headers[t] = kept
}

// SetHeaderMapPairs implements abi.Host: it parses the serialized pairs (so
// the encoder is exercised too) and replaces the map, lowercasing names as
// Envoy does.
func (h *Host) SetHeaderMapPairs(t abi.MapType, serialized []byte) error {
	if err := h.fail("proxy_set_header_map_pairs"); err != nil {
		return err
	}
	pairs, err := abi.ParsePairs(serialized)
	if err != nil {
		return &abi.Error{Call: "proxy_set_header_map_pairs", Status: abi.StatusBadArgument}
	}
	out := make([][2]string, len(pairs))
	for i, p := range pairs {
		// Both alias serialized, the plugin's buffer, which it reuses.
		out[i] = [2]string{strings.Clone(strings.ToLower(p[0])), strings.Clone(p[1])}
	}
	h.Headers[t] = out
	h.SetPairsCalls++
	return nil
}

// GetProperty implements abi.Host.
func (h *Host) GetProperty(path ...string) ([]byte, error) {
	if err := h.fail("proxy_get_property"); err != nil {
		return nil, err
	}
	v, ok := h.Properties[abi.JoinPath(path)]
	if !ok {
		return nil, &abi.Error{Call: "proxy_get_property", Status: abi.StatusNotFound}
	}
	return v, nil
}

// SetProperty implements abi.Host.
func (h *Host) SetProperty(path string, value []byte) error {
	if err := h.fail("proxy_set_property"); err != nil {
		return err
	}
	h.Properties[path] = append([]byte(nil), value...)
	return nil
}

// DefineMetric implements abi.Host; defining a name twice returns its id.
func (h *Host) DefineMetric(t abi.MetricType, name string) (uint32, error) {
	if err := h.fail("proxy_define_metric"); err != nil {
		return 0, err
	}
	for i, n := range h.metricIDs {
		if n == name {
			return uint32(i), nil
		}
	}
	h.metricIDs = append(h.metricIDs, name)
	h.Metrics[name] = &Metric{Type: t}
	return uint32(len(h.metricIDs) - 1), nil
}

// IncrementMetric implements abi.Host.
func (h *Host) IncrementMetric(id uint32, delta int64) error {
	if err := h.fail("proxy_increment_metric"); err != nil {
		return err
	}
	if int(id) >= len(h.metricIDs) {
		return &abi.Error{Call: "proxy_increment_metric", Status: abi.StatusNotFound}
	}
	h.Metrics[h.metricIDs[id]].Value += delta
	return nil
}

// RecordMetric implements abi.Host: a histogram keeps the sample.
func (h *Host) RecordMetric(id uint32, value uint64) error {
	if err := h.fail("proxy_record_metric"); err != nil {
		return err
	}
	if int(id) >= len(h.metricIDs) {
		return &abi.Error{Call: "proxy_record_metric", Status: abi.StatusNotFound}
	}
	m := h.Metrics[h.metricIDs[id]]
	if m.Type == abi.MetricHistogram {
		m.Samples = append(m.Samples, value)
	} else {
		m.Value = int64(value)
	}
	return nil
}

// CurrentTimeNanos implements abi.Host with Clock.
func (h *Host) CurrentTimeNanos() (int64, error) {
	if err := h.fail("proxy_get_current_time_nanoseconds"); err != nil {
		return 0, err
	}
	return h.Clock, nil
}

// SetTickPeriod implements abi.Host.
func (h *Host) SetTickPeriod(ms uint32) error {
	h.TickMs = ms
	return h.fail("proxy_set_tick_period_milliseconds")
}

// Counter returns a metric's value (0 if undefined).
func (h *Host) Counter(name string) int64 {
	if m, ok := h.Metrics[name]; ok {
		return m.Value
	}
	return 0
}

// StartPlugin creates a root context, starts the VM and configures it with
// config, as Envoy does; it returns the root id and on_configure's result.
func (h *Host) StartPlugin(hd abi.Handler, config []byte) (uint32, bool) {
	root := h.newID()
	hd.OnContextCreate(root, 0)
	if !hd.OnVMStart(root, 0) {
		return root, false
	}
	return root, h.Configure(hd, root, config)
}

// Configure delivers a new plugin configuration to an existing root.
func (h *Host) Configure(hd abi.Handler, root uint32, config []byte) bool {
	h.Buffers[abi.BufferPluginConfiguration] = config
	return hd.OnConfigure(root, len(config))
}

// ErrPaused is returned by Request when the handler did not continue.
var ErrPaused = errors.New("fakehost: request headers callback paused the stream")

// Request runs one stream under root as Envoy does for this module:
// proxy_on_context_create, proxy_on_request_headers,
// proxy_on_response_headers (of an empty response), proxy_on_delete. (The
// module exports no proxy_on_done, so Envoy never calls it.) It returns the
// request headers as the upstream would see them.
func (h *Host) Request(hd abi.Handler, root uint32, headers [][2]string) ([][2]string, error) {
	req, _, err := h.Exchange(hd, root, headers, nil)
	return req, err
}

// Exchange is Request with a response: it returns the request headers as
// the upstream would see them and the response headers as the client
// would.
func (h *Host) Exchange(hd abi.Handler, root uint32, request, response [][2]string) (req, resp [][2]string, err error) {
	id := h.newID()
	hd.OnContextCreate(id, root)
	h.replied = false
	h.Headers[abi.RequestHeaders] = append([][2]string(nil), request...)
	action := hd.OnRequestHeaders(id, len(request), true)
	req = h.Headers[abi.RequestHeaders]
	if h.BeforeResponse != nil {
		h.BeforeResponse()
	}
	h.Headers[abi.ResponseHeaders] = append([][2]string(nil), response...)
	if a := hd.OnResponseHeaders(id, len(response), true); a != abi.ActionContinue {
		action = a
	}
	resp = h.Headers[abi.ResponseHeaders]
	hd.OnDelete(id)
	if action != abi.ActionContinue {
		return req, resp, ErrPaused
	}
	return req, resp, nil
}

// Reset runs one stream under root that ends before any response:
// proxy_on_context_create, proxy_on_request_headers, proxy_on_delete (a
// reset, or a client gone, before the upstream answered).
func (h *Host) Reset(hd abi.Handler, root uint32, request [][2]string) {
	id := h.newID()
	hd.OnContextCreate(id, root)
	h.Headers[abi.RequestHeaders] = append([][2]string(nil), request...)
	hd.OnRequestHeaders(id, len(request), true)
	hd.OnDelete(id)
}

func (h *Host) newID() uint32 {
	h.nextID++
	return h.nextID
}

// Batcher is a Host that also batches as the native module's host does
// (plugin.HeaderBatcher, which the plugin finds on the host it is given):
// the headers a plugin queues are added by one call, and many names are
// removed by one call. Inside those calls each header is one
// "batch_add_header" or "batch_remove_header" for Fail and Trace, so a
// fault can break a batch after some headers were changed.
type Batcher struct {
	*Host
	queue [][2]string
	// Batches counts AddQueuedRequestHeaders calls.
	Batches int
}

// NewBatcher is New, batching.
func NewBatcher() *Batcher { return &Batcher{Host: New()} }

// QueueRequestHeader implements plugin.HeaderBatcher.
func (b *Batcher) QueueRequestHeader(name, value string) {
	b.queue = append(b.queue, [2]string{strings.Clone(name), strings.Clone(value)})
}

// AddQueuedRequestHeaders implements plugin.HeaderBatcher.
func (b *Batcher) AddQueuedRequestHeaders() error {
	q := b.queue
	b.queue = b.queue[:0]
	b.Batches++
	for _, kv := range q {
		if err := b.fail("batch_add_header"); err != nil {
			return err
		}
		b.Headers[abi.RequestHeaders] = append(b.Headers[abi.RequestHeaders], [2]string{strings.ToLower(kv[0]), kv[1]})
	}
	return nil
}

// RemoveRequestHeaders implements plugin.HeaderBatcher: it tries every
// name and returns the first failure.
func (b *Batcher) RemoveRequestHeaders(names []string) error {
	var first error
	for _, name := range names {
		if err := b.fail("batch_remove_header"); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		b.remove(abi.RequestHeaders, name)
	}
	return first
}

// Request is Host.Request, emptying the queue first as the native host
// does at the start of every request hook.
func (b *Batcher) Request(hd abi.Handler, root uint32, headers [][2]string) ([][2]string, error) {
	b.queue = b.queue[:0]
	return b.Host.Request(hd, root, headers)
}

// Exchange is Host.Exchange, emptying the queue first.
func (b *Batcher) Exchange(hd abi.Handler, root uint32, request, response [][2]string) (req, resp [][2]string, err error) {
	b.queue = b.queue[:0]
	return b.Host.Exchange(hd, root, request, response)
}
