package outcomes

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/allotmesh/allot/filter/plugin"
)

// ErrNotObserved is returned by Report for a key that is no stored
// experiment with observe: true.
var ErrNotObserved = errors.New("not an observed experiment")

// ErrWindow is returned by Report for a window out of bounds.
var ErrWindow = errors.New("window out of bounds")

// Report is an observed experiment's outcomes, mesh-wide, under its
// current assignment revision.
type Report struct {
	// Experiment is the experiment's key.
	Experiment string `json:"experiment"`
	// Revision is the assignment revision: a digest of the fields that
	// decide assignment (variations, weights, coverage, hashing, seed,
	// condition, namespace, bucket versions…). Figures start over when it
	// changes.
	Revision string `json:"revision"`
	// Since is when allotd first saw the revision.
	Since time.Time `json:"since"`
	// Minutes is the window of Window: the last Minutes minutes (the
	// current, partial minute included), never before Since.
	Minutes int `json:"minutes"`
	// Window has each variation's figures over the window.
	Window []Variation `json:"window"`
	// Total has each variation's figures since the revision.
	Total []Variation `json:"total"`
}

// Variation is one variation's figures.
type Variation struct {
	// Variation is the variation's index.
	Variation int `json:"variation"`
	// Weight is the variation's weight in the definition.
	Weight float64 `json:"weight"`
	// Requests counts the responses of every class (resets included).
	Requests uint64 `json:"requests"`
	// Share is Requests over every variation's requests (0 when none).
	Share float64 `json:"share"`
	// Responses counts the requests by class: 2xx, 3xx, 4xx, 5xx, other, reset.
	Responses map[string]uint64 `json:"responses"`
	// ErrorRate is (5xx + reset) / Requests (0 when none).
	ErrorRate float64 `json:"error_rate"`
	// Timed counts the responses in the latency histogram (every response
	// but resets, as far as the proxies' histograms reached allotd).
	Timed uint64 `json:"timed"`
	// LatencyMS has the p50, p95 and p99 latency in ms, estimated from the
	// summed histogram buckets by linear interpolation within the bucket
	// (absent when no response was timed).
	LatencyMS *Quantiles `json:"latency_ms,omitempty"`
}

// Quantiles are latency quantiles in milliseconds.
type Quantiles struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
}

// Report returns key's outcomes, with a window of the last minutes minutes
// (0: DefaultWindowMinutes; at most MaxWindowMinutes).
func (a *Aggregator) Report(ctx context.Context, key string, minutes int) (*Report, error) {
	if minutes == 0 {
		minutes = DefaultWindowMinutes
	}
	if minutes < 1 || minutes > MaxWindowMinutes {
		return nil, fmt.Errorf("minutes: %d, want 1 to %d: %w", minutes, MaxWindowMinutes, ErrWindow)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.refresh(ctx); err != nil {
		return nil, err
	}
	e := a.exps[key]
	if e == nil {
		return nil, fmt.Errorf("experiment %q: %w", key, ErrNotObserved)
	}
	now := a.now().Unix() / 60
	window := make([]tally, len(e.total))
	for _, m := range e.minutes {
		if m.vars != nil && m.stamp > now-int64(minutes) && m.stamp <= now {
			for v := range m.vars {
				window[v].add(m.vars[v])
			}
		}
	}
	return &Report{Experiment: key, Revision: e.revision, Since: e.since, Minutes: minutes,
		Window: variations(window, e.weights), Total: variations(e.total, e.weights)}, nil
}

func (t *tally) add(o tally) {
	for c := range t.counts {
		t.counts[c] += o.counts[c]
	}
	if t.bounds == nil {
		t.bounds = o.bounds
	}
	grow(t, len(o.buckets))
	for i, n := range o.buckets {
		t.buckets[i] += n
	}
}

func variations(ts []tally, weights []float64) []Variation {
	var all uint64
	for _, t := range ts {
		all += t.requests()
	}
	out := make([]Variation, len(ts))
	for v, t := range ts {
		r := t.requests()
		out[v] = Variation{Variation: v, Weight: weights[v], Requests: r, Responses: map[string]uint64{}}
		for c, n := range t.counts {
			out[v].Responses[plugin.ClassName(c)] = n
		}
		if all > 0 {
			out[v].Share = float64(r) / float64(all)
		}
		if r > 0 {
			out[v].ErrorRate = float64(t.counts[plugin.Class5xx]+t.counts[plugin.ClassReset]) / float64(r)
		}
		for _, n := range t.buckets {
			out[v].Timed += n
		}
		if q, ok := t.quantiles(); ok {
			out[v].LatencyMS = &q
		}
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

func (t tally) quantiles() (Quantiles, bool) {
	var n uint64
	for _, b := range t.buckets {
		n += b
	}
	if n == 0 {
		return Quantiles{}, false
	}
	return Quantiles{P50: t.quantile(0.5, n), P95: t.quantile(0.95, n), P99: t.quantile(0.99, n)}, true
}

// quantile interpolates linearly within the bucket holding rank q×n; a
// rank above the last bound is the last bound.
func (t tally) quantile(q float64, n uint64) float64 {
	rank := q * float64(n)
	var below uint64
	for i, b := range t.buckets {
		if b > 0 && float64(below+b) >= rank {
			if i >= len(t.bounds) {
				if len(t.bounds) == 0 {
					return math.NaN()
				}
				return t.bounds[len(t.bounds)-1]
			}
			lo := 0.0
			if i > 0 {
				lo = t.bounds[i-1]
			}
			return lo + (t.bounds[i]-lo)*(rank-float64(below))/float64(b)
		}
		below += b
	}
	return 0
}
