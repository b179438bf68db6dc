// Package plugin is the Allot filter's core, the same in both artifacts:
// it decodes and installs a configuration (Configure, Install), serves a
// request (Request: attribute extraction, the per-worker
// cache of computed assignments, the assignment headers written and forged
// ones removed, sticky cookies, fail-open) and keeps the counters and
// outcome stats a host flushes on its tick. It holds no business rules:
// assignment is the engine's.
//
// It talks to the proxy only through Host (host.go), which names what the
// filter needs, and knows no ABI: it keeps root (configuration) ids but no
// stream ids. Two adapters implement Host and drive it: filter/proxywasm
// (the proxy-wasm ABI, whose Handler maps stream contexts to roots and
// keeps a stream's cookie and observation for its response) and
// filter/nativemod (Envoy's dynamic modules). Every behaviour is tested
// natively through the proxy-wasm adapter against the fake host
// abi/fakehost, whose failure hook breaks each host call. It imports
// neither ABI (filter/abi, filter/dynmod), gRPC, net/http nor the control
// plane; wire names come from filter/wire.
package plugin

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/cookie"
	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/internal/panics"
	"github.com/allotmesh/allot/filter/wire"
)

// maxSingleWrites is the most header changes (forged assignment headers
// removed plus headers added) the filter makes with one host call each
// (RemoveRequestHeader, AddRequestHeader); more are written with one call
// (HeaderRewriter: under Wasm, one proxy_set_header_map_pairs, which makes
// Envoy rebuild the whole map; HeaderBatcher: the native module's).
// Measured in Envoy 1.40 from the minimal filter, interleaved rounds
// (bench/README.md): single adds were cheaper than one rebuild at 17
// headers (by 5.3 µs, 95% interval 3.4–9.7) and at 40 (1.8 µs, 0.8–3.9),
// the rebuild cheaper at 100 (by 13 µs) and 300 (38 µs).
const maxSingleWrites = 40

// TickMillis is how often counters accumulated in memory are flushed to
// Envoy stats: one host call per changed counter per tick instead of one per
// experiment per request.
const TickMillis = 1000

// Plugin is the filter's core for one Wasm VM or one native worker (one
// Envoy worker thread), so it needs no locks.
type Plugin struct {
	host Host
	// batcher is host, when it adds several headers with one call: the
	// plugin then adds its headers in one batch, however many.
	batcher HeaderBatcher
	// rewriter is host, when it replaces the header map with one call.
	rewriter HeaderRewriter
	// roots are the plugin instances in this VM. Envoy keeps the old root
	// serving its in-flight streams while a new configuration starts in a
	// new root, so each stream remembers the root it was created under
	// (the adapter does: Root, Request).
	roots map[uint32]*Root

	// Per-request scratch space, reused across requests.
	vals    []string
	key     []byte
	tkey    []byte
	dict    []byte
	data    []byte
	rewrite [][2]string // setMap's new map
	strip   []string
	attrs   engine.Attributes
	scratch []int32 // variation per experiment, -1: not in
	changes []engine.StickyChange
	// setCookie is the request's Set-Cookie for its response, empty if
	// none: the unit's new sticky cookie.
	setCookie []byte
	// observed are the outcome slots the request assigned (observed
	// experiments' variations), which the host keeps for the response
	// (Observe, or itself when it records outcomes: hostOutcomes).
	observed     []int32
	hostOutcomes bool
	// keepWarm is whether the host asked for warm results
	// (KeepWarmResults); warm is the last request's result for the native
	// warm path (WarmResult), kept only then; warmKeep whether lookup's
	// result may be cached, warmSeen whether it came from the cache,
	// warmItems WarmResult's scratch.
	keepWarm  bool
	warm      warmResult
	warmKeep  bool
	warmSeen  bool
	warmItems []uint32

	// of is the scratch of the OFREP request in hand (ofrep.go).
	of ofrepState
}

// Root is one plugin instance: its configuration, cache and counters.
type Root struct {
	cfg   *Config
	cache *cache
	// targeting holds the condition outcomes for each combination of the
	// condition attributes' values seen (at most maxTargeting): a cache
	// miss for a new unit then only hashes (engine.AssignStrings).
	targeting map[string]engine.Outcomes
	consts    []string // values of node.* attributes, by attribute index
	stats     stats
}

// New returns a Plugin that talks to host: one that is also a
// HeaderBatcher batches its header writes, a HeaderRewriter rewrites the
// map beyond maxSingleWrites changes, an OutcomeRecorder keeps outcomes.
func New(host Host) *Plugin {
	b, _ := host.(HeaderBatcher)
	rw, _ := host.(HeaderRewriter)
	o, _ := host.(OutcomeRecorder)
	return &Plugin{
		host:         host,
		batcher:      b,
		rewriter:     rw,
		roots:        map[uint32]*Root{},
		attrs:        engine.Attributes{},
		hostOutcomes: o != nil && o.RecordsOutcomes(),
	}
}

// NewRoot starts root id, unconfigured (proxy-wasm's root context). A
// root the host never starts is started by Install.
func (p *Plugin) NewRoot(id uint32) { p.roots[id] = &Root{} }

// Root is root id (nil if none): what a host that keeps stream contexts
// (proxy-wasm) remembers for each stream and passes to Request.
func (p *Plugin) Root(id uint32) *Root { return p.roots[id] }

// Configure reads root rootID's configuration (size bytes: Host.Configuration),
// decodes and compiles it once, resolves per-configuration attributes, defines the
// metrics and starts the flush tick. A configuration it cannot accept is
// logged at critical level and refused, so Envoy rejects it and keeps the
// previous one.
func (p *Plugin) Configure(rootID uint32, size int) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			p.host.Log(wire.LogCritical, "allot: configuration rejected: panic: "+panics.Message(v))
			ok = false
		}
	}()
	var data []byte
	if size > 0 {
		b, err := p.host.Configuration(size)
		if err != nil {
			p.host.Log(wire.LogCritical, "allot: read plugin configuration: "+err.Error())
			return false
		}
		data = b
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		p.host.Log(wire.LogCritical, "allot: configuration rejected: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		return false
	}
	p.Install(rootID, cfg)
	return true
}

// Install makes cfg, compiled already, root rootID's configuration: it
// resolves the per-configuration attributes, defines the metrics and
// starts the flush tick. Configure calls it once it has parsed its own
// configuration; a host that parses a configuration once for many plugins
// (the native module, which serves every worker from one process) calls
// it on each, sharing cfg: nothing on the request path writes to a Config.
func (p *Plugin) Install(rootID uint32, cfg *Config) {
	r := p.roots[rootID]
	if r == nil {
		r = &Root{}
		p.roots[rootID] = r
	}
	r.flush(p.host)       // counts of a previous configuration go to its own metrics
	p.warm = warmResult{} // nothing of a previous configuration is kept
	r.cfg = cfg
	r.cache, r.targeting = nil, map[string]engine.Outcomes{}
	if cfg.CacheSize > 0 {
		r.cache = newCache(cfg.CacheSize, cfg.CacheMaxBytes)
	}
	r.consts = make([]string, len(cfg.attrs))
	for _, i := range cfg.consts {
		if v, err := p.host.Property(&cfg.attrs[i].prop); err == nil {
			r.consts[i] = string(v)
		}
	}
	r.stats.define(p.host, cfg, !p.hostOutcomes)
	if err := p.host.StartTicks(TickMillis); err != nil {
		p.host.Log(wire.LogWarn, "allot: metrics tick unavailable: "+err.Error())
	}
	p.host.Log(wire.LogInfo, "allot: configured version "+strconv.Quote(cfg.Version)+" with "+strconv.Itoa(cfg.Len())+" experiments")
}

// SetResponseCookie adds v, a Set-Cookie value a request left
// (SetCookie), to the response: for a host that keeps it with the stream
// until the response headers (proxy-wasm). A failure to add the header
// costs the unit only its cookie.
func (p *Plugin) SetResponseCookie(v string) {
	if err := guard(func() error { return p.host.AddResponseHeader(wire.SetCookieHeader, v) }); err != nil {
		defer func() { recover() }()
		p.host.Log(wire.LogDebug, "allot: sticky cookie not set: "+err.Error())
	}
}

// SetCookie is the Set-Cookie value the last request left for its
// response ("" if none), for a host that keeps it with the stream itself
// (the native module) or keeps it for the stream's response
// (SetResponseCookie). It is valid until the next request.
func (p *Plugin) SetCookie() string { return stringView(p.setCookie) }

// Request is the request path for a stream of root r (nil: none). The
// stream always continues: on any internal error or panic the request
// passes through without assignment headers, forged ones removed
// (failOpen), and is counted once. A request that changed its unit's
// sticky assignments leaves their cookie (SetCookie) for the stream's
// response, one an observed experiment assigned its outcome slots
// (Observed). It returns what the adapter does with the stream next
// (Verdict): Continue for every request it assigns. A request the
// configuration answers itself (OFREP, ofrep.go) is recognized first and
// answered (Answered) or held for its body (AwaitBody): nothing is
// assigned to it, and nothing removed (an adapter that lets its headers go
// on before the body removes forged ones: ReleaseHeaders).
func (p *Plugin) Request(r *Root) (verdict Verdict) {
	p.setCookie = p.setCookie[:0]
	p.observed = p.observed[:0]
	if p.keepWarm {
		p.warm = warmResult{}
	}
	if r == nil || r.cfg == nil {
		return Continue
	}
	defer func() {
		if v := recover(); v != nil {
			if p.of.answering {
				verdict = p.answerPanic(r, v)
				return
			}
			p.failOpen(r, nil, v)
		}
	}()
	if err := p.assign(r); err != nil {
		if err == errAnswer {
			verdict = p.ofrepRequest(r, p.of.pairs)
			p.of.answering = false
			return verdict
		}
		p.failOpen(r, err, nil)
	}
	return Continue
}

// assign reads the request's headers once, removes forged assignment
// headers before any step that parses input or can fail, then reads the
// remaining attributes, finds or computes the assignment and adds its
// headers. Each of the two writes — the forged names removed, the headers
// added — takes one host call per header when there are at most
// maxSingleWrites, else one call for all (HeaderRewriter: the map
// rewritten; HeaderBatcher: the names removed); a request without forged
// headers (the common case) makes no call for them. Over a host that
// batches (HeaderBatcher: the native module's) the headers are added with
// one call, however many.
func (p *Plugin) assign(r *Root) error {
	cfg := r.cfg
	p.strip = p.strip[:0] // before the read: failOpen must not see a previous request's names
	pairs, err := p.host.RequestHeaders()
	if err != nil {
		return err
	}
	if cfg.ofrep != nil && p.isOFREP(pairs) {
		p.of.pairs = pairs
		return errAnswer
	}
	// One pass finds the forged names and copies the header attributes'
	// values (a copy cannot fail); the forged headers are removed before
	// anything that parses input or can fail does.
	vals := p.values(cfg.nvals)
	for _, kv := range pairs {
		name := kv[0]
		if cfg.isAssignmentHeader(name) {
			p.strip = appendOnce(p.strip, name)
			continue
		}
		for _, i := range cfg.attrsOfHeader(name) {
			if vals[i] == "" {
				vals[i] = kv[1]
			}
		}
	}
	if len(p.strip) > 0 {
		if err := p.removeForged(cfg, pairs); err != nil {
			return err
		}
	}
	if len(cfg.cookies) > 0 || len(cfg.queries) > 0 || len(cfg.urlPath) > 0 {
		p.parsedAttrs(cfg, pairs, vals)
	}
	if len(cfg.props) > 0 || len(cfg.consts) > 0 {
		p.otherAttrs(r, vals)
	}

	e := p.lookup(r, vals)
	dict := p.dictionary(cfg, e)
	adds := 0
	if cfg.PerExperimentHeaders {
		adds = e.assignments()
	}
	if len(dict) > 0 {
		adds++
	}
	if cfg.Version != "" {
		adds++
	}
	switch {
	case p.batcher != nil:
		err = p.addBatch(cfg, e, dict)
	case adds > maxSingleWrites && p.rewriter != nil:
		err = p.setMap(cfg, pairs, true, e, dict)
	default:
		err = p.addAll(cfg, e, dict)
	}
	if err != nil {
		return err
	}
	if len(dict) > 0 && cfg.ExposureState {
		// The exposure record for the access log; losing it must not cost
		// the request its assignment.
		if err := p.host.SetExposure(bytesView(dict)); err != nil {
			p.host.Log(wire.LogDebug, "allot: exposure not recorded: "+err.Error())
		}
	}
	for j := range e.assignments() {
		i, v := e.at(j)
		r.stats.variations[i][v]++
	}
	if cfg.nslots > 0 {
		p.observeSlots(cfg, e)
	}
	r.stats.evaluated++ // last: a request is evaluated or failed open, never both
	if p.keepWarm {
		p.warm = warmResult{ok: p.warmKeep, seen: p.warmSeen, r: r, e: e}
	}
	return nil
}

// parsedAttrs fills the attributes parsed out of a header's value: cookies
// and the query string or path of :path. Kept out of assign, as
// otherAttrs.
//
//go:noinline
func (p *Plugin) parsedAttrs(cfg *Config, pairs [][2]string, vals []string) {
	for _, kv := range pairs {
		switch {
		case cfg.isAssignmentHeader(kv[0]): // never read, as in assign
		case kv[0] == "cookie" && len(cfg.cookies) > 0:
			cfg.cookieValues(kv[1], vals)
		case kv[0] == ":path" && (len(cfg.queries) > 0 || len(cfg.urlPath) > 0):
			cfg.pathValues(kv[1], vals)
		}
	}
}

// otherAttrs fills the attributes that do not come from request headers:
// properties (one host call each) and node attributes (read once per
// configuration). Kept out of assign, so the common request path stays
// small: its compiled code is fetched afresh on every request.
//
//go:noinline
func (p *Plugin) otherAttrs(r *Root, vals []string) {
	cfg := r.cfg
	for _, i := range cfg.props {
		if v, err := p.host.Property(&cfg.attrs[i].prop); err == nil {
			vals[i] = string(v)
		}
	}
	for _, i := range cfg.consts {
		vals[i] = r.consts[i]
	}
}

// removeForged removes the forged assignment headers assign found
// (p.strip) from the request: one RemoveRequestHeader per name or, beyond
// maxSingleWrites names, one call for all (removeOwned).
//
//go:noinline
func (p *Plugin) removeForged(cfg *Config, pairs [][2]string) error {
	if len(p.strip) <= maxSingleWrites {
		return p.removeAll(p.strip)
	}
	return p.removeOwned(cfg, pairs)
}

// removeOwned removes every header the filter owns from the request
// (pairs, whose owned names are p.strip) with one call: over a host that
// batches, its RemoveRequestHeaders of those names; else the map without
// them (setMap).
func (p *Plugin) removeOwned(cfg *Config, pairs [][2]string) error {
	if p.batcher != nil {
		return p.batcher.RemoveRequestHeaders(p.strip)
	}
	return p.setMap(cfg, pairs, false, entry{}, "")
}

// setMap replaces the request's headers in one host call
// (HeaderRewriter): pairs without any header the filter owns and, if
// assigned, e's assignment headers, the dictionary and the version.
//
//go:noinline
func (p *Plugin) setMap(cfg *Config, pairs [][2]string, assigned bool, e entry, dict string) error {
	if p.rewriter == nil {
		return errNoRewrite
	}
	p.rewrite = p.rewrite[:0]
	for _, kv := range pairs {
		if !cfg.isAssignmentHeader(kv[0]) {
			p.rewrite = append(p.rewrite, kv)
		}
	}
	if assigned {
		if cfg.PerExperimentHeaders {
			for j := range e.assignments() {
				i, v := e.at(j)
				p.rewrite = append(p.rewrite, [2]string{cfg.headerNames[i], cfg.values[i][v]})
			}
		}
		if len(dict) > 0 {
			p.rewrite = append(p.rewrite, [2]string{cfg.DictionaryHeader, dict})
		}
		if cfg.Version != "" {
			p.rewrite = append(p.rewrite, [2]string{cfg.VersionHeader, cfg.Version})
		}
	}
	return p.rewriter.SetRequestHeaders(p.rewrite)
}

// errNoRewrite is setMap's error over a host that cannot replace the
// header map (one that batches removes instead: removeOwned).
var errNoRewrite = errors.New("host cannot replace the request header map")

// addAll adds a few headers, one AddRequestHeader each: cheaper
// than Envoy rebuilding the whole map. On a host error it stops; failOpen
// takes back whatever was added.
func (p *Plugin) addAll(cfg *Config, e entry, dict string) error {
	if cfg.PerExperimentHeaders {
		for j := range e.assignments() {
			i, v := e.at(j)
			if err := p.host.AddRequestHeader(cfg.headerNames[i], cfg.values[i][v]); err != nil {
				return err
			}
		}
	}
	if len(dict) > 0 {
		if err := p.host.AddRequestHeader(cfg.DictionaryHeader, dict); err != nil {
			return err
		}
	}
	if cfg.Version != "" {
		if err := p.host.AddRequestHeader(cfg.VersionHeader, cfg.Version); err != nil {
			return err
		}
	}
	return nil
}

// addBatch adds the headers addAll would, in the same order, with one
// call into a host that batches (HeaderBatcher); on a host error
// failOpen takes back whatever was added.
func (p *Plugin) addBatch(cfg *Config, e entry, dict string) error {
	b := p.batcher
	if cfg.PerExperimentHeaders {
		for j := range e.assignments() {
			i, v := e.at(j)
			b.QueueRequestHeader(cfg.headerNames[i], cfg.values[i][v])
		}
	}
	if len(dict) > 0 {
		b.QueueRequestHeader(cfg.DictionaryHeader, dict)
	}
	if cfg.Version != "" {
		b.QueueRequestHeader(cfg.VersionHeader, cfg.Version)
	}
	return b.AddQueuedRequestHeaders()
}

// removeAll removes every copy of each of names, one host call each. It
// tries every name, even after one failed or panicked, and returns the
// first failure.
func (p *Plugin) removeAll(names []string) error {
	var first error
	for _, name := range names {
		if err := p.remove(name); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// remove is one RemoveRequestHeader, a panic in it returned as an error.
func (p *Plugin) remove(name string) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = errPanic
		}
	}()
	return p.host.RemoveRequestHeader(name)
}

// errPanic stands for a panic recovered in a host call.
var errPanic = errors.New("panic in a host call")

// failOpen passes a failed request through unassigned: it counts it, once,
// then scrubs its headers and logs why (err, or the recovered panic v).
// Neither may let a panic escape: in Wasm a panic out of a callback kills
// the VM.
//
//go:noinline
func (p *Plugin) failOpen(r *Root, err error, v any) {
	r.stats.failOpen++
	if p.keepWarm {
		p.warm = warmResult{}
	}
	p.setCookie = p.setCookie[:0] // an unassigned request changes no sticky assignment
	p.observed = p.observed[:0]   // nor is it observed: its service saw no assignment
	defer func() { recover() }()  // the log's: the scrub guards itself
	p.scrub(r.cfg)
	msg := "panic: " + panics.Message(v)
	if err != nil {
		msg = err.Error()
	}
	p.host.Log(wire.LogDebug, "allot: request passed through unassigned: "+msg)
}

// scrub leaves the request with no header the filter owns, whatever step
// failed: no forged assignment and none of the request's own, partial or
// whole. It reads the header map again and removes every owned name one
// call each, and if a removal fails, removes them again with one call
// (removeOwned: the map set without them, or the batch of removals). If the map cannot be read it removes every owned name it can
// know: those the first read found, the dictionary, the version and each
// configured experiment's header. Every step runs under its own recover.
func (p *Plugin) scrub(cfg *Config) {
	var pairs [][2]string
	if guard(func() error {
		var err error
		if pairs, err = p.host.RequestHeaders(); err != nil {
			return err
		}
		p.strip = p.strip[:0]
		for _, kv := range pairs {
			if cfg.isAssignmentHeader(kv[0]) {
				p.strip = appendOnce(p.strip, kv[0])
			}
		}
		return nil
	}) != nil {
		p.removeAll(p.strip)
		p.removeAll([]string{cfg.DictionaryHeader, cfg.VersionHeader})
		p.removeAll(cfg.headerNames)
		return
	}
	if len(p.strip) == 0 || p.removeAll(p.strip) == nil {
		return
	}
	guard(func() error { return p.removeOwned(cfg, pairs) })
}

// guard runs step, a panic in it returned as an error.
func guard(step func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = errPanic
		}
	}()
	return step()
}

// values returns the scratch slice for n attribute values, cleared.
func (p *Plugin) values(n int) []string {
	if cap(p.vals) < n {
		p.vals = make([]string, n)
	}
	p.vals = p.vals[:n]
	clear(p.vals)
	return p.vals
}

// lookup returns the assignment for vals from the cache, computing and
// caching it on a miss. The cache is keyed by a hash of the values; the
// entry keeps the values themselves, so a hash collision is a miss, never a
// wrong answer.
func (p *Plugin) lookup(r *Root, vals []string) entry {
	p.key = p.key[:0]
	for _, v := range vals {
		p.key = binary.AppendUvarint(p.key, uint64(len(v)))
		p.key = append(p.key, v...)
	}
	var h uint64
	if r.cache != nil {
		h = hashBytes(p.key)
		if e, ok := r.cache.get(h, p.key); ok {
			r.stats.hits++
			p.warmKeep, p.warmSeen = true, true
			return e
		}
	}
	r.stats.misses++
	e, keep := p.compute(r, vals)
	p.warmKeep, p.warmSeen = keep, false
	if r.cache != nil && keep {
		r.cache.add(h, e)
	}
	return e
}

// maxTargeting bounds a root's condition-outcome cache; when it is full it
// starts again empty (the outcomes are recomputed as needed).
const maxTargeting = 1024

// compute evaluates every experiment for one set of attribute values and
// lays the result out as an entry in p's scratch memory, valid until the
// next compute: the cache copies it, nothing allocates. keep is whether
// the cache may keep it: not when it left a sticky cookie to set, or
// ignored a bad one, so that every such request is evaluated (and
// counted) again.
func (p *Plugin) compute(r *Root, vals []string) (e entry, keep bool) {
	cfg := r.cfg
	keep = true
	if cfg.jar == nil {
		p.scratch = cfg.set.AssignStrings(p.scratch[:0], vals, p.outcomes(r, vals))
	} else {
		keep = p.sticky(r, vals)
	}
	p.data = p.data[:0]
	n := 0
	for _, i := range cfg.byKey {
		if v := p.scratch[i]; v >= 0 {
			p.data = append(p.data, byte(v), byte(v>>8), byte(i), byte(i>>8))
			n++
		}
	}
	p.data = append(p.data, p.key...)
	return entry{data: stringView(p.data), n: n, keyLen: len(p.key)}, keep
}

// sticky is compute's evaluation with sticky bucketing: it opens the
// unit's sticky cookie (the last of vals), keeping the documents of the
// request's attribute values only, evaluates with them and, when the
// unit's sticky assignments changed, seals them with the changes into
// p.setCookie. It reports whether the result may be cached: only when the
// cookie was valid or absent and nothing changed.
//
//go:noinline
func (p *Plugin) sticky(r *Root, vals []string) bool {
	cfg := r.cfg
	n := len(cfg.attrs)
	docs, st := cfg.jar.Open(vals[n], cfg.names, vals[:n])
	switch st {
	case cookie.Invalid:
		r.stats.stickyInvalid++
	case cookie.Oversized:
		r.stats.stickyOversized++
	case cookie.Stale:
		r.stats.stickyStale++
	}
	p.scratch, p.changes = cfg.set.AssignStringsSticky(p.scratch[:0], vals[:n], p.outcomes(r, vals), docs, p.changes[:0])
	if len(p.changes) == 0 {
		return st == cookie.Absent || st == cookie.Valid
	}
	docs = docs.Apply(p.changes)
	out, ok := cfg.jar.Seal(p.setCookie[:0], docs)
	if !ok {
		cfg.prune(docs)
		out, ok = cfg.jar.Seal(p.setCookie[:0], docs)
	}
	if !ok {
		r.stats.stickyDropped++
		return false
	}
	p.setCookie = out
	r.stats.stickyWritten++
	return false
}

// dictionary is the dictionary header's value for e, built in p's scratch
// memory (valid until the next request). Entries keep only the indices, so
// that the cache holds five times more of them in the same bytes.
func (p *Plugin) dictionary(cfg *Config, e entry) string {
	p.dict = p.dict[:0]
	for j := range e.assignments() {
		i, v := e.at(j)
		p.dict = append(p.dict, cfg.dictValues[i][v]...)
	}
	if len(p.dict) == 0 {
		return ""
	}
	return stringView(p.dict[len(wire.DictionarySeparator):])
}

// outcomes returns the condition outcomes for vals, from the root's
// targeting cache or computed and cached.
func (p *Plugin) outcomes(r *Root, vals []string) engine.Outcomes {
	cfg := r.cfg
	p.tkey = p.tkey[:0]
	for _, i := range cfg.condAttrs {
		p.tkey = binary.AppendUvarint(p.tkey, uint64(len(vals[i])))
		p.tkey = append(p.tkey, vals[i]...)
	}
	if o, ok := r.targeting[string(p.tkey)]; ok {
		return o
	}
	clear(p.attrs)
	for _, i := range cfg.condAttrs {
		if v := vals[i]; v != "" {
			p.attrs[cfg.attrs[i].name] = v
		}
	}
	o := cfg.set.Outcomes(nil, p.attrs)
	if len(r.targeting) >= maxTargeting {
		clear(r.targeting)
	}
	r.targeting[string(p.tkey)] = o
	return o
}

// hashBytes is FNV-1a 64.
func hashBytes(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// Delete ends root id, if there is one, flushing its counters first;
// false if there is none (an id the host uses for a stream).
func (p *Plugin) Delete(id uint32) bool {
	r, ok := p.roots[id]
	if !ok {
		return false
	}
	r.flush(p.host)
	p.warm = warmResult{} // keeps nothing of the root
	delete(p.roots, id)
	return true
}

// Roots is how many roots there are.
func (p *Plugin) Roots() int { return len(p.roots) }

// Tick flushes root rootID's counters to the host's metrics.
func (p *Plugin) Tick(rootID uint32) {
	if r, ok := p.roots[rootID]; ok {
		r.flush(p.host)
	}
}

// FailOpen returns how many requests root rootID passed through unassigned
// because of an internal error, since its last flush.
func (p *Plugin) FailOpen(rootID uint32) int64 {
	if r := p.roots[rootID]; r != nil {
		return r.stats.failOpen
	}
	return 0
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return list
		}
	}
	return append(list, s)
}
