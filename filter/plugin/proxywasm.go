package plugin

import (
	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/wire"
)

// proxyWasm is the Host over proxy-wasm's host functions (abi.Host): each
// method is the one host call that does it. It lives here, not in abi,
// because abi is below the plugin (the plugin is abi's Handler) and the
// plugin's own tests drive it through the proxy-wasm fake host
// (abi/fakehost), whose failure hook breaks every host call.
//
// h is abiHost: abi.Host, except in the Wasm build, where it is Envoy's
// host itself (abi.WasmHost), so that a host call costs the plugin one
// interface call, as it did before the adapter.
type proxyWasm struct {
	h   abiHost
	enc abi.PairsEncoder // SetRequestHeaders' buffer, reused
}

var (
	_ Host           = (*proxyWasm)(nil)
	_ HeaderRewriter = (*proxyWasm)(nil)
)

// Log implements Host with proxy_log (the levels are numbered alike).
func (w *proxyWasm) Log(level LogLevel, msg string) { w.h.Log(abi.LogLevel(level), msg) }

// Configuration implements Host with proxy_get_buffer_bytes.
func (w *proxyWasm) Configuration(size int) ([]byte, error) {
	return w.h.GetBuffer(abi.BufferPluginConfiguration, 0, size)
}

// RequestHeaders implements Host with proxy_get_header_map_pairs.
func (w *proxyWasm) RequestHeaders() ([][2]string, error) {
	return w.h.GetHeaderMapPairs(abi.RequestHeaders)
}

// AddRequestHeader implements Host with proxy_add_header_map_value.
func (w *proxyWasm) AddRequestHeader(name, value string) error {
	return w.h.AddHeaderMapValue(abi.RequestHeaders, name, value)
}

// RemoveRequestHeader implements Host with proxy_remove_header_map_value.
func (w *proxyWasm) RemoveRequestHeader(name string) error {
	return w.h.RemoveHeaderMapValue(abi.RequestHeaders, name)
}

// SetRequestHeaders implements HeaderRewriter with
// proxy_set_header_map_pairs.
func (w *proxyWasm) SetRequestHeaders(pairs [][2]string) error {
	w.enc.Reset()
	for _, kv := range pairs {
		w.enc.Add(kv[0], kv[1])
	}
	return w.h.SetHeaderMapPairs(abi.RequestHeaders, w.enc.Bytes())
}

// AddResponseHeader implements Host with proxy_add_header_map_value.
func (w *proxyWasm) AddResponseHeader(name, value string) error {
	return w.h.AddHeaderMapValue(abi.ResponseHeaders, name, value)
}

// Property implements Host with proxy_get_property of the property's path,
// whatever it means.
func (w *proxyWasm) Property(p *Property) ([]byte, error) { return w.h.GetProperty(p.Path...) }

// SetExposure implements Host with proxy_set_property of
// wire.ExposureProperty: Envoy keeps it as filter state wasm.allot.
func (w *proxyWasm) SetExposure(value []byte) error {
	return w.h.SetProperty(wire.ExposureProperty, value)
}

// DefineMetric implements Host with proxy_define_metric.
func (w *proxyWasm) DefineMetric(kind MetricKind, name string) (uint32, error) {
	t := abi.MetricCounter
	switch kind {
	case Gauge:
		t = abi.MetricGauge
	case Histogram:
		t = abi.MetricHistogram
	}
	return w.h.DefineMetric(t, name)
}

// IncrementMetric implements Host with proxy_increment_metric.
func (w *proxyWasm) IncrementMetric(id uint32, delta int64) error {
	return w.h.IncrementMetric(id, delta)
}

// ResponseStatus implements Host with proxy_get_header_map_value.
func (w *proxyWasm) ResponseStatus() (string, error) {
	return w.h.GetHeaderMapValue(abi.ResponseHeaders, ":status")
}

// Now implements Host with proxy_get_current_time_nanoseconds.
func (w *proxyWasm) Now() (int64, error) { return w.h.CurrentTimeNanos() }

// RecordMetric implements Host with proxy_record_metric.
func (w *proxyWasm) RecordMetric(id uint32, value uint64) error { return w.h.RecordMetric(id, value) }

// StartTicks implements Host with proxy_set_tick_period_milliseconds.
func (w *proxyWasm) StartTicks(ms uint32) error { return w.h.SetTickPeriod(ms) }
