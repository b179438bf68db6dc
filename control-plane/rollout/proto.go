package rollout

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// Waited is a waited write's rollout in the admin API's form, with its
// result from err (Result): it counts every proxy and lists those that did
// not apply.
func Waited(ro Rollout, err error) *adminv1.Rollout {
	out := Proto(Rollout{Targets: ro.Targets, Proxies: ro.Unfinished()})
	out.Counts = ro.counts()
	out.Result = Result(err)
	if err != nil {
		out.Error = err.Error()
	}
	return out
}

// Result is a waited write's result given the error of its wait: applied
// (nil), timeout (the wait's context ended), rejected (ErrRejected),
// unserved (ErrUnserved) or error.
func Result(err error) string {
	switch {
	case err == nil:
		return ResultApplied
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return ResultTimeout
	case errors.Is(err, ErrRejected):
		return ResultRejected
	case errors.Is(err, ErrUnserved):
		return ResultUnserved
	}
	return ResultError
}

// Failed is the rollout of a write whose wait could not proceed: result
// error, with err's message.
func Failed(err error) *adminv1.Rollout {
	return &adminv1.Rollout{Result: ResultError, Error: err.Error()}
}

// Snapshot is ro as a status (GET /v1/rollout): every proxy listed and
// counted, result status.
func Snapshot(ro Rollout) *adminv1.Rollout {
	out := Proto(ro)
	out.Result = ResultStatus
	out.Counts = ro.counts()
	return out
}

// counts counts ro's proxies by state.
func (r Rollout) counts() map[string]int32 {
	out := map[string]int32{}
	for _, p := range r.Proxies {
		out[string(p.State)]++
	}
	return out
}

// Proto is ro in the admin API's form, without result or counts.
func Proto(ro Rollout) *adminv1.Rollout {
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
