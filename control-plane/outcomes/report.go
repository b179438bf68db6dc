package outcomes

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/allotmesh/allot/filter/wire"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// ErrNotObserved is returned by Report for a key that is no stored
// experiment with observe: true.
var ErrNotObserved = errors.New("not an observed experiment")

// ErrWindow is returned by Report for a window out of bounds.
var ErrWindow = errors.New("window out of bounds")

// Report returns key's outcomes (the admin API's allot.admin.v1.Outcomes),
// with a window of the last minutes minutes (0: DefaultWindowMinutes; at
// most MaxWindowMinutes): the window's sum and its series minute by
// minute. It is built under a.mu: the largest (60 minutes × 64
// variations) takes about 0.5 ms in all, the store's revision read
// included (BenchmarkReportSeries).
func (a *Aggregator) Report(ctx context.Context, key string, minutes int) (*adminv1.Outcomes, error) {
	if minutes == 0 {
		minutes = DefaultWindowMinutes
	}
	if minutes < 1 || minutes > MaxWindowMinutes {
		return nil, fmt.Errorf("minutes: %d, want 1 to %d: %w", minutes, MaxWindowMinutes, ErrWindow)
	}
	// A report re-reads the experiments if the store's revision moved
	// (not waiting for its watch), unless another caller is reading them.
	if err := a.maybeRefresh(ctx, true); err != nil {
		return nil, err
	}
	a.mu.Lock()
	observed := a.exps[key] != nil
	a.mu.Unlock()
	if !observed {
		return nil, fmt.Errorf("experiment %q: %w", key, ErrNotObserved)
	}
	// The other replicas' figures are read outside a.mu; this replica's
	// own come from memory, published or not (merged).
	at := a.now()
	now := at.Unix() / 60
	sh, err := a.read(ctx, key, now-int64(minutes)+1, now, at)
	if err != nil {
		return nil, fmt.Errorf("outcomes of %q: %w", key, err)
	}
	if sh.tidied != nil {
		a.log.Warn("outcomes: shared records not tidied", "key", key, "error", sh.tidied)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	e := a.exps[key]
	if e == nil {
		return nil, fmt.Errorf("experiment %q: %w", key, ErrNotObserved)
	}
	if a.shared != nil {
		e = e.merged(a.shared.Replica(), sh, now-int64(minutes)+1, now)
	}
	first := max(now-int64(minutes)+1, e.since.Unix()/60)
	window := make([]tally, len(e.total))
	series := make([]*adminv1.OutcomesMinute, 0, max(now-first+1, 0)) // none if the clock stepped back before since
	for stamp := first; stamp <= now; stamp++ {
		m := e.minutes[stamp%int64(len(e.minutes))]
		vars := make([]*adminv1.MinuteOutcomes, len(e.total))
		for v := range vars {
			var t tally
			if m.stamp == stamp && m.vars != nil {
				t = m.vars[v]
				window[v].add(t)
			}
			vars[v] = minuteOutcomes(v, t)
		}
		series = append(series, &adminv1.OutcomesMinute{Start: timestamppb.New(time.Unix(stamp*60, 0)), Variations: vars})
	}
	return &adminv1.Outcomes{Experiment: key, Revision: e.revision, Since: timestamppb.New(e.since), Minutes: int32(minutes),
		Window: variations(window, e.weights), Total: variations(e.total, e.weights), Series: series,
		LatencyBoundsMs: slices.Clone(wire.LatencyBounds), Guardrails: e.check(), Earlier: a.earlierOutcomes(key)}, nil
}

// earlierOutcomes are the totals of key's earlier revisions this replica
// keeps, newest first; a.mu must be held.
func (a *Aggregator) earlierOutcomes(key string) []*adminv1.RevisionOutcomes {
	var out []*adminv1.RevisionOutcomes
	for _, e := range a.earlier[key] {
		out = append(out, &adminv1.RevisionOutcomes{Revision: e.revision, Since: timestamppb.New(e.since),
			Until: timestamppb.New(e.until), Total: variations(e.total, e.weights), Guardrails: e.check()})
	}
	return out
}

// minuteOutcomes is variation v's figures of one minute's tally t.
func minuteOutcomes(v int, t tally) *adminv1.MinuteOutcomes {
	r := t.requests()
	return &adminv1.MinuteOutcomes{Variation: int32(v), Requests: int64(r), ErrorRate: t.errorRate(), LatencyMs: t.quantiles()}
}

func (t *tally) add(o tally) {
	for c := range t.counts {
		t.counts[c] += o.counts[c]
	}
	grow(t, len(o.buckets))
	for i, n := range o.buckets {
		t.buckets[i] += n
	}
}

func variations(ts []tally, weights []float64) []*adminv1.VariationOutcomes {
	var all uint64
	for _, t := range ts {
		all += t.requests()
	}
	out := make([]*adminv1.VariationOutcomes, len(ts))
	for v, t := range ts {
		r := t.requests()
		o := &adminv1.VariationOutcomes{Variation: int32(v), Weight: weights[v], Requests: int64(r), Responses: map[string]int64{}}
		for c, n := range t.counts {
			o.Responses[wire.ClassName(c)] = int64(n)
		}
		if all > 0 {
			o.Share = float64(r) / float64(all)
		}
		o.ErrorRate = t.errorRate()
		o.Aborted = int64(t.counts[wire.ClassAborted])
		for _, n := range t.buckets {
			o.Timed += int64(n)
		}
		if o.Timed > 0 {
			o.LatencyBuckets = make([]int64, len(wire.LatencyBounds)+1)
			for i, n := range t.buckets {
				o.LatencyBuckets[i] = int64(n)
			}
		}
		o.LatencyMs = t.quantiles()
		out[v] = o
	}
	return out
}

func (t tally) requests() uint64 {
	var n uint64
	for _, c := range t.counts {
		n += c
	}
	return n
}

// responses counts t's requests that got a response: all but the aborted.
func (t tally) responses() uint64 { return t.requests() - t.counts[wire.ClassAborted] }

// errorRate is t's 5xx / responses; 0 without responses.
func (t tally) errorRate() float64 {
	r := t.responses()
	if r == 0 {
		return 0
	}
	return float64(t.counts[wire.Class5xx]) / float64(r)
}

// quantiles are the latency quantiles of t's buckets; nil when empty.
func (t tally) quantiles() *adminv1.LatencyQuantiles {
	var n uint64
	for _, b := range t.buckets {
		n += b
	}
	if n == 0 {
		return nil
	}
	return &adminv1.LatencyQuantiles{P50: t.quantile(0.5, n), P95: t.quantile(0.95, n), P99: t.quantile(0.99, n)}
}

// quantile interpolates linearly within the bucket holding rank q×n; a
// rank above the last bound is the last bound.
func (t tally) quantile(q float64, n uint64) float64 {
	rank := q * float64(n)
	var below uint64
	for i, b := range t.buckets {
		if b > 0 && float64(below+b) >= rank {
			if i >= len(wire.LatencyBounds) {
				return wire.LatencyBounds[len(wire.LatencyBounds)-1]
			}
			lo := 0.0
			if i > 0 {
				lo = wire.LatencyBounds[i-1]
			}
			return lo + (wire.LatencyBounds[i]-lo)*(rank-float64(below))/float64(b)
		}
		below += b
	}
	return 0
}
