package server

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/control-plane/xds"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// rollouts adapts the xDS server's rollout tracking to admin.Rollouts when
// allotd runs alone: its own proxies are the whole mesh.
type rollouts struct{ x *xds.Server }

func (r rollouts) Mark() map[string]string { return r.x.Targets() }

func (r rollouts) Wait(ctx context.Context, mark map[string]string) *adminv1.Rollout {
	if err := r.x.Refresh(ctx); err != nil {
		return &adminv1.Rollout{Result: "error", Error: err.Error()}
	}
	return rolloutResult(r.x.WaitFor(ctx, r.x.Targets().Changed(mark)))
}

// rolloutResult is a waited write's rollout with its result: applied,
// timeout, rejected, unserved or error. It counts every proxy and lists
// those that did not apply.
func rolloutResult(ro xds.Rollout, err error) *adminv1.Rollout {
	out := rolloutProto(xds.Rollout{Targets: ro.Targets, Proxies: ro.Unfinished()})
	out.Counts = stateCounts(ro)
	switch {
	case err == nil:
		out.Result = "applied"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		out.Result = "timeout"
	case errors.Is(err, xds.ErrRejected):
		out.Result = "rejected"
	case errors.Is(err, xds.ErrUnserved):
		out.Result = "unserved"
	default:
		out.Result = "error"
	}
	if err != nil {
		out.Error = err.Error()
	}
	return out
}

func (r rollouts) Status() *adminv1.Rollout {
	ro := r.x.Status()
	out := rolloutProto(ro)
	out.Result = "status"
	out.Counts = stateCounts(ro)
	return out
}

// stateCounts counts ro's proxies by state.
func stateCounts(ro xds.Rollout) map[string]int32 {
	out := map[string]int32{}
	for _, p := range ro.Proxies {
		out[string(p.State)]++
	}
	return out
}

func rolloutProto(ro xds.Rollout) *adminv1.Rollout {
	out := &adminv1.Rollout{Targets: map[string]string(ro.Targets)}
	// One allocation for all the messages and one for their times, not
	// four per proxy: a waited write may report 10,000.
	msgs := make([]adminv1.ProxyStatus, len(ro.Proxies))
	times := make([]timestamppb.Timestamp, 0, 3*len(ro.Proxies))
	ts := func(t time.Time) *timestamppb.Timestamp {
		if t.IsZero() {
			return nil
		}
		times = times[:len(times)+1]
		pt := &times[len(times)-1]
		pt.Seconds, pt.Nanos = t.Unix(), int32(t.Nanosecond())
		return pt
	}
	out.Proxies = make([]*adminv1.ProxyStatus, 0, len(ro.Proxies))
	for i, p := range ro.Proxies {
		ps := &msgs[i]
		ps.Replica, ps.NodeId, ps.Cluster, ps.Address, ps.State = p.Replica, p.NodeID, p.Cluster, p.Address, string(p.State)
		ps.TargetVersion, ps.SentVersion, ps.AckedVersion, ps.Pushes = p.Target, p.Sent, p.Acked, int32(p.Pushes)
		ps.ConnectTime, ps.LastSeen, ps.AckedTime = ts(p.ConnectedAt), ts(p.LastSeen), ts(p.AckedAt)
		ps.Artifact, ps.Error = p.Artifact, p.Error
		if p.Rejected != nil {
			ps.RejectedVersion, ps.RejectionError = p.Rejected.Version, p.Rejected.Error
		}
		out.Proxies = append(out.Proxies, ps)
	}
	return out
}
