package plugin

import "testing"

// What the external tests (package plugin_test, which drive the plugin
// through filter/proxywasm and so cannot be in package plugin) read or
// break of its internals.

// MaxSingleWrites is maxSingleWrites.
const MaxSingleWrites = maxSingleWrites

// Counted is how many requests root id counted as evaluated or failed
// open: each request must add exactly one.
func (p *Plugin) Counted(id uint32) int64 {
	s := &p.roots[id].stats
	return s.evaluated + s.failOpen
}

// Hits is root id's count of cache hits since its last flush.
func (p *Plugin) Hits(id uint32) int64 { return p.roots[id].stats.hits }

// Misses is root id's count of cache misses since its last flush.
func (p *Plugin) Misses(id uint32) int64 { return p.roots[id].stats.misses }

// CheckCache checks root id's cache (checkCache) and returns its bytes
// and entries.
func (p *Plugin) CheckCache(t *testing.T, id uint32) (bytes, n int) {
	t.Helper()
	c := p.roots[id].cache
	checkCache(t, c)
	return c.bytes(), c.n
}

// SetConfig makes cfg root id's configuration as the benchmarks set it:
// its stats defined, nothing else Install does, the root's cache kept or
// (cache) a new one of cfg's size.
func (p *Plugin) SetConfig(id uint32, cfg *Config, cache bool) {
	r := p.roots[id]
	r.cfg = cfg
	if cache {
		r.cache = newCache(cfg.CacheSize, cfg.CacheMaxBytes)
	}
	r.stats.define(p.host, cfg, true)
}

// Sabotage breaks one stage of root id's request path (a copy of its
// configuration, so that nothing shared is broken), so that it panics.
func (p *Plugin) Sabotage(id uint32, stage string) {
	r := p.roots[id]
	cfg := *r.cfg
	cfg.headers = append([]headerAttr(nil), cfg.headers...)
	r.cfg = &cfg
	switch stage {
	case "attribute extraction":
		for i := range r.cfg.headers {
			r.cfg.headers[i].idx = []int{1 << 20}
		}
	case "engine":
		r.cfg.set, r.cache = nil, nil
	case "dictionary":
		r.cfg.dictValues = r.cfg.dictValues[:1]
	case "header values":
		r.cfg.values = r.cfg.values[:1]
	case "counters":
		r.stats.variations = r.stats.variations[:1]
	default:
		panic("no stage " + stage)
	}
}

// Stages are what Sabotage breaks.
var Stages = []string{"attribute extraction", "engine", "dictionary", "header values", "counters"}

// KnownHeaders are the header names root id's configuration knows: the
// dictionary, the version and each experiment's.
func (p *Plugin) KnownHeaders(id uint32) []string {
	cfg := p.roots[id].cfg
	return append([]string{cfg.DictionaryHeader, cfg.VersionHeader}, cfg.headerNames...)
}

// Config is root id's configuration.
func (p *Plugin) Config(id uint32) *Config { return p.roots[id].cfg }

// WarmKept reports whether the plugin holds a warm result, and whether it
// is an assigned request's (ok, with its root).
func (p *Plugin) WarmKept() (kept, ok bool) {
	return p.warm != (warmResult{}), p.warm.ok && p.warm.r != nil
}
