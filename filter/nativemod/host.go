//go:build cgo

package nativemod

import (
	"errors"
	"strconv"
	"unsafe"

	"github.com/allotmesh/allot/filter/dynmod"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/wire"
)

// envoyHost is plugin.Host over Envoy's dynamic-module callbacks
// (filter/dynmod), for one worker: each method is the callback that does
// it. filter and entry are the stream being served (set for the duration
// of a request hook).
type envoyHost struct {
	filter dynmod.Filter
	entry  *entry
	// requests counts the request hooks served (it tells one request's
	// calls from the next's).
	requests uint64

	batch dynmod.HeaderBatch // headers queued to add (plugin.HeaderBatcher)
	hdrs  dynmod.Headers     // Envoy's view of the headers (aliasing its memory)
	data  []byte             // their copy, which pairs alias
	pairs [][2]string
	// changed is set once the request hook has asked Envoy to add or
	// remove a request header (endRequest).
	changed bool
	// body is the request body's copy (plugin.LocalReplier), reply a local
	// reply's headers.
	body  []byte
	reply dynmod.HeaderBatch
}

var (
	_ plugin.Host          = (*envoyHost)(nil)
	_ plugin.HeaderBatcher = (*envoyHost)(nil)
	_ plugin.LocalReplier  = (*envoyHost)(nil)
)

// callError is a callback into Envoy that refused (or cannot be made:
// no stream, or the module has no such call).
type callError string

func (e callError) Error() string { return "envoy refused " + string(e) }

// Errors of the callbacks the host makes.
const (
	errGetHeaders  callError = "http_get_headers"
	errAddHeader   callError = "http_add_header"
	errSetHeader   callError = "http_set_header"
	errFilterState callError = "http_set_filter_state_bytes"
	errCounter     callError = "http_filter_config_define_counter"
	errIncrement   callError = "http_filter_config_increment_counter"
	errBody        callError = "http_get_body_chunks"
	errReply       callError = "http_send_response"
)

// errNoProperty is Property's error for a property Envoy's dynamic modules
// do not answer (node.* included: the ABI has no access to the node) or
// did not answer for the stream: the attribute is missing.
var errNoProperty = errors.New("property not available to a dynamic module")

// errUnsupported is the error of a Host call the native module never
// needs: its configuration arrives in ConfigNew, and its response path
// is C (hooks.c).
var errUnsupported = errors.New("not supported by the native module")

// Log implements plugin.Host; the levels are numbered as Envoy's.
func (h *envoyHost) Log(level wire.LogLevel, msg string) { dynmod.Log(level, msg) }

// Configuration implements plugin.Host. The native module receives its
// configuration in ConfigNew and installs it compiled (plugin.Install):
// none is ever read here.
func (h *envoyHost) Configuration(int) ([]byte, error) { return nil, errUnsupported }

// RequestHeaders implements plugin.Host: the request headers, copied out
// of Envoy's map in one pass (the plugin reads them after it changed the
// map, when Envoy's own memory for a removed header is gone).
func (h *envoyHost) RequestHeaders() ([][2]string, error) {
	if h.filter == 0 {
		return nil, errGetHeaders
	}
	h.hdrs = h.filter.RequestHeaders(h.hdrs)
	n := 0
	for i := range h.hdrs {
		k, v := dynmod.HeaderAt(h.hdrs, i)
		n += len(k) + len(v)
	}
	if cap(h.data) < n {
		h.data = make([]byte, 0, n+n/2)
	}
	h.data = h.data[:0]
	for i := range h.hdrs {
		k, v := dynmod.HeaderAt(h.hdrs, i)
		h.data = append(h.data, k...)
		h.data = append(h.data, v...)
	}
	h.pairs = h.pairs[:0]
	off := 0
	for i := range h.hdrs {
		k, v := dynmod.HeaderAt(h.hdrs, i)
		ks := stringView(h.data[off : off+len(k)])
		off += len(k)
		vs := stringView(h.data[off : off+len(v)])
		off += len(v)
		h.pairs = append(h.pairs, [2]string{ks, vs})
	}
	return h.pairs, nil
}

// QueueRequestHeader implements plugin.HeaderBatcher.
func (h *envoyHost) QueueRequestHeader(name, value string) { h.batch.Add(name, value) }

// AddQueuedRequestHeaders implements plugin.HeaderBatcher: the queued
// headers go to Envoy with one call from Go
// (dynmod.Filter.AddRequestHeaders) — about 0.35 µs less per header than
// one call each (docs/perf/native.md).
func (h *envoyHost) AddQueuedRequestHeaders() error {
	n := h.batch.Len()
	added := 0
	if h.filter != 0 && n > 0 {
		h.changed = true
		added = h.filter.AddRequestHeaders(&h.batch)
	}
	h.batch.Reset()
	if added != n {
		return errAddHeader
	}
	return nil
}

// RemoveRequestHeaders implements plugin.HeaderBatcher: one
// set_header (with no value) per name, each a direct call into Envoy's
// map. It tries every name and returns the first failure.
func (h *envoyHost) RemoveRequestHeaders(names []string) error {
	var first error
	for _, name := range names {
		if err := h.RemoveRequestHeader(name); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// AddRequestHeader implements plugin.Host.
func (h *envoyHost) AddRequestHeader(name, value string) error {
	if h.filter == 0 {
		return errAddHeader
	}
	h.changed = true
	if !h.filter.AddRequestHeader(name, value) {
		return errAddHeader
	}
	return nil
}

// RemoveRequestHeader implements plugin.Host.
func (h *envoyHost) RemoveRequestHeader(name string) error {
	if h.filter == 0 {
		return errSetHeader
	}
	h.changed = true
	if !h.filter.RemoveRequestHeader(name) {
		return errSetHeader
	}
	return nil
}

// AddResponseHeader implements plugin.Host. The module never calls it:
// the plugin leaves the sticky cookie (plugin.SetCookie), which the
// request hook hands to the stream's C response hook (module.respond).
func (h *envoyHost) AddResponseHeader(string, string) error { return errUnsupported }

// ResponseStatus implements plugin.Host. The module never calls it: the
// stream's C response hook counts outcomes (RecordsOutcomes).
func (h *envoyHost) ResponseStatus() (string, error) { return "", errUnsupported }

// Now implements plugin.Host; unused, as ResponseStatus.
func (h *envoyHost) Now() (int64, error) { return 0, errUnsupported }

// RecordMetric implements plugin.Host; unused, as ResponseStatus.
func (h *envoyHost) RecordMetric(uint32, uint64) error { return errUnsupported }

// RecordsOutcomes implements plugin.OutcomeRecorder: the request hook
// hands each request's observed variations to the stream's C state
// (module.observe), whose hooks count the outcomes without entering Go.
func (h *envoyHost) RecordsOutcomes() bool { return true }

// RequestBody implements plugin.LocalReplier: the request body so far,
// copied out of Envoy's buffers (dynmod.Filter.RequestBody), the part the
// current body hook received included. Envoy bounds it: a body over its
// buffer limit is answered 413 by Envoy before it reaches the module.
func (h *envoyHost) RequestBody() ([]byte, error) {
	if h.filter == 0 {
		return nil, errBody
	}
	b, ok := h.filter.RequestBody(h.body)
	h.body = b
	if !ok {
		return nil, errBody
	}
	return b, nil
}

// SendLocalReply implements plugin.LocalReplier: Envoy answers the
// request with status, headers and body (dynmod.Filter.SendResponse,
// Envoy's send_response, which copies them), and the hook that sent it
// stops the stream.
func (h *envoyHost) SendLocalReply(status uint32, headers [][2]string, body []byte) error {
	if h.filter == 0 {
		return errReply
	}
	h.reply.Reset()
	for _, kv := range headers {
		h.reply.Add(kv[0], kv[1])
	}
	ok := h.filter.SendResponse(status, &h.reply, body)
	h.reply.Reset()
	if !ok {
		return errReply
	}
	return nil
}

// maxKeptBody is the largest body copy a worker keeps for the next
// request (a larger one is dropped when its hook ends).
const maxKeptBody = 64 << 10

// endRequest ends a request hook. If the plugin changed the request
// headers (removed a client's assignment headers, added its own, scrubbed
// them after a failure), Envoy is asked to choose the stream's route again:
// it chose one from the headers as they arrived, before any filter ran,
// and clears it by itself only after a Wasm filter's changes. So a route
// that matches x-experiment-<key> sees the assignment, never a forged
// header. The stream is then forgotten.
func (h *envoyHost) endRequest() {
	if h.changed && h.filter != 0 {
		h.filter.ClearRouteCache()
	}
	h.changed = false
	h.filter, h.entry = 0, nil
	if cap(h.body) > maxKeptBody {
		h.body = nil
	}
}

// attributes maps the properties the plugin knows by meaning to Envoy's
// attribute ids (0: none; request.path, url_path, method, host and scheme
// never get here: the plugin reads them from the header map); int
// marks those Envoy answers as integers.
var attributes = [plugin.NumProperties]struct {
	id      dynmod.Attribute
	ok, int bool
}{
	plugin.PropRequestReferer:     {dynmod.AttrRequestReferer, true, false},
	plugin.PropRequestUserAgent:   {dynmod.AttrRequestUserAgent, true, false},
	plugin.PropRequestID:          {dynmod.AttrRequestID, true, false},
	plugin.PropRequestProtocol:    {dynmod.AttrRequestProtocol, true, false},
	plugin.PropRequestQuery:       {dynmod.AttrRequestQuery, true, false},
	plugin.PropSourceAddress:      {dynmod.AttrSourceAddress, true, false},
	plugin.PropSourcePort:         {dynmod.AttrSourcePort, true, true},
	plugin.PropDestinationAddress: {dynmod.AttrDestinationAddress, true, false},
	plugin.PropDestinationPort:    {dynmod.AttrDestinationPort, true, true},
	plugin.PropConnectionID:       {dynmod.AttrConnectionID, true, true},
}

// Property implements plugin.Host for the properties Envoy's dynamic
// modules answer, by their meaning; any other (node.* included: the ABI
// has no access to the node) is missing.
func (h *envoyHost) Property(p *plugin.Property) ([]byte, error) {
	if p.ID >= plugin.NumProperties || h.filter == 0 {
		return nil, errNoProperty
	}
	a := &attributes[p.ID]
	if !a.ok {
		return nil, errNoProperty
	}
	if a.int {
		n, ok := h.filter.AttributeInt(a.id)
		if !ok {
			return nil, errNoProperty
		}
		return strconv.AppendUint(nil, n, 10), nil
	}
	s, ok := h.filter.AttributeString(a.id)
	if !ok {
		return nil, errNoProperty
	}
	return []byte(s), nil
}

// exposureState is the filter state key of the exposure record: the name
// Envoy's Wasm host gives the Wasm module's (wire.ExposureProperty under
// its "wasm." prefix), so one access-log format
// (%FILTER_STATE(wasm.allot:PLAIN)%) serves both artifacts.
const exposureState = "wasm." + wire.ExposureProperty

// SetExposure implements plugin.Host as the filter state exposureState.
func (h *envoyHost) SetExposure(value []byte) error {
	if h.filter == 0 || !h.filter.SetFilterState(exposureState, value) {
		return errFilterState
	}
	return nil
}

// DefineMetric implements plugin.Host: the configuration's counters were
// defined in ConfigNew (Envoy allows it only there); this returns the
// index of name among them.
func (h *envoyHost) DefineMetric(kind plugin.MetricKind, name string) (uint32, error) {
	if h.entry == nil || kind != plugin.Counter {
		return 0, errCounter
	}
	i, ok := h.entry.names[name]
	if !ok {
		return 0, errCounter
	}
	return uint32(i), nil
}

// IncrementMetric implements plugin.Host on the configuration's counters,
// through the configuration (the flush runs off any stream: module.flush
// and ConfigDestroy).
func (h *envoyHost) IncrementMetric(id uint32, delta int64) error {
	if h.entry == nil || int(id) >= len(h.entry.counters) || delta < 0 {
		return errIncrement
	}
	c := h.entry.counters[id]
	if c == noCounter || h.entry.envoy == 0 || !h.entry.envoy.IncrementCounter(c, uint64(delta)) {
		return errIncrement
	}
	return nil
}

// StartTicks implements plugin.Host: the module flushes every worker's
// counters from its own tick (module.tick).
func (h *envoyHost) StartTicks(uint32) error { return nil }

// stringView is b as a string without a copy: valid while b is unchanged.
func stringView(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
