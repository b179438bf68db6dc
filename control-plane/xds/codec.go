package xds

import (
	"unicode/utf8"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"
)

// codec is the xDS listener's gRPC codec (ServerOptions). It encodes a
// DiscoveryResponse without copying its resources: the message is sent as
// its small fields, encoded for the stream, around each resource's value,
// which the snapshot encoded once (holdCache.SetSnapshot) and every
// stream shares. The bytes are the ones protobuf's encoder gives
// (TestCodecMatchesProto). Every other message, and a response with a
// field this encoder does not write, goes through gRPC's proto codec.
type codec struct{ proto encoding.CodecV2 }

func newCodec() codec { return codec{proto: encoding.GetCodecV2(proto.Name)} }

// Name is proto's: the codec speaks the same wire format.
func (codec) Name() string { return proto.Name }

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	if m, ok := v.(*discoveryv3.DiscoveryResponse); ok {
		if out, ok := marshalResponse(m); ok {
			return out, nil
		}
	}
	return c.proto.Marshal(v)
}

func (c codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

// The DiscoveryResponse and Any fields marshalResponse writes, by number.
const (
	responseVersionInfo = 1
	responseResources   = 2
	responseTypeURL     = 4
	responseNonce       = 5
	anyTypeURL          = 1
	anyValue            = 2
)

// marshalResponse encodes m as protobuf does, its fields in number order,
// with each resource's value as a buffer of its own that is not copied.
// It declines (ok false) a response with a field it does not write (the
// canary flag, a control plane, resource errors, unknown fields), a nil
// resource, or a string that is not UTF-8, which protobuf refuses to
// encode.
func marshalResponse(m *discoveryv3.DiscoveryResponse) (mem.BufferSlice, bool) {
	if m.GetCanary() || m.GetControlPlane() != nil || len(m.GetResourceErrors()) > 0 || len(m.ProtoReflect().GetUnknown()) > 0 ||
		!utf8.ValidString(m.GetVersionInfo()) || !utf8.ValidString(m.GetTypeUrl()) || !utf8.ValidString(m.GetNonce()) {
		return nil, false
	}
	small := stringFieldSize(responseVersionInfo, m.GetVersionInfo()) + stringFieldSize(responseTypeURL, m.GetTypeUrl()) + stringFieldSize(responseNonce, m.GetNonce())
	for _, r := range m.GetResources() {
		if r == nil || len(r.ProtoReflect().GetUnknown()) > 0 || !utf8.ValidString(r.GetTypeUrl()) {
			return nil, false
		}
		n := anySize(r)
		small += protowire.SizeTag(responseResources) + protowire.SizeVarint(uint64(n)) + n - len(r.GetValue())
	}
	// One array holds every small part; the buffers are slices of it.
	b := make([]byte, 0, small)
	out := make(mem.BufferSlice, 0, 2*len(m.GetResources())+1)
	b = appendString(b, responseVersionInfo, m.GetVersionInfo())
	start := 0
	for _, r := range m.GetResources() {
		b = protowire.AppendTag(b, responseResources, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(anySize(r)))
		b = appendString(b, anyTypeURL, r.GetTypeUrl())
		if len(r.GetValue()) > 0 {
			b = protowire.AppendTag(b, anyValue, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(len(r.GetValue())))
			out = append(out, mem.SliceBuffer(b[start:]), mem.SliceBuffer(r.GetValue()))
			start = len(b)
		}
	}
	b = appendString(b, responseTypeURL, m.GetTypeUrl())
	b = appendString(b, responseNonce, m.GetNonce())
	if start < len(b) {
		out = append(out, mem.SliceBuffer(b[start:]))
	}
	return out, true
}

// anySize is the encoded size of r's fields.
func anySize(r *anypb.Any) int {
	n := stringFieldSize(anyTypeURL, r.GetTypeUrl())
	if len(r.GetValue()) > 0 {
		n += protowire.SizeTag(anyValue) + protowire.SizeBytes(len(r.GetValue()))
	}
	return n
}

// stringFieldSize is the encoded size of a string field: none when empty,
// as proto3 writes it.
func stringFieldSize(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}
