// Package abi is Allot's proxy-wasm ABI v0.2.1 layer: the host functions the
// filter imports, the callbacks it exports, and the memory contract between
// the two. Nothing above this package touches linear memory or wasm
// directives.
//
// On GOOS=wasip1 the real host (Envoy) is reached through //go:wasmimport and
// the callbacks are //go:wasmexport functions that dispatch to the Handler set
// with SetHandler. On every other GOOS (the native twin) there are no exports
// and no real host: tests drive a Handler directly with a fake Host, so
// everything above this package is unit-tested natively.
//
// Spec: https://github.com/proxy-wasm/spec/tree/main/abi-versions/v0.2.1
//
// This package imports only the standard library and filter/wire (its log
// levels, wire.LogLevel); it must never import the filter's core
// (filter/plugin), gRPC or net/http.
package abi

import (
	"encoding/binary"
	"errors"
	"slices"
	"strconv"

	"github.com/allotmesh/allot/filter/wire"
)

// Status is a proxy_status_t returned by every host function.
type Status uint32

// Host function results, as numbered by the spec.
const (
	StatusOK               Status = 0
	StatusNotFound         Status = 1
	StatusBadArgument      Status = 2
	StatusSerializationErr Status = 3
	StatusParseFailure     Status = 4
	StatusEmpty            Status = 7
	StatusCasMismatch      Status = 8
	StatusInternalFailure  Status = 10
	StatusUnimplemented    Status = 12
)

// Error is a host function's non-OK status as a Go error.
type Error struct {
	Call   string
	Status Status
}

func (e *Error) Error() string {
	return e.Call + ": proxy-wasm status " + strconv.Itoa(int(e.Status))
}

// ErrNotFound matches (with errors.Is) any host error with StatusNotFound.
var ErrNotFound = &Error{Status: StatusNotFound}

// Is reports whether target is a host error with the same status.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Call == "" && t.Status == e.Status
}

func statusErr(call string, s Status) error {
	if s == StatusOK {
		return nil
	}
	return &Error{Call: call, Status: s}
}

// MapType is a proxy_map_type_t.
type MapType uint32

// Header maps.
const (
	RequestHeaders   MapType = 0
	RequestTrailers  MapType = 1
	ResponseHeaders  MapType = 2
	ResponseTrailers MapType = 3
)

// BufferType is a proxy_buffer_type_t.
type BufferType uint32

// Buffers.
const (
	// BufferHTTPRequestBody is the request body buffered so far, readable
	// in proxy_on_request_body.
	BufferHTTPRequestBody     BufferType = 0
	BufferVMConfiguration     BufferType = 6
	BufferPluginConfiguration BufferType = 7
)

// MetricType is a proxy_metric_type_t.
type MetricType uint32

// Metric types.
const (
	MetricCounter   MetricType = 0
	MetricGauge     MetricType = 1
	MetricHistogram MetricType = 2
)

// Action is a proxy_action_t returned by stream callbacks.
type Action uint32

// Stream actions.
const (
	ActionContinue Action = 0
	ActionPause    Action = 1
)

// Host is the subset of proxy-wasm host functions Allot uses, and nothing
// more: an import nothing calls is a method every fake must carry for no
// test. The wasip1 build implements it over the real imports; tests use a
// fake.
type Host interface {
	// Log writes msg to the proxy's log at level.
	Log(level wire.LogLevel, msg string)
	// GetBuffer returns up to max bytes from start of a buffer.
	GetBuffer(t BufferType, start, max int) ([]byte, error)
	// GetHeaderMapPairs returns every header of a map, in order. The slice
	// and its strings are valid until the next GetHeaderMapPairs call (the
	// real host reuses its buffers).
	GetHeaderMapPairs(t MapType) ([][2]string, error)
	// GetHeaderMapValue returns the first value of a header, valid until
	// the next GetHeaderMapValue call (the real host reuses its buffer).
	GetHeaderMapValue(t MapType, key string) (string, error)
	// AddHeaderMapValue appends a header (keeping existing copies).
	AddHeaderMapValue(t MapType, key, value string) error
	// RemoveHeaderMapValue removes every copy of a header.
	RemoveHeaderMapValue(t MapType, key string) error
	// SetHeaderMapPairs replaces a whole header map with serialized pairs
	// (see PairsEncoder): one host call for any number of changes.
	SetHeaderMapPairs(t MapType, serialized []byte) error
	// GetProperty reads a host property; path segments are joined with NUL
	// as the spec requires.
	GetProperty(path ...string) ([]byte, error)
	// SetProperty writes a host property (e.g. filter state).
	SetProperty(path string, value []byte) error
	// DefineMetric defines a metric and returns its id.
	DefineMetric(t MetricType, name string) (uint32, error)
	// IncrementMetric adds delta to a counter or gauge.
	IncrementMetric(id uint32, delta int64) error
	// RecordMetric records value in a histogram (or sets a gauge).
	RecordMetric(id uint32, value uint64) error
	// CurrentTimeNanos is the host's clock, in nanoseconds since the epoch.
	CurrentTimeNanos() (int64, error)
	// SetTickPeriod asks for OnTick every ms milliseconds (0 = off).
	SetTickPeriod(ms uint32) error
	// SendLocalResponse answers the stream's request itself (status,
	// details for the access log's %RESPONSE_CODE_DETAILS%, body, headers
	// serialized as PairsEncoder does; grpcStatus -1: none): the request
	// reaches no upstream.
	SendLocalResponse(status uint32, details string, body, headers []byte, grpcStatus int32) error
}

// Handler receives the host's callbacks: exactly those the wasip1 build
// exports (exports_wasip1.go), so a native test cannot rely on a callback
// Envoy never delivers. The plugin implements it; SetHandler installs it.
type Handler interface {
	// OnContextCreate is called for every new root (parent 0) or stream context.
	OnContextCreate(id, parent uint32)
	// OnVMStart is called once per VM with the size of its configuration.
	OnVMStart(rootID uint32, vmConfigSize int) bool
	// OnConfigure is called with the plugin configuration's size; false
	// rejects the configuration.
	OnConfigure(rootID uint32, configSize int) bool
	// OnRequestHeaders is called when a stream's request headers arrive.
	OnRequestHeaders(id uint32, numHeaders int, endOfStream bool) Action
	// OnRequestBody is called as a stream's request body arrives:
	// bodySize is what the host holds of it (everything so far while the
	// handler returns ActionPause: Envoy buffers it).
	OnRequestBody(id uint32, bodySize int, endOfStream bool) Action
	// OnResponseHeaders is called when a stream's response headers are
	// about to go downstream.
	OnResponseHeaders(id uint32, numHeaders int, endOfStream bool) Action
	// OnDelete is called when a context is gone.
	OnDelete(id uint32)
	// OnTick is called periodically on root contexts after SetTickPeriod.
	OnTick(rootID uint32)
}

var handler Handler

// SetHandler installs the callbacks' receiver. Call it from main's init.
func SetHandler(h Handler) { handler = h }

// ParsePairs decodes the spec's serialized header map: a little-endian u32
// count, count × (u32 name size, u32 value size), then each name and value
// followed by a NUL byte. The returned strings alias buf.
func ParsePairs(buf []byte) ([][2]string, error) { return ParsePairsInto(nil, buf) }

// ParsePairsInto is ParsePairs appending to dst (reused when it has room).
func ParsePairsInto(dst [][2]string, buf []byte) ([][2]string, error) {
	if len(buf) < 4 {
		if len(buf) == 0 {
			return nil, nil
		}
		return nil, errors.New("header map: short buffer")
	}
	n := int(binary.LittleEndian.Uint32(buf))
	if n > (len(buf)-4)/10 { // every pair takes at least 8 size bytes + 2 NULs
		return nil, errors.New("header map: pair count exceeds buffer")
	}
	sizes := buf[4 : 4+8*n]
	pos := 4 + 8*n
	out := slices.Grow(dst[:0], n)[:n]
	for i := range n {
		ks := int(binary.LittleEndian.Uint32(sizes[8*i:]))
		vs := int(binary.LittleEndian.Uint32(sizes[8*i+4:]))
		if ks < 0 || vs < 0 || pos+ks+vs+2 > len(buf) || buf[pos+ks] != 0 || buf[pos+ks+1+vs] != 0 {
			return nil, errors.New("header map: malformed pair")
		}
		out[i][0] = StringView(buf[pos : pos+ks])
		pos += ks + 1
		out[i][1] = StringView(buf[pos : pos+vs])
		pos += vs + 1
	}
	if pos != len(buf) {
		return nil, errors.New("header map: trailing bytes")
	}
	return out, nil
}

// PairsEncoder builds a serialized header map (the format ParsePairs reads)
// without allocating once its buffers have grown: the request path reuses
// one.
type PairsEncoder struct {
	sizes []byte // per pair: u32 name size, u32 value size
	data  []byte // per pair: name, NUL, value, NUL
	out   []byte
	n     int
}

// Reset empties the encoder, keeping its buffers.
func (e *PairsEncoder) Reset() {
	e.sizes, e.data, e.out, e.n = e.sizes[:0], e.data[:0], e.out[:0], 0
}

// Add appends one pair.
func (e *PairsEncoder) Add(name, value string) {
	e.sizes = binary.LittleEndian.AppendUint32(e.sizes, uint32(len(name)))
	e.sizes = binary.LittleEndian.AppendUint32(e.sizes, uint32(len(value)))
	e.data = append(append(e.data, name...), 0)
	e.data = append(append(e.data, value...), 0)
	e.n++
}

// Len is the number of pairs added.
func (e *PairsEncoder) Len() int { return e.n }

// Bytes returns the serialized map; it is valid until the next Reset.
func (e *PairsEncoder) Bytes() []byte {
	e.out = binary.LittleEndian.AppendUint32(e.out[:0], uint32(e.n))
	e.out = append(e.out, e.sizes...)
	e.out = append(e.out, e.data...)
	return e.out
}

// SerializePairs encodes pairs in the spec's header map format (the inverse
// of ParsePairs); fake hosts use it.
func SerializePairs(pairs [][2]string) []byte {
	size := 4
	for _, p := range pairs {
		size += 8 + len(p[0]) + len(p[1]) + 2
	}
	buf := make([]byte, 4, size)
	binary.LittleEndian.PutUint32(buf, uint32(len(pairs)))
	for _, p := range pairs {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(p[0])))
		buf = binary.LittleEndian.AppendUint32(buf, uint32(len(p[1])))
	}
	for _, p := range pairs {
		buf = append(append(buf, p[0]...), 0)
		buf = append(append(buf, p[1]...), 0)
	}
	return buf
}

// JoinPath joins property path segments with NUL, as proxy_get_property wants.
func JoinPath(path []string) string {
	n := 0
	for _, p := range path {
		n += len(p) + 1
	}
	b := make([]byte, 0, n)
	for i, p := range path {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, p...)
	}
	return string(b)
}
