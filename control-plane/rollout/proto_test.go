package rollout

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// TestResult: a waited write's result follows its wait's error, a wait
// that ran out first (its error joins the proxies' too), then a
// rejection, then an unserved proxy.
func TestResult(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"every proxy applied", nil, ResultApplied},
		{"the wait ran out", fmt.Errorf("wait for rollout: %w", errors.Join(context.DeadlineExceeded, errors.New("1 of 2 proxies pending"))), ResultTimeout},
		{"the wait ran out with a rejection", errors.Join(context.DeadlineExceeded, ErrRejected), ResultTimeout},
		{"the request was cancelled", context.Canceled, ResultTimeout},
		{"rejected and unserved", errors.Join(fmt.Errorf("%w by 1 of 3 proxies", ErrRejected), ErrUnserved), ResultRejected},
		{"unserved", fmt.Errorf("%w for 1 of 3 proxies", ErrUnserved), ResultUnserved},
		{"anything else", errors.New("etcdserver: request timed out"), ResultError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Result(tt.err); got != tt.want {
				t.Errorf("Result(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

// TestWaited: a waited write's rollout counts every proxy by state but
// lists only those that did not apply, with the wait's error.
func TestWaited(t *testing.T) {
	ro := Rollout{Targets: Targets{"web": "v2"}, Proxies: []ProxyStatus{
		{NodeID: "a", Cluster: "web", Target: "v2", State: StateApplied},
		{NodeID: "b", Cluster: "web", Target: "v2", State: StateRejected, Rejected: &Rejection{Version: "v2", Error: "bad"}},
		{NodeID: "c", Cluster: "web", Target: "v2", State: StateApplied},
	}}
	out := Waited(ro, ro.Err())
	if out.GetResult() != ResultRejected || out.GetError() == "" {
		t.Errorf("result %q, error %q; want %q with the proxies named", out.GetResult(), out.GetError(), ResultRejected)
	}
	if c := out.GetCounts(); len(c) != 2 || c[string(StateApplied)] != 2 || c[string(StateRejected)] != 1 {
		t.Errorf("counts %v, want 2 applied, 1 rejected", c)
	}
	if ps := out.GetProxies(); len(ps) != 1 || ps[0].GetNodeId() != "b" || ps[0].GetRejectionError() != "bad" {
		t.Errorf("proxies %v, want b alone with its rejection", ps)
	}
	if s := Snapshot(ro); s.GetResult() != ResultStatus || len(s.GetProxies()) != 3 {
		t.Errorf("snapshot: result %q, %d proxies; want %q, 3", s.GetResult(), len(s.GetProxies()), ResultStatus)
	}
}
