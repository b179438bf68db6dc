package admin_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/allotmesh/allot/control-plane/admin"
	"github.com/allotmesh/allot/control-plane/rollout"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// fakeRollouts is a hand-written admin.Rollouts: it records the calls and
// answers with a fixed result.
type fakeRollouts struct {
	mu     sync.Mutex
	marks  int
	waits  []time.Duration // the deadline left when Wait was called
	revs   []int64         // the write's revision Wait was given
	result string
}

func (f *fakeRollouts) Mark() rollout.Mark {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.marks++
	return rollout.Mark{Targets: rollout.Targets{"svc": "v1"}}
}

func (f *fakeRollouts) Wait(ctx context.Context, mark rollout.Mark, rev int64) *adminv1.Rollout {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, _ := ctx.Deadline()
	f.waits = append(f.waits, time.Until(d))
	f.revs = append(f.revs, rev)
	return &adminv1.Rollout{Result: f.result, Targets: map[string]string{"svc": "v2"},
		Proxies: []*adminv1.ProxyStatus{{NodeId: "p1", Cluster: "svc", State: "applied", TargetVersion: "v2", AckedVersion: "v2"}}}
}

func (f *fakeRollouts) Status() *adminv1.Rollout {
	return &adminv1.Rollout{Result: "status", Proxies: []*adminv1.ProxyStatus{{NodeId: "p1", State: "pending"}}}
}

func TestWriteWaitsOverHTTP(t *testing.T) {
	f := &fakeRollouts{result: "applied"}
	e := newEnv(t, nil, admin.WithRollouts(f))
	var out struct {
		Experiment map[string]any  `json:"experiment"`
		RawRollout json.RawMessage `json:"rollout"`
	}
	e.mustDo(http.StatusCreated, adminToken, "POST", "/v1/experiments?wait=5s", `{"key":"w","variations":["a","b"]}`, &out)
	if out.Experiment["key"] != "w" || len(out.RawRollout) == 0 {
		t.Fatalf("a waited write answers {experiment, rollout}, got %+v", out)
	}
	var ro map[string]any
	json.Unmarshal(out.RawRollout, &ro)
	if ro["result"] != "applied" {
		t.Fatalf("rollout = %s", out.RawRollout)
	}
	if f.marks != 1 || len(f.waits) != 1 || f.waits[0] > 5*time.Second || f.waits[0] < 4*time.Second {
		t.Fatalf("marks %d waits %v: want one mark before the write and a 5 s wait", f.marks, f.waits)
	}
	if rev := revisionOf(out.Experiment); len(f.revs) != 1 || strconv.FormatInt(f.revs[0], 10) != rev {
		t.Fatalf("Wait was given revisions %v, want the write's, %s", f.revs, rev)
	}
	// Without wait the body is the experiment alone and nothing waits.
	var plain map[string]any
	e.mustDo(http.StatusOK, adminToken, "PUT", "/v1/experiments/w", `{"key":"w","variations":["a","b"],"weights":[0,1],"revision":"`+revisionOf(out.Experiment)+`"}`, &plain)
	if plain["key"] != "w" || len(f.waits) != 1 {
		t.Fatalf("a write without wait waited or changed shape: %v", plain)
	}
	var del map[string]json.RawMessage
	e.mustDo(http.StatusOK, adminToken, "DELETE", "/v1/experiments/w?wait=2", "", &del)
	if len(del["rollout"]) == 0 {
		t.Fatalf("a waited delete answers {rollout}, got %v", del)
	}
	if len(f.revs) != 2 || f.revs[1] != 0 {
		t.Fatalf("Wait after a delete was given revisions %v, want 0 (a delete does not return its revision)", f.revs)
	}
	var st map[string]any
	e.mustDo(http.StatusOK, readerToken, "GET", "/v1/rollout", "", &st)
	if st["result"] != "status" {
		t.Fatalf("GET /v1/rollout = %v", st)
	}
	for _, bad := range []string{"?wait=forever", "?wait=2m"} {
		code, _ := e.do(adminToken, "POST", "/v1/experiments"+bad, `{"key":"x","variations":["a","b"]}`)
		if code != http.StatusBadRequest {
			t.Errorf("wait %s: status %d, want 400", bad, code)
		}
	}
	if code, _ := e.do(adminToken, "GET", "/v1/experiments/x", ""); code != http.StatusNotFound {
		t.Errorf("a write refused for its wait was made anyway (GET: %d)", code)
	}
}

func revisionOf(e map[string]any) string {
	s, _ := e["revision"].(string)
	return s
}

func TestWriteWaitsOverGRPC(t *testing.T) {
	f := &fakeRollouts{result: "rejected"}
	e := newEnv(t, nil, admin.WithRollouts(f))
	var header metadata.MD
	_, err := e.client.CreateExperiment(ctx(adminToken), &adminv1.CreateExperimentRequest{
		Experiment: exp("g", "team-a", 0), Wait: durationpb.New(3 * time.Second)}, grpc.Header(&header))
	if err != nil {
		t.Fatal(err)
	}
	if got := header.Get(admin.RolloutResultMetadata); len(got) != 1 || got[0] != "rejected" {
		t.Fatalf("%s = %q", admin.RolloutResultMetadata, got)
	}
	if got := header.Get(admin.RolloutMetadata); len(got) != 1 || !json.Valid([]byte(got[0])) {
		t.Fatalf("%s = %q", admin.RolloutMetadata, got)
	}
	ro, err := e.client.GetRollout(ctx(readerToken), &adminv1.GetRolloutRequest{})
	if err != nil || ro.GetResult() != "status" {
		t.Fatalf("GetRollout = %v, %v", ro, err)
	}
	if _, err := e.client.GetRollout(ctx(""), &adminv1.GetRolloutRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("GetRollout without a token: %v", err)
	}
}

func TestWaitWithoutTracking(t *testing.T) {
	e := newEnv(t, nil)
	code, _ := e.do(adminToken, "POST", "/v1/experiments?wait=1s", `{"key":"n","variations":["a","b"]}`)
	if code != http.StatusConflict {
		t.Fatalf("wait on a server without rollout tracking: %d, want 409 (failed precondition)", code)
	}
	if code, _ := e.do(adminToken, "GET", "/v1/experiments/n", ""); code != http.StatusNotFound {
		t.Fatalf("the write was made although its wait was refused")
	}
}
