package plugin

import "github.com/allotmesh/allot/filter/abi"

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

// WarmPlan is how lookup's key is made for a configuration whose every
// attribute is read from a request header or is constant: Slots values in
// order, each filled by the first non-empty value of its headers; a slot
// no header fills is empty (node.* attributes, which the native module
// never answers, and unmapped ones). Prefix, Dictionary and Version are
// the names the filter owns: a request that carries one goes to Go.
type WarmPlan struct {
	Slots                       int
	Headers                     []WarmHeader
	Prefix, Dictionary, Version string
	// MaxEntries and MaxBytes are the cache's bounds (cacheSize,
	// cacheMaxBytes).
	MaxEntries, MaxBytes int
}

// WarmPlan returns the configuration's plan, and false when the warm path
// cannot serve it: a sticky cookie (every request verifies it), an
// observed experiment (its outcome ids go into the stream's state),
// attributes read from cookies, the query string, the URL path or
// properties, or a cache that is off or has no byte bound.
func (c *Config) WarmPlan() (WarmPlan, bool) {
	if c.jar != nil || c.Observed() || len(c.cookies) > 0 || len(c.queries) > 0 || len(c.urlPath) > 0 ||
		len(c.props) > 0 || c.CacheSize <= 0 || c.CacheMaxBytes <= 0 {
		return WarmPlan{}, false
	}
	w := WarmPlan{Slots: c.nvals, Prefix: c.HeaderPrefix, Dictionary: c.DictionaryHeader, Version: c.VersionHeader,
		MaxEntries: c.CacheSize, MaxBytes: c.CacheMaxBytes}
	for _, h := range c.headers {
		for _, i := range h.idx {
			w.Headers = append(w.Headers, WarmHeader{Name: h.name, Slot: i})
		}
	}
	return w, true
}

// warmResult is what the last request's warm hand-off needs: set at the
// end of an assignment that succeeded, cleared by every request and by
// failOpen.
type warmResult struct {
	ok   bool // the request was assigned and its result may be cached
	r    *root
	e    entry
	dict string
}

// WarmResult is what the last request (RequestHeaders) did, for the warm
// path to cache: its key (lookup's), its exposure record (empty when none
// was written) and the positions, among the configuration's counters
// (MetricNames), of what a hit counts: requests_evaluated, cache_hits and
// each assigned variation. ok is false when the request failed open, left
// a sticky cookie or must not be cached, or the counters are not all
// defined. Everything is valid until the next request.
func (p *Plugin) WarmResult() (key []byte, exposure []byte, stats []uint32, ok bool) {
	w := &p.warm
	if !w.ok || w.r.stats.defineFail {
		return nil, nil, nil, false
	}
	s := &w.r.stats
	p.warmStats = append(p.warmStats[:0], s.ids[0], s.ids[1])
	for j := range w.e.assignments() {
		i, v := w.e.at(j)
		p.warmStats = append(p.warmStats, s.varIDs[i][v])
	}
	if w.r.cfg.ExposureState && w.dict != "" {
		exposure = abi.Bytes(w.dict)
	}
	return p.key, exposure, p.warmStats, true
}
