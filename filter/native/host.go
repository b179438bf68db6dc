//go:build cgo

package main

import (
	"strconv"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/dynmod"
)

// envoyHost is abi.Host over Envoy's dynamic-module callbacks, for one
// worker: the plugin above it is the one the Wasm module runs, so each
// proxy-wasm host call it makes maps here onto the native callback that
// does the same. filter and entry are the stream being served (set for the
// duration of a request hook).
type envoyHost struct {
	filter dynmod.Filter
	entry  *entry
	// requests counts the request hooks served (it tells one request's
	// calls from the next's).
	requests uint64

	batch dynmod.HeaderBatch // headers queued to add (abi.HeaderBatcher)
	// statePath and stateKey are the last property set and its filter
	// state key.
	statePath, stateKey string
	hdrs                dynmod.Headers // Envoy's view of the headers (aliasing its memory)
	data                []byte         // their copy, which pairs alias
	pairs               [][2]string
	// changed is set once the request hook has asked Envoy to add or
	// remove a request header (endRequest).
	changed bool
}

var _ abi.Host = (*envoyHost)(nil)

func hostErr(call string) error { return &abi.Error{Call: call, Status: abi.StatusInternalFailure} }

// Log implements abi.Host; proxy-wasm's levels are numbered as Envoy's.
func (h *envoyHost) Log(level abi.LogLevel, msg string) { dynmod.Log(dynmod.LogLevel(level), msg) }

// GetBuffer implements abi.Host. The native module receives its
// configuration in ConfigNew; no buffer is ever read.
func (h *envoyHost) GetBuffer(abi.BufferType, int, int) ([]byte, error) {
	return nil, &abi.Error{Call: "proxy_get_buffer_bytes", Status: abi.StatusUnimplemented}
}

// GetHeaderMapPairs implements abi.Host: the request headers, copied out
// of Envoy's map in one pass (the plugin reads them after it changed the
// map, when Envoy's own memory for a removed header is gone).
func (h *envoyHost) GetHeaderMapPairs(t abi.MapType) ([][2]string, error) {
	if t != abi.RequestHeaders || h.filter == 0 {
		return nil, hostErr("http_get_headers")
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
		ks := abi.StringView(h.data[off : off+len(k)])
		off += len(k)
		vs := abi.StringView(h.data[off : off+len(v)])
		off += len(v)
		h.pairs = append(h.pairs, [2]string{ks, vs})
	}
	return h.pairs, nil
}

// QueueRequestHeader implements abi.HeaderBatcher.
func (h *envoyHost) QueueRequestHeader(name, value string) { h.batch.Add(name, value) }

// AddQueuedRequestHeaders implements abi.HeaderBatcher: the queued headers
// go to Envoy with one call from Go (dynmod.Filter.AddRequestHeaders) —
// about 0.35 µs less per header than one call each (docs/perf/native.md).
func (h *envoyHost) AddQueuedRequestHeaders() error {
	n := h.batch.Len()
	added := 0
	if h.filter != 0 && n > 0 {
		h.changed = true
		added = h.filter.AddRequestHeaders(&h.batch)
	}
	h.batch.Reset()
	if added != n {
		return hostErr("http_add_header")
	}
	return nil
}

// AddHeaderMapValue implements abi.Host.
func (h *envoyHost) AddHeaderMapValue(t abi.MapType, key, value string) error {
	if t != abi.RequestHeaders || h.filter == 0 {
		return hostErr("http_add_header")
	}
	h.changed = true
	if !h.filter.AddRequestHeader(key, value) {
		return hostErr("http_add_header")
	}
	return nil
}

// RemoveHeaderMapValue implements abi.Host.
func (h *envoyHost) RemoveHeaderMapValue(t abi.MapType, key string) error {
	if t != abi.RequestHeaders || h.filter == 0 {
		return hostErr("http_set_header")
	}
	h.changed = true
	if !h.filter.RemoveRequestHeader(key) {
		return hostErr("http_set_header")
	}
	return nil
}

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
}

// SetHeaderMapPairs implements abi.Host. Envoy's dynamic modules have no
// call that replaces a whole map, so the new map is reached from the
// current one with the fewest changes: a name whose values differ is
// removed and its new values added; a name only the new map has is added.
// Each change is a direct call into Envoy's map, which costs tens of
// nanoseconds here (unlike a Wasm host call).
func (h *envoyHost) SetHeaderMapPairs(t abi.MapType, serialized []byte) error {
	want, err := abi.ParsePairs(serialized)
	if err != nil {
		return err
	}
	have, err := h.GetHeaderMapPairs(t)
	if err != nil {
		return err
	}
	done := map[string]bool{}
	for _, kv := range have {
		name := kv[0]
		if done[name] {
			continue
		}
		done[name] = true
		if !slicesEqual(values(have, name), values(want, name)) {
			if err := h.RemoveHeaderMapValue(t, name); err != nil {
				return err
			}
			for _, v := range values(want, name) {
				if err := h.AddHeaderMapValue(t, name, v); err != nil {
					return err
				}
			}
		}
	}
	for _, kv := range want {
		if !done[kv[0]] {
			if err := h.AddHeaderMapValue(t, kv[0], kv[1]); err != nil {
				return err
			}
		}
	}
	return nil
}

func values(pairs [][2]string, name string) []string {
	var out []string
	for _, kv := range pairs {
		if kv[0] == name {
			out = append(out, kv[1])
		}
	}
	return out
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// attributes maps the property paths (two segments each) the native module answers to
// Envoy's attribute ids; request.path, url_path, method, host and scheme
// never get here (the plugin reads them from the header map).
var attributes = map[[2]string]dynmod.Attribute{
	{"request", "referer"}:     dynmod.AttrRequestReferer,
	{"request", "useragent"}:   dynmod.AttrRequestUserAgent,
	{"request", "id"}:          dynmod.AttrRequestID,
	{"request", "protocol"}:    dynmod.AttrRequestProtocol,
	{"request", "query"}:       dynmod.AttrRequestQuery,
	{"source", "address"}:      dynmod.AttrSourceAddress,
	{"source", "port"}:         dynmod.AttrSourcePort,
	{"destination", "address"}: dynmod.AttrDestinationAddress,
	{"destination", "port"}:    dynmod.AttrDestinationPort,
	{"connection", "id"}:       dynmod.AttrConnectionID,
}

// intAttributes are the attributes Envoy answers as integers.
var intAttributes = map[dynmod.Attribute]bool{
	dynmod.AttrSourcePort: true, dynmod.AttrDestinationPort: true, dynmod.AttrConnectionID: true,
}

// GetProperty implements abi.Host for the attributes Envoy's dynamic
// modules expose; any other path (node.* included: the ABI has no access
// to the node) is not found, so the attribute reads as missing.
func (h *envoyHost) GetProperty(path ...string) ([]byte, error) {
	if len(path) != 2 || h.filter == 0 {
		return nil, abi.ErrNotFound
	}
	id, ok := attributes[[2]string{path[0], path[1]}] // no key built per request
	if !ok {
		return nil, abi.ErrNotFound
	}
	if intAttributes[id] {
		n, ok := h.filter.AttributeInt(id)
		if !ok {
			return nil, abi.ErrNotFound
		}
		return strconv.AppendUint(nil, n, 10), nil
	}
	s, ok := h.filter.AttributeString(id)
	if !ok {
		return nil, abi.ErrNotFound
	}
	return []byte(s), nil
}

// SetProperty implements abi.Host: the property becomes filter state under
// the name the Wasm host gives it ("wasm." + path), so one access-log
// format (%FILTER_STATE(wasm.allot:PLAIN)%) serves both artifacts.
func (h *envoyHost) SetProperty(path string, value []byte) error {
	if path != h.statePath { // the plugin sets one property: make its key once
		h.statePath, h.stateKey = path, filterStatePrefix+path
	}
	if h.filter == 0 || !h.filter.SetFilterState(h.stateKey, value) {
		return hostErr("http_set_filter_state_bytes")
	}
	return nil
}

// filterStatePrefix is the prefix Envoy's Wasm host gives filter state a
// plugin sets; the exposure record is plugin.ExposureProperty under it.
const filterStatePrefix = "wasm."

// DefineMetric implements abi.Host: the configuration's counters were
// defined in ConfigNew (Envoy allows it only there); this returns the
// index of name among them.
func (h *envoyHost) DefineMetric(t abi.MetricType, name string) (uint32, error) {
	if h.entry == nil || t != abi.MetricCounter {
		return 0, hostErr("http_filter_config_define_counter")
	}
	i, ok := h.entry.names[name]
	if !ok {
		return 0, hostErr("http_filter_config_define_counter")
	}
	return uint32(i), nil
}

// IncrementMetric implements abi.Host on the configuration's counters,
// through the configuration (the flush runs off any stream: module.flush
// and ConfigDestroy).
func (h *envoyHost) IncrementMetric(id uint32, delta int64) error {
	if h.entry == nil || int(id) >= len(h.entry.counters) || delta < 0 {
		return hostErr("http_filter_config_increment_counter")
	}
	c := h.entry.counters[id]
	if c == noCounter || h.entry.envoy == 0 || !h.entry.envoy.IncrementCounter(c, uint64(delta)) {
		return hostErr("http_filter_config_increment_counter")
	}
	return nil
}

// SetTickPeriod implements abi.Host: the module flushes every worker's
// counters from its own tick (module.tick).
func (h *envoyHost) SetTickPeriod(uint32) error { return nil }
