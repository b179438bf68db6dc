package admin

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// TestRolloutJSON: appendRolloutJSON gives what protojson (jsonOut,
// compacted: the oracle) gives, byte for byte, for rollouts with every
// field of every message set at random (a field added to the messages
// fails it until the encoder writes it too), and declines exactly what
// protojson refuses.
func TestRolloutJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 46))
	declined := 0
	for i := range 3000 {
		ro := &adminv1.Rollout{}
		fill(rng, ro.ProtoReflect())
		if rng.IntN(10) == 0 { // a nil element: protojson writes {}
			ro.Proxies = append(ro.Proxies, nil)
			ro.Replicas = append([]*adminv1.ReplicaStatus{nil}, ro.Replicas...)
		}
		want, werr := jsonOut.Marshal(ro)
		want = compactJSON(want)
		got, ok := appendRolloutJSON(nil, ro)
		switch {
		case werr != nil && ok:
			t.Fatalf("rollout %d: protojson refused it (%v), appendRolloutJSON wrote %s", i, werr, got)
		case werr != nil:
			declined++
		case !ok:
			t.Fatalf("rollout %d: appendRolloutJSON declined what protojson wrote: %s", i, want)
		case !bytes.Equal(got, want):
			t.Fatalf("rollout %d:\n got %s\nwant %s", i, got, want)
		}
		// The HTTP API's encoding of it is the oracle's, or its error, after
		// what the buffer held (with room to spare: a declined encoding
		// leaves bytes past it, which the fallback must overwrite).
		if b, err := appendJSON(append(make([]byte, 0, 1<<16), 'x'), ro); (err != nil) != (werr != nil) || err == nil && !bytes.Equal(b, append([]byte("x"), want...)) {
			t.Fatalf("rollout %d: appendJSON = %s, %v; want x%s, %v", i, b, err, want, werr)
		}
	}
	t.Logf("%d declined", declined)
	if declined == 0 || declined > 1000 {
		t.Fatalf("%d of 3000 rollouts were refused: want some (invalid UTF-8, times out of range), not most", declined)
	}
	// The empty rollout, and one proxy with nothing but a time on a
	// whole second.
	for _, ro := range []*adminv1.Rollout{{}, {Proxies: []*adminv1.ProxyStatus{{LastSeen: &timestamppb.Timestamp{Seconds: 1}}}}} {
		want, _ := jsonOut.Marshal(ro)
		if got, ok := appendRolloutJSON(nil, ro); !ok || !bytes.Equal(got, compactJSON(want)) {
			t.Errorf("appendRolloutJSON(%v) = %s, %v; want %s", ro, got, ok, compactJSON(want))
		}
	}
}

// fill sets every field of m at random: strings from tricky pieces,
// numbers often zero, times at whole seconds, milli-, micro- and
// nanoseconds (and now and then out of protojson's range), lists and maps
// of zero to three elements.
func fill(rng *rand.Rand, m protoreflect.Message) {
	if m.Descriptor().FullName() == "google.protobuf.Timestamp" {
		fillTime(rng, m.Interface().(*timestamppb.Timestamp))
		return
	}
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if rng.IntN(4) == 0 {
			continue // unset
		}
		switch {
		case fd.IsMap():
			mp := m.Mutable(fd).Map()
			for range rng.IntN(4) {
				mp.Set(protoreflect.ValueOfString(randString(rng)).MapKey(), scalar(rng, fd.MapValue()))
			}
		case fd.IsList():
			l := m.Mutable(fd).List()
			for range rng.IntN(4) {
				e := l.NewElement()
				fill(rng, e.Message())
				l.Append(e)
			}
		case fd.Kind() == protoreflect.MessageKind:
			fill(rng, m.Mutable(fd).Message())
		default:
			m.Set(fd, scalar(rng, fd))
		}
	}
}

func scalar(rng *rand.Rand, fd protoreflect.FieldDescriptor) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(randString(rng))
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32([]int32{0, 1, -1, 7, 1 << 30, -1 << 31}[rng.IntN(6)])
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64([]int64{0, 1, -1, 42, 1 << 62, -1 << 63}[rng.IntN(6)])
	}
	panic("fill: no values for " + string(fd.FullName()) + " (" + fd.Kind().String() + "): the messages gained a kind of field appendRolloutJSON does not know")
}

func fillTime(rng *rand.Rand, ts *timestamppb.Timestamp) {
	ts.Seconds = []int64{0, 1, 1_700_000_000, -62135596800, 253402300799, -1}[rng.IntN(6)]
	ts.Nanos = []int32{0, 1, 100, 999_999_999, 5_000_000, 120_000, 123_456_700, 123_456_789}[rng.IntN(8)]
	if rng.IntN(100) == 0 { // out of protojson's range
		ts.Seconds = []int64{-62135596801, 253402300800}[rng.IntN(2)]
	} else if rng.IntN(100) == 0 {
		ts.Nanos = []int32{1_000_000_000, -1}[rng.IntN(2)]
	}
}

var pieces = []string{"", "a", "web", "r1", "v-1a2b", `"`, `\`, "\n", "\t", "\r", "\b", "\f", "\x00", "\x1f", "\x7f", " ",
	"ü", "日本", "\u2028", "\U0001F600", "<&>", ",", ":", "}"}

// notUTF8 are pieces protojson refuses.
var notUTF8 = []string{"\xff", "\xc3", "a\xe6\x97"}

func randString(rng *rand.Rand) string {
	var b strings.Builder
	for range rng.IntN(4) {
		if rng.IntN(300) == 0 {
			b.WriteString(notUTF8[rng.IntN(len(notUTF8))])
			continue
		}
		b.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return b.String()
}
