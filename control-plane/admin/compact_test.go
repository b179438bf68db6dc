package admin

import (
	"bytes"
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// TestCompactJSON: compactJSON gives what json.Compact gives (the oracle)
// for protojson's output and for JSON with whitespace everywhere it may
// be, strings with quotes, backslashes, commas and colons included.
func TestCompactJSON(t *testing.T) {
	tricky := `a "quoted", b: c \ d \" e` + "\n\t" + `,: ü 日本 \\`
	ro := &adminv1.Rollout{Result: "timeout", Error: tricky, Targets: map[string]string{"web": "v1", tricky: "v2"},
		Proxies: []*adminv1.ProxyStatus{
			{NodeId: "a", Cluster: "web", State: "applied", Pushes: 3, ConnectTime: timestamppb.Now()},
			{NodeId: tricky, Cluster: "web", State: "rejected", RejectionError: tricky},
		}}
	pj, err := jsonOut.Marshal(ro)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range [][]byte{
		pj,
		[]byte(`{}`),
		[]byte(" { \"a\" : [ 1 , 2 ,\n\t3 ] ,\r\n \"b\" : \"x, y: \\\"z\\\" \\\\\" , \"c\":{ } } "),
		[]byte(`["\\", " ", "\"", "\\\" ,"]`),
	} {
		var want bytes.Buffer
		if err := json.Compact(&want, in); err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		if got := compactJSON(bytes.Clone(in)); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("compactJSON(%s)\n = %s\nwant %s", in, got, want.Bytes())
		}
	}
}

// TestWithRollout: a waited write's body is what encoding/json made of
// {"experiment": …, "rollout": …} (the oracle), byte for byte.
func TestWithRollout(t *testing.T) {
	ro := &adminv1.Rollout{Result: "applied", Targets: map[string]string{"web": "v1"},
		Proxies: []*adminv1.ProxyStatus{{NodeId: "a, \"b\": c", Cluster: "web", State: "applied", AckedTime: timestamppb.Now()}}}
	exp := &experimentv1.Experiment{Key: "k", Weights: []float64{0.5, 0.5}}
	for _, result := range []*experimentv1.Experiment{exp, nil} {
		want := map[string]json.RawMessage{}
		for name, m := range map[string]proto.Message{"experiment": result, "rollout": ro} {
			if name == "experiment" && result == nil {
				continue
			}
			b, err := jsonOut.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			want[name] = b
		}
		var wantBody bytes.Buffer
		enc := json.NewEncoder(&wantBody)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(want); err != nil {
			t.Fatal(err)
		}
		var m proto.Message
		if result != nil {
			m = result
		}
		got, err := withRollout(m, ro)
		if err != nil {
			t.Fatal(err)
		}
		if g := append(got.(json.RawMessage), '\n'); !bytes.Equal(g, wantBody.Bytes()) {
			t.Errorf("withRollout\n = %s\nwant %s", g, wantBody.Bytes())
		}
	}
}
