package proxywasm

import (
	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/wire"
)

// proxyWasm is the plugin.Host over proxy-wasm's host functions
// (abi.Host): each method is the one host call that does it.
//
// h is abiHost: abi.Host, except in the Wasm build, where it is Envoy's
// host itself (abi.WasmHost), so that a host call costs the plugin one
// interface call, as it did before the adapter.
type proxyWasm struct {
	h   abiHost
	enc abi.PairsEncoder // SetRequestHeaders' and SendLocalReply's buffer, reused
	// bodySize is how much request body the host holds for the stream in
	// hand (Handler.OnRequestBody sets it).
	bodySize int
}

var (
	_ plugin.Host           = (*proxyWasm)(nil)
	_ plugin.HeaderRewriter = (*proxyWasm)(nil)
	_ plugin.LocalReplier   = (*proxyWasm)(nil)
)

// NewHost returns the plugin.Host over h, each method one of its host
// calls. A host that is also a plugin.HeaderBatcher (a fake of the native
// module's) batches: the plugin finds its batching methods on the
// returned Host.
func NewHost(h abi.Host) plugin.Host {
	ph, _ := newHost(h)
	return ph
}

// RequestBody implements plugin.LocalReplier with proxy_get_buffer_bytes
// of the request body: at most plugin.OFREPLimit bytes, enough to see a
// body is over any bound without copying it whole.
func (w *proxyWasm) RequestBody() ([]byte, error) {
	n := min(w.bodySize, plugin.OFREPLimit)
	if n == 0 {
		return nil, nil
	}
	return w.h.GetBuffer(abi.BufferHTTPRequestBody, 0, n)
}

// localReplyDetails is the local replies' %RESPONSE_CODE_DETAILS%.
const localReplyDetails = "allot_ofrep"

// SendLocalReply implements plugin.LocalReplier with
// proxy_send_local_response.
func (w *proxyWasm) SendLocalReply(status uint32, headers [][2]string, body []byte) error {
	w.enc.Reset()
	for _, kv := range headers {
		w.enc.Add(kv[0], kv[1])
	}
	return w.h.SendLocalResponse(status, localReplyDetails, body, w.enc.Bytes(), -1)
}

// Log implements plugin.Host with proxy_log.
func (w *proxyWasm) Log(level wire.LogLevel, msg string) { w.h.Log(level, msg) }

// Configuration implements plugin.Host with proxy_get_buffer_bytes.
func (w *proxyWasm) Configuration(size int) ([]byte, error) {
	return w.h.GetBuffer(abi.BufferPluginConfiguration, 0, size)
}

// RequestHeaders implements plugin.Host with proxy_get_header_map_pairs.
func (w *proxyWasm) RequestHeaders() ([][2]string, error) {
	return w.h.GetHeaderMapPairs(abi.RequestHeaders)
}

// AddRequestHeader implements plugin.Host with proxy_add_header_map_value.
func (w *proxyWasm) AddRequestHeader(name, value string) error {
	return w.h.AddHeaderMapValue(abi.RequestHeaders, name, value)
}

// RemoveRequestHeader implements plugin.Host with
// proxy_remove_header_map_value.
func (w *proxyWasm) RemoveRequestHeader(name string) error {
	return w.h.RemoveHeaderMapValue(abi.RequestHeaders, name)
}

// SetRequestHeaders implements plugin.HeaderRewriter with
// proxy_set_header_map_pairs.
func (w *proxyWasm) SetRequestHeaders(pairs [][2]string) error {
	w.enc.Reset()
	for _, kv := range pairs {
		w.enc.Add(kv[0], kv[1])
	}
	return w.h.SetHeaderMapPairs(abi.RequestHeaders, w.enc.Bytes())
}

// AddResponseHeader implements plugin.Host with proxy_add_header_map_value.
func (w *proxyWasm) AddResponseHeader(name, value string) error {
	return w.h.AddHeaderMapValue(abi.ResponseHeaders, name, value)
}

// Property implements plugin.Host with proxy_get_property of the
// property's path, whatever it means.
func (w *proxyWasm) Property(p *plugin.Property) ([]byte, error) { return w.h.GetProperty(p.Path...) }

// SetExposure implements plugin.Host with proxy_set_property of
// wire.ExposureProperty: Envoy keeps it as filter state wasm.allot.
func (w *proxyWasm) SetExposure(value []byte) error {
	return w.h.SetProperty(wire.ExposureProperty, value)
}

// DefineMetric implements plugin.Host with proxy_define_metric.
func (w *proxyWasm) DefineMetric(kind plugin.MetricKind, name string) (uint32, error) {
	t := abi.MetricCounter
	switch kind {
	case plugin.Gauge:
		t = abi.MetricGauge
	case plugin.Histogram:
		t = abi.MetricHistogram
	}
	return w.h.DefineMetric(t, name)
}

// IncrementMetric implements plugin.Host with proxy_increment_metric.
func (w *proxyWasm) IncrementMetric(id uint32, delta int64) error {
	return w.h.IncrementMetric(id, delta)
}

// ResponseStatus implements plugin.Host with proxy_get_header_map_value.
func (w *proxyWasm) ResponseStatus() (string, error) {
	return w.h.GetHeaderMapValue(abi.ResponseHeaders, ":status")
}

// Now implements plugin.Host with proxy_get_current_time_nanoseconds.
func (w *proxyWasm) Now() (int64, error) { return w.h.CurrentTimeNanos() }

// RecordMetric implements plugin.Host with proxy_record_metric.
func (w *proxyWasm) RecordMetric(id uint32, value uint64) error { return w.h.RecordMetric(id, value) }

// StartTicks implements plugin.Host with
// proxy_set_tick_period_milliseconds.
func (w *proxyWasm) StartTicks(ms uint32) error { return w.h.SetTickPeriod(ms) }
