// Package plugin is the Allot filter's logic, the same in both artifacts:
// contexts (proxy-wasm's: Plugin is abi's Handler), configuration decoding,
// attribute extraction, header reads and writes, the per-VM (per-worker)
// cache of computed assignments, metrics and fail-open. It holds no
// business rules: assignment is the engine's.
//
// It talks to the proxy only through Host (host.go), which names what the
// filter needs. Two adapters implement it: the proxy-wasm one here
// (proxywasm.go; New wraps an abi.Host in it) and the dynamic module's in
// filter/nativemod (NewWith takes it). Every behaviour is tested natively
// through the proxy-wasm adapter against the fake host abi/fakehost, whose
// failure hook breaks each host call. It must never import gRPC, net/http
// or the control plane.
package plugin

import (
	"encoding/binary"
	"errors"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/abi"
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

// Plugin implements abi.Handler. One Plugin serves one Wasm VM or one
// native worker (one Envoy worker thread), so it needs no locks.
type Plugin struct {
	host Host
	// batcher is host, when it adds several headers with one call: the
	// plugin then adds its headers in one batch, however many.
	batcher HeaderBatcher
	// rewriter is host, when it replaces the header map with one call.
	rewriter HeaderRewriter
	// roots are the plugin instances in this VM. Envoy keeps the old root
	// serving its in-flight streams while a new configuration starts in a
	// new root, so each stream remembers the root it was created under.
	roots map[uint32]*root
	// slots and streams map a stream context to its root. Envoy numbers
	// contexts consecutively, so a stream almost always finds a free slot
	// at id % len(slots), which costs no hashing; the map takes the rest.
	slots   [256]streamSlot
	streams map[uint32]*root

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
	// pending holds the Set-Cookie of each stream whose response has not
	// begun yet (proxy-wasm: a stream's callbacks come one at a time).
	pending map[uint32]string
	// observed are the outcome slots the request assigned (observed
	// experiments' variations); observing holds them, per stream, for the
	// response (unless the host records outcomes: hostOutcomes), and
	// obsFree the records to reuse.
	observed     []int32
	observing    map[uint32]*observation
	obsFree      []*observation
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

	vm vmMetrics
}

// streamSlot is one entry of Plugin.slots; id 0 is free.
type streamSlot struct {
	id uint32
	r  *root
}

// root is one plugin instance: its configuration, cache and counters.
type root struct {
	cfg   *Config
	cache *cache
	// targeting holds the condition outcomes for each combination of the
	// condition attributes' values seen (at most maxTargeting): a cache
	// miss for a new unit then only hashes (engine.AssignStrings).
	targeting map[string]engine.Outcomes
	consts    []string // values of node.* attributes, by attribute index
	stats     stats
}

var _ abi.Handler = (*Plugin)(nil)

// New returns a Plugin that talks to a proxy-wasm host (the Wasm module's,
// or a fake), each Host method one of its host calls. A host that is also
// a HeaderBatcher (a fake of the native module's) batches.
func New(host abi.Host) *Plugin {
	p := NewWith(&proxyWasm{h: toABIHost(host)})
	if b, ok := host.(HeaderBatcher); ok {
		p.batcher = b
	}
	return p
}

// NewWith returns a Plugin that talks to host.
func NewWith(host Host) *Plugin {
	b, _ := host.(HeaderBatcher)
	rw, _ := host.(HeaderRewriter)
	o, _ := host.(OutcomeRecorder)
	return &Plugin{
		host:         host,
		batcher:      b,
		rewriter:     rw,
		roots:        map[uint32]*root{},
		streams:      map[uint32]*root{},
		attrs:        engine.Attributes{},
		hostOutcomes: o != nil && o.RecordsOutcomes(),
	}
}

// OnContextCreate implements abi.Handler.
func (p *Plugin) OnContextCreate(id, parent uint32) {
	if parent == 0 {
		p.roots[id] = &root{}
		return
	}
	r := p.roots[parent]
	if s := &p.slots[id%uint32(len(p.slots))]; s.id == 0 {
		s.id, s.r = id, r
		return
	}
	p.streams[id] = r
}

// stream returns the root stream context id was created under.
func (p *Plugin) stream(id uint32) *root {
	if s := &p.slots[id%uint32(len(p.slots))]; s.id == id {
		return s.r
	}
	return p.streams[id]
}

// OnVMStart implements abi.Handler.
func (p *Plugin) OnVMStart(uint32, int) bool { return true }

// OnConfigure implements abi.Handler: it decodes and compiles the plugin
// configuration once, resolves per-configuration attributes, defines the
// metrics and starts the flush tick. A configuration it cannot accept is
// logged at critical level and refused, so Envoy rejects it and keeps the
// previous one.
func (p *Plugin) OnConfigure(rootID uint32, size int) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			p.host.Log(LogCritical, "allot: configuration rejected: panic: "+panics.Message(v))
			ok = false
		}
	}()
	var data []byte
	if size > 0 {
		b, err := p.host.Configuration(size)
		if err != nil {
			p.host.Log(LogCritical, "allot: read plugin configuration: "+err.Error())
			return false
		}
		data = b
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		p.host.Log(LogCritical, "allot: configuration rejected: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		return false
	}
	p.Install(rootID, cfg)
	return true
}

// Install makes cfg, compiled already, root rootID's configuration: it
// resolves the per-configuration attributes, defines the metrics and
// starts the flush tick. OnConfigure calls it once it has parsed its own
// configuration; a host that parses a configuration once for many plugins
// (the native module, which serves every worker from one process) calls
// it on each, sharing cfg: nothing on the request path writes to a Config.
func (p *Plugin) Install(rootID uint32, cfg *Config) {
	r := p.roots[rootID]
	if r == nil {
		r = &root{}
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
	p.vm.define(p.host)
	if err := p.host.StartTicks(TickMillis); err != nil {
		p.host.Log(LogWarn, "allot: metrics tick unavailable: "+err.Error())
	}
	p.host.Log(LogInfo, "allot: configured version "+strconv.Quote(cfg.Version)+" with "+strconv.Itoa(cfg.Len())+" experiments")
}

// OnRequestHeaders implements abi.Handler. It always continues the stream:
// on any internal error or panic the request passes through without
// assignment headers, forged ones removed (failOpen), and is counted once.
// A request that changed its unit's sticky assignments leaves their
// cookie for the stream's response.
func (p *Plugin) OnRequestHeaders(id uint32, _ int, _ bool) abi.Action {
	r := p.stream(id)
	a := p.request(r)
	if len(p.setCookie) > 0 {
		if p.pending == nil {
			p.pending = map[uint32]string{}
		}
		p.pending[id] = string(p.setCookie)
	}
	if len(p.observed) > 0 && !p.hostOutcomes {
		p.observeRequest(id, r)
	}
	return a
}

// OnResponseHeaders implements abi.Handler: a stream whose request left a
// sticky cookie gets it as a Set-Cookie header; any other returns at once
// (a mesh without sticky bucketing pays only the call). It always
// continues the stream, and a failure to add the header costs the unit
// only its cookie.
func (p *Plugin) OnResponseHeaders(id uint32, _ int, _ bool) abi.Action {
	if len(p.pending) == 0 && len(p.observing) == 0 {
		return abi.ActionContinue
	}
	if len(p.observing) > 0 {
		p.observeResponse(id, false)
	}
	if len(p.pending) == 0 {
		return abi.ActionContinue
	}
	v, ok := p.pending[id]
	if !ok {
		return abi.ActionContinue
	}
	delete(p.pending, id)
	if err := guard(func() error { return p.host.AddResponseHeader(wire.SetCookieHeader, v) }); err != nil {
		defer func() { recover() }()
		p.host.Log(LogDebug, "allot: sticky cookie not set: "+err.Error())
	}
	return abi.ActionContinue
}

// SetCookie is the Set-Cookie value the last request left for its
// response ("" if none), for a host that keeps it with the stream itself
// (the native module). It is valid until the next request.
func (p *Plugin) SetCookie() string { return abi.StringView(p.setCookie) }

// RequestHeaders runs the request path of OnRequestHeaders for a stream of
// root rootID, for a host that keeps no stream contexts (the native
// module: a stream there is Envoy's, and the worker's plugin serves one
// request hook at a time).
func (p *Plugin) RequestHeaders(rootID uint32) abi.Action {
	return p.request(p.roots[rootID])
}

// Configured reports whether root rootID has a configuration installed.
func (p *Plugin) Configured(rootID uint32) bool {
	r := p.roots[rootID]
	return r != nil && r.cfg != nil
}

// request is the request path for a stream of root r (nil: none).
func (p *Plugin) request(r *root) abi.Action {
	p.setCookie = p.setCookie[:0]
	p.observed = p.observed[:0]
	if p.keepWarm {
		p.warm = warmResult{}
	}
	if r == nil || r.cfg == nil {
		return abi.ActionContinue
	}
	defer func() {
		if v := recover(); v != nil {
			p.failOpen(r, nil, v)
		}
	}()
	if err := p.assign(r); err != nil {
		p.failOpen(r, err, nil)
	}
	return abi.ActionContinue
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
func (p *Plugin) assign(r *root) error {
	cfg := r.cfg
	p.strip = p.strip[:0] // before the read: failOpen must not see a previous request's names
	pairs, err := p.host.RequestHeaders()
	if err != nil {
		return err
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
		if err := p.host.SetExposure(abi.Bytes(dict)); err != nil {
			p.host.Log(LogDebug, "allot: exposure not recorded: "+err.Error())
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
func (p *Plugin) otherAttrs(r *root, vals []string) {
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
func (p *Plugin) failOpen(r *root, err error, v any) {
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
	p.host.Log(LogDebug, "allot: request passed through unassigned: "+msg)
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
func (p *Plugin) lookup(r *root, vals []string) entry {
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
func (p *Plugin) compute(r *root, vals []string) (e entry, keep bool) {
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
	return entry{data: abi.StringView(p.data), n: n, keyLen: len(p.key)}, keep
}

// sticky is compute's evaluation with sticky bucketing: it opens the
// unit's sticky cookie (the last of vals), keeping the documents of the
// request's attribute values only, evaluates with them and, when the
// unit's sticky assignments changed, seals them with the changes into
// p.setCookie. It reports whether the result may be cached: only when the
// cookie was valid or absent and nothing changed.
//
//go:noinline
func (p *Plugin) sticky(r *root, vals []string) bool {
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
	return abi.StringView(p.dict[len(", "):])
}

// outcomes returns the condition outcomes for vals, from the root's
// targeting cache or computed and cached.
func (p *Plugin) outcomes(r *root, vals []string) engine.Outcomes {
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

// OnDelete implements abi.Handler. A root flushes its counters before it
// goes (there is no proxy_on_done: the wasip1 build does not export it, to
// save a VM crossing per stream).
func (p *Plugin) OnDelete(id uint32) {
	if len(p.pending) > 0 {
		delete(p.pending, id) // a stream reset before its response
	}
	if len(p.observing) > 0 {
		p.observeResponse(id, true) // no response headers came: a reset
	}
	if s := &p.slots[id%uint32(len(p.slots))]; s.id == id {
		*s = streamSlot{}
		return
	}
	if _, ok := p.streams[id]; ok {
		delete(p.streams, id)
		return
	}
	if r, ok := p.roots[id]; ok {
		r.flush(p.host)
		p.warm = warmResult{} // keeps nothing of the root
		delete(p.roots, id)
		if len(p.roots) == 0 {
			p.vm.withdraw(p.host)
		}
	}
}

// OnTick implements abi.Handler: it flushes the root's counters and the
// VM's figures.
func (p *Plugin) OnTick(rootID uint32) {
	if r, ok := p.roots[rootID]; ok {
		r.flush(p.host)
	}
	p.vm.flush(p.host)
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
