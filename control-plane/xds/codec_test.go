package xds

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestCodecFields fails when DiscoveryResponse or Any gains a field:
// marshalResponse must then write it, or decline a response that sets it.
func TestCodecFields(t *testing.T) {
	for _, c := range []struct {
		m    proto.Message
		want []string
	}{
		{&discoveryv3.DiscoveryResponse{}, []string{"1 version_info", "2 resources", "3 canary (declined)", "4 type_url", "5 nonce", "6 control_plane (declined)", "7 resource_errors (declined)"}},
		{&anypb.Any{}, []string{"1 type_url", "2 value"}},
	} {
		fields := c.m.ProtoReflect().Descriptor().Fields()
		var got []string
		for i := range fields.Len() {
			got = append(got, fields.Get(i).TextName())
		}
		var want []string
		for _, w := range c.want {
			want = append(want, strings.Fields(w)[1])
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s has fields %v, marshalResponse knows %v", c.m.ProtoReflect().Descriptor().FullName(), got, want)
		}
		for i := range fields.Len() {
			if n := fields.Get(i).Number(); int(n) != i+1 {
				t.Errorf("%s: field %s has number %d, marshalResponse writes %d", c.m.ProtoReflect().Descriptor().FullName(), fields.Get(i).TextName(), n, i+1)
			}
		}
	}
}

// TestCodecMatchesProto holds the codec's encoding of responses to
// protobuf's, byte for byte, on random responses with strings and values
// around every varint length boundary; a declined response is encoded by
// protobuf, and a resource's value is sent without being copied.
func TestCodecMatchesProto(t *testing.T) {
	c := newCodec()
	rng := rand.New(rand.NewPCG(46, 8))
	lengths := []int{0, 1, 2, 127, 128, 300, 16383, 16384, 70000}
	str := func() string { return strings.Repeat("v", lengths[rng.IntN(len(lengths))]) }
	for i := range 3000 {
		m := &discoveryv3.DiscoveryResponse{VersionInfo: str(), TypeUrl: str(), Nonce: str()}
		for range rng.IntN(4) {
			v := make([]byte, lengths[rng.IntN(len(lengths))])
			for j := range v {
				v[j] = byte(rng.IntN(256))
			}
			m.Resources = append(m.Resources, &anypb.Any{TypeUrl: str(), Value: v})
		}
		declined := max(rng.IntN(8)-3, 0) // 0: most responses are encoded by marshalResponse
		switch declined {
		case 1:
			m.Canary = true
		case 2:
			m.ControlPlane = &corev3.ControlPlane{Identifier: "cp"}
		case 3:
			m.ResourceErrors = []*discoveryv3.ResourceError{{ResourceName: &discoveryv3.ResourceName{Name: "x"}}}
		case 4:
			m.ProtoReflect().SetUnknown(protoreflect.RawFields{0xf8, 0x3e, 0x01}) // field 999, varint 1
		}
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		out, err := c.Marshal(m)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if got := out.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("response %d (declined %d): the codec's %d bytes differ from protobuf's %d", i, declined, len(got), len(want))
		}
		_, ok := marshalResponse(m)
		if ok != (declined == 0) {
			t.Fatalf("response %d: marshalResponse ok %v, want %v (declined %d)", i, ok, declined == 0, declined)
		}
		if declined != 0 {
			continue
		}
		// Every non-empty value is one of the buffers, not a copy.
		for _, r := range m.Resources {
			if len(r.Value) == 0 {
				continue
			}
			if !slices.ContainsFunc([]mem.Buffer(out), func(b mem.Buffer) bool {
				d := b.ReadOnlyData()
				return len(d) == len(r.Value) && &d[0] == &r.Value[0]
			}) {
				t.Fatalf("response %d: a resource's value was copied", i)
			}
		}
	}
}

// TestCodecDelegates: anything but a response, and a response with a nil
// resource or a string that is not UTF-8, is what gRPC's proto codec makes
// of it (for the latter, protobuf's error).
func TestCodecDelegates(t *testing.T) {
	c := newCodec()
	req := &discoveryv3.DiscoveryRequest{VersionInfo: "v1", TypeUrl: "t", ResponseNonce: "3", Node: &corev3.Node{Id: "n"}}
	out, err := c.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := proto.Marshal(req)
	if !bytes.Equal(out.Materialize(), want) {
		t.Error("a request is not encoded as protobuf encodes it")
	}
	var back discoveryv3.DiscoveryRequest
	if err := c.Unmarshal(out, &back); err != nil || !proto.Equal(&back, req) {
		t.Errorf("round trip: %v, %v", err, &back)
	}
	if _, ok := marshalResponse(&discoveryv3.DiscoveryResponse{Resources: []*anypb.Any{nil}}); ok {
		t.Error("a nil resource was not declined")
	}
	for _, bad := range []*discoveryv3.DiscoveryResponse{
		{VersionInfo: "v\xff"}, {TypeUrl: "t\xff"}, {Nonce: "\xff"}, {Resources: []*anypb.Any{{TypeUrl: "t\xff", Value: []byte{1}}}},
	} {
		if _, err := c.Marshal(bad); err == nil {
			t.Errorf("%v: encoded, want protobuf's error for a string that is not UTF-8", bad)
		}
	}
	if c.Name() != "proto" {
		t.Errorf("Name %q", c.Name())
	}
}
