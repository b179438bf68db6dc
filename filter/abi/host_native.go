//go:build !wasip1

package abi

import "github.com/allotmesh/allot/filter/wire"

// NewHost returns the native twin's host: there is no proxy outside Wasm, so
// every call reports StatusUnimplemented and logs are dropped. Tests use a
// fake Host (package fakehost) instead.
func NewHost() Host { return nativeHost{} }

type nativeHost struct{}

func unimplemented(call string) error { return &Error{Call: call, Status: StatusUnimplemented} }

func (nativeHost) Log(wire.LogLevel, string) {}
func (nativeHost) GetBuffer(BufferType, int, int) ([]byte, error) {
	return nil, unimplemented("proxy_get_buffer_bytes")
}
func (nativeHost) GetHeaderMapPairs(MapType) ([][2]string, error) {
	return nil, unimplemented("proxy_get_header_map_pairs")
}
func (nativeHost) GetHeaderMapValue(MapType, string) (string, error) {
	return "", unimplemented("proxy_get_header_map_value")
}
func (nativeHost) AddHeaderMapValue(MapType, string, string) error {
	return unimplemented("proxy_add_header_map_value")
}
func (nativeHost) RemoveHeaderMapValue(MapType, string) error {
	return unimplemented("proxy_remove_header_map_value")
}
func (nativeHost) SetHeaderMapPairs(MapType, []byte) error {
	return unimplemented("proxy_set_header_map_pairs")
}
func (nativeHost) GetProperty(...string) ([]byte, error) {
	return nil, unimplemented("proxy_get_property")
}
func (nativeHost) SetProperty(string, []byte) error { return unimplemented("proxy_set_property") }
func (nativeHost) DefineMetric(MetricType, string) (uint32, error) {
	return 0, unimplemented("proxy_define_metric")
}
func (nativeHost) IncrementMetric(uint32, int64) error {
	return unimplemented("proxy_increment_metric")
}
func (nativeHost) RecordMetric(uint32, uint64) error {
	return unimplemented("proxy_record_metric")
}
func (nativeHost) CurrentTimeNanos() (int64, error) {
	return 0, unimplemented("proxy_get_current_time_nanoseconds")
}
func (nativeHost) SetTickPeriod(uint32) error {
	return unimplemented("proxy_set_tick_period_milliseconds")
}
func (nativeHost) SendLocalResponse(uint32, string, []byte, []byte, int32) error {
	return unimplemented("proxy_send_local_response")
}
