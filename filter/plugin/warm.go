package plugin

import (
	"errors"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/wire"
)

// The native module's warm path (docs/perf/native-warm-path.md) serves a
// request whose assignment is cached without entering Go: C builds the
// request's cache key as lookup does, from a plan Go hands it once per
// configuration (WarmPlan), and after each request Go served it caches
// what Go did (WarmResult). Nothing here runs under Wasm.

// WarmHeader is a request header whose first non-empty value fills value
// slot Slot of the cache key.
type WarmHeader struct {
	Name string
	Slot int
}

// WarmExperiment is what a warm hit renders for experiment i: its header,
// and each variation's header value, dictionary member (`, key="value"`)
// and counter position in MetricNames; FirstSlot is the outcome slot
// (Outcomes) of its variation 0 when it observes its outcomes, else -1.
type WarmExperiment struct {
	Header    string
	Values    []string
	Members   []string
	Stats     []uint32
	FirstSlot int32
}

// WarmPlan is how lookup's key is made for a configuration whose every
// attribute is read from a request header: Slots values in order, each
// filled by the first non-empty value of its headers; a slot no header
// fills (an attribute no source maps) is empty. Prefix, DictionaryHeader and
// VersionHeader are the names the filter owns: a request that carries one
// goes to Go.
type WarmPlan struct {
	Slots                                   int
	Headers                                 []WarmHeader
	Prefix, DictionaryHeader, VersionHeader string
	// MaxEntries and MaxBytes are the cache's bounds (cacheSize,
	// cacheMaxBytes).
	MaxEntries, MaxBytes int

	// How a hit renders an assignment, as addBatch adds it: each assigned
	// experiment's header when PerExperiment, the dictionary, the version
	// header when Version is not empty, the exposure record when
	// Exposure; and what it counts, by position in MetricNames.
	Experiments             []WarmExperiment
	PerExperiment, Exposure bool
	Version                 string
	Evaluated, Hits         uint32
	// Unrecorded is the position of wire.MetricOutcomesUnrecorded, when an
	// experiment is observed (HasUnrecorded).
	Unrecorded    uint32
	HasUnrecorded bool
}

// WarmPlan returns the configuration's plan, or an error saying why the
// warm path cannot serve it: a sticky cookie (every request verifies it),
// attributes read from cookies, the query string, the URL path or
// properties, node.* attributes (Go resolves them at Install; C has no
// node to read them from), a cache that is off or has no byte bound, or
// a counter the plan needs missing from MetricNames.
func (c *Config) WarmPlan() (WarmPlan, error) {
	return c.warmPlan(c.MetricNames())
}

// warmPlan is WarmPlan with the counter names names, MetricNames' in
// order (tests drop one).
func (c *Config) warmPlan(names []string) (WarmPlan, error) {
	switch {
	case c.jar != nil:
		return WarmPlan{}, errors.New("stickyCookie: every request verifies the cookie")
	case len(c.cookies) > 0 || len(c.queries) > 0 || len(c.urlPath) > 0 || len(c.props) > 0:
		return WarmPlan{}, errors.New("attributes: read from cookies, the query string, the URL path or properties")
	case len(c.consts) > 0:
		return WarmPlan{}, errors.New("attributes: node.* attributes are resolved by Go only")
	case c.CacheSize <= 0:
		return WarmPlan{}, errors.New("cacheSize: " + strconv.Itoa(c.CacheSize) + ", the cache is off")
	case c.CacheMaxBytes <= 0:
		return WarmPlan{}, errors.New("cacheMaxBytes: " + strconv.Itoa(c.CacheMaxBytes) + ", no byte bound")
	}
	w := WarmPlan{Slots: c.nvals, Prefix: c.HeaderPrefix, DictionaryHeader: c.DictionaryHeader,
		VersionHeader: c.VersionHeader, MaxEntries: c.CacheSize, MaxBytes: c.CacheMaxBytes,
		PerExperiment: c.PerExperimentHeaders, Exposure: c.ExposureState, Version: c.Version}
	for _, h := range c.headers {
		for _, i := range h.idx {
			w.Headers = append(w.Headers, WarmHeader{Name: h.name, Slot: i})
		}
	}
	pos := make(map[string]uint32, len(names))
	for i, name := range names {
		pos[name] = uint32(i)
	}
	var missing []string // quoted
	at := func(name string) uint32 {
		v, ok := pos[name]
		if !ok {
			missing = append(missing, strconv.Quote(name))
		}
		return v
	}
	w.Evaluated, w.Hits = at(wire.MetricEvaluated), at(wire.MetricCacheHits)
	if w.HasUnrecorded = c.Observed(); w.HasUnrecorded {
		w.Unrecorded = at(wire.MetricOutcomesUnrecorded)
	}
	w.Experiments = make([]WarmExperiment, c.Len())
	for i, key := range c.keys {
		x := WarmExperiment{Header: c.headerNames[i], Values: c.values[i], Members: c.dictValues[i], FirstSlot: c.outBase[i]}
		for v := range c.values[i] {
			x.Stats = append(x.Stats, at(wire.VariationMetric(key, v)))
		}
		w.Experiments[i] = x
	}
	if len(missing) > 0 {
		return WarmPlan{}, errors.New("counters: " + strings.Join(missing, ", ") + " not among the configuration's metrics")
	}
	return w, nil
}

// warmResult is what the last request's warm hand-off needs: set at the
// end of an assignment that succeeded, cleared by every request and by
// failOpen.
type warmResult struct {
	ok   bool // the request was assigned and its result may be cached
	seen bool // the result came from the plugin's own cache: a unit seen before
	r    *Root
	e    entry
}

// KeepWarmResults makes the plugin keep each request's result for
// WarmResult. Only the native module with its warm path on asks: without
// it (the Wasm module, the native module with the path off) the plugin
// keeps nothing for the warm path and WarmResult is never ok.
func (p *Plugin) KeepWarmResults() { p.keepWarm = true }

// WarmResult is what the last request (RequestHeaders) got, for the warm
// path to cache: its key (lookup's) and its assignments, each experiment
// << 16 | variation, in the dictionary's order (a WarmPlan's hit renders
// and counts them). ok is false when the request failed open, left a
// sticky cookie or must not be cached, the counters are not all defined,
// the result was already taken, or the host did not ask for results
// (KeepWarmResults). Both are valid until the next request. seen is
// whether the plugin's own cache held the result (the unit was seen
// before, as opposed to computed for a new one). It takes the result: the
// plugin then holds nothing of the request's.
func (p *Plugin) WarmResult() (key []byte, items []uint32, seen, ok bool) {
	w := p.warm
	p.warm = warmResult{}
	if !w.ok || w.r.stats.defineFail {
		return nil, nil, false, false
	}
	p.warmItems = p.warmItems[:0]
	for j := range w.e.assignments() {
		i, v := w.e.at(j)
		p.warmItems = append(p.warmItems, uint32(i)<<16|uint32(v))
	}
	return p.key, p.warmItems, w.seen, true
}

// OwnsHeader reports whether name is a request header the filter owns (an
// assignment header a client forged: the request path removes it, and the
// native warm path sends a request that carries one to Go).
func (c *Config) OwnsHeader(name string) bool { return c.isAssignmentHeader(name) }
