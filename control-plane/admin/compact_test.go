package admin

import (
	"bytes"
	"encoding/json"
	"testing"

	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
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
