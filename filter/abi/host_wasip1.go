//go:build wasip1

package abi

import (
	"unsafe"

	"github.com/allotmesh/allot/filter/wire"
)

// The host functions, imported from module "env" with the spec's names and
// signatures. Pointers are addresses in this module's linear memory; the
// host writes returned buffers into memory it obtains from
// proxy_on_memory_allocate.

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(t uint32, start, max uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_get_header_map_pairs
func proxyGetHeaderMapPairs(t uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_get_header_map_value
func proxyGetHeaderMapValue(t uint32, key unsafe.Pointer, keySize uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_add_header_map_value
func proxyAddHeaderMapValue(t uint32, key unsafe.Pointer, keySize uint32, value unsafe.Pointer, valueSize uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func proxyRemoveHeaderMapValue(t uint32, key unsafe.Pointer, keySize uint32) uint32

//go:wasmimport env proxy_set_header_map_pairs
func proxySetHeaderMapPairs(t uint32, data unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_property
func proxyGetProperty(path unsafe.Pointer, pathSize uint32, retData *uint32, retSize *uint32) uint32

//go:wasmimport env proxy_set_property
func proxySetProperty(path unsafe.Pointer, pathSize uint32, value unsafe.Pointer, valueSize uint32) uint32

//go:wasmimport env proxy_define_metric
func proxyDefineMetric(t uint32, name unsafe.Pointer, nameSize uint32, retID *uint32) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncrementMetric(id uint32, delta int64) uint32

//go:wasmimport env proxy_record_metric
func proxyRecordMetric(id uint32, value uint64) uint32

//go:wasmimport env proxy_get_current_time_nanoseconds
func proxyGetCurrentTimeNanoseconds(ret *uint64) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func proxySetTickPeriodMilliseconds(ms uint32) uint32

//go:wasmimport env proxy_send_local_response
func proxySendLocalResponse(status uint32, details unsafe.Pointer, detailsSize uint32, body unsafe.Pointer, bodySize uint32, headers unsafe.Pointer, headersSize uint32, grpcStatus int32) uint32

// WasmHost is the Host over the real imports: Envoy's. It exists only in
// the wasip1 build; a caller that holds it concretely calls each import
// without an interface call.
type WasmHost struct{}

// The header read reuses one buffer for the host's copy of the map and one
// slice for the parsed pairs, so a request allocates nothing for it.
var (
	headerBuf   []byte
	headerPairs [][2]string
	valueBuf    []byte // GetHeaderMapValue's
)

// retPtr, retSize and retID receive the host's out-parameters. A local
// whose address goes to a wasmimport function escapes to the heap (two
// allocations on every header read); a VM runs one call at a time, so
// package variables serve every call and are read right after it.
var retPtr, retSize, retID uint32

// retTime receives proxy_get_current_time_nanoseconds' out-parameter, as
// retPtr does the others'.
var retTime uint64

// NewHost returns the real host. It exists only in the wasip1 build.
func NewHost() Host { return WasmHost{} }

func strPtr(s string) unsafe.Pointer { return unsafe.Pointer(unsafe.StringData(s)) }

func bytesPtr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }

func (WasmHost) Log(level wire.LogLevel, msg string) {
	proxyLog(uint32(level), strPtr(msg), uint32(len(msg)))
}

func (WasmHost) GetBuffer(t BufferType, start, max int) ([]byte, error) {
	if err := statusErr("proxy_get_buffer_bytes", Status(proxyGetBufferBytes(uint32(t), uint32(start), uint32(max), &retPtr, &retSize))); err != nil {
		return nil, err
	}
	return takeAlloc(retPtr, retSize), nil
}

func (WasmHost) GetHeaderMapPairs(t MapType) ([][2]string, error) {
	reuse = &headerBuf
	err := statusErr("proxy_get_header_map_pairs", Status(proxyGetHeaderMapPairs(uint32(t), &retPtr, &retSize)))
	reuse = nil
	if err != nil {
		return nil, err
	}
	headerPairs, err = ParsePairsInto(headerPairs[:0], takeAlloc(retPtr, retSize))
	return headerPairs, err
}

func (WasmHost) GetHeaderMapValue(t MapType, key string) (string, error) {
	reuse = &valueBuf
	err := statusErr("proxy_get_header_map_value", Status(proxyGetHeaderMapValue(uint32(t), strPtr(key), uint32(len(key)), &retPtr, &retSize)))
	reuse = nil
	if err != nil {
		return "", err
	}
	return StringView(takeAlloc(retPtr, retSize)), nil
}

func (WasmHost) AddHeaderMapValue(t MapType, key, value string) error {
	return statusErr("proxy_add_header_map_value", Status(proxyAddHeaderMapValue(uint32(t), strPtr(key), uint32(len(key)), strPtr(value), uint32(len(value)))))
}

func (WasmHost) RemoveHeaderMapValue(t MapType, key string) error {
	return statusErr("proxy_remove_header_map_value", Status(proxyRemoveHeaderMapValue(uint32(t), strPtr(key), uint32(len(key)))))
}

func (WasmHost) SetHeaderMapPairs(t MapType, serialized []byte) error {
	return statusErr("proxy_set_header_map_pairs", Status(proxySetHeaderMapPairs(uint32(t), bytesPtr(serialized), uint32(len(serialized)))))
}

func (WasmHost) GetProperty(path ...string) ([]byte, error) {
	joined := JoinPath(path)
	if err := statusErr("proxy_get_property", Status(proxyGetProperty(strPtr(joined), uint32(len(joined)), &retPtr, &retSize))); err != nil {
		return nil, err
	}
	return takeAlloc(retPtr, retSize), nil
}

func (WasmHost) SetProperty(path string, value []byte) error {
	return statusErr("proxy_set_property", Status(proxySetProperty(strPtr(path), uint32(len(path)), bytesPtr(value), uint32(len(value)))))
}

func (WasmHost) DefineMetric(t MetricType, name string) (uint32, error) {
	err := statusErr("proxy_define_metric", Status(proxyDefineMetric(uint32(t), strPtr(name), uint32(len(name)), &retID)))
	return retID, err
}

func (WasmHost) IncrementMetric(id uint32, delta int64) error {
	return statusErr("proxy_increment_metric", Status(proxyIncrementMetric(id, delta)))
}

func (WasmHost) RecordMetric(id uint32, value uint64) error {
	return statusErr("proxy_record_metric", Status(proxyRecordMetric(id, value)))
}

func (WasmHost) CurrentTimeNanos() (int64, error) {
	err := statusErr("proxy_get_current_time_nanoseconds", Status(proxyGetCurrentTimeNanoseconds(&retTime)))
	return int64(retTime), err
}

func (WasmHost) SetTickPeriod(ms uint32) error {
	return statusErr("proxy_set_tick_period_milliseconds", Status(proxySetTickPeriodMilliseconds(ms)))
}

func (WasmHost) SendLocalResponse(status uint32, details string, body, headers []byte, grpcStatus int32) error {
	return statusErr("proxy_send_local_response", Status(proxySendLocalResponse(status, strPtr(details), uint32(len(details)),
		bytesPtr(body), uint32(len(body)), bytesPtr(headers), uint32(len(headers)), grpcStatus)))
}
