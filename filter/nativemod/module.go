//go:build cgo

// Package nativemod is the Allot filter as an Envoy dynamic module: the
// same plugin and engine as the Wasm module, served to every Envoy worker
// from one Go runtime. It implements dynmod.Handler — configurations
// compiled once on Envoy's main thread and shared by every worker, one
// plugin.Plugin per worker, counters flushed from one goroutine — and
// plugin.Host over dynmod's callbacks (host.go). filter/native, package
// main, only installs it (dynmod.SetHandler(nativemod.New())); see
// docs/filter-internals.md, "The native module".
//
// It drives the core (filter/plugin) directly: a stream is Envoy's, so it
// keeps no stream contexts, and it imports neither the proxy-wasm layer
// (filter/abi) nor its adapter (filter/proxywasm). This package imports
// only the standard library and the filter's own packages; it must never
// import gRPC, net/http or the control plane.
package nativemod

import (
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allotmesh/allot/filter/dynmod"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/wire"
)

// FilterName is the filter_name the module serves (DynamicModuleFilter's
// filter_name); any other is refused.
const FilterName = "allot"

// WarmEnv is the environment variable, read once when Envoy loads the
// module, that turns the warm path off. The path is on by default: unset,
// empty or "1", a configuration the warm path can serve
// (plugin.Config.WarmPlan) serves its warm requests in C, without
// entering Go (docs/perf/native-warm-path.md). "0" sends every request
// through Go (the cold path): the C request hook reads no configuration
// handle and the plugin keeps nothing for the warm path. Any other value
// leaves the path on, with a warning logged once at load.
const WarmEnv = "ALLOT_NATIVE_WARM"

// New returns the module: the dynmod.Handler a process installs once. With
// the warm path on (WarmEnv) it is a dynmod.WarmHandler, whose handles the
// C request hook reads; with it off it is not, and the C hook calls Go for
// every request.
func New() dynmod.Handler {
	m := newModule()
	m.warm, m.warning = warmSwitch(os.Getenv(WarmEnv))
	if m.warm {
		return warmModule{m}
	}
	return m
}

// warmSwitch reads WarmEnv's value v: whether the warm path is on, and
// the warning to log at load for a value that is neither "0" nor "1" nor
// empty (quoted, at most warmValueMax bytes of it).
func warmSwitch(v string) (on bool, warning string) {
	switch v {
	case "", "1":
		return true, ""
	case "0":
		return false, ""
	}
	shown := v
	if len(shown) > warmValueMax {
		shown = shown[:warmValueMax] + "…"
	}
	return true, "allot: " + WarmEnv + "=" + strconv.Quote(shown) + ": want 0 (off) or 1 (on); the warm path is on"
}

// warmValueMax bounds how much of an unknown WarmEnv value the warning
// repeats.
const warmValueMax = 32

// warmModule is the module with its warm path on: a dynmod.WarmHandler,
// every handle ConfigNew returns its configuration's C side (newSide).
type warmModule struct{ *module }

var _ dynmod.WarmHandler = warmModule{}

// WarmHandles implements dynmod.WarmHandler.
func (warmModule) WarmHandles() {}

// module implements dynmod.Handler: one per process.
//
// A configuration is decoded and compiled once, on Envoy's main thread
// (ConfigNew), and shared read-only by every worker. Each worker thread
// has its own plugin.Plugin — its cache of assignments, condition
// outcomes, counters and scratch buffers — exactly as each worker has its
// own VM under Wasm, so the request path takes no lock any two workers
// contend on: the configuration table and the worker list are read through
// atomic pointers, and a worker's mutex is only ever taken by that
// worker's thread (it is there for the rare hook Envoy runs elsewhere and
// for tests that drive one worker from several goroutines).
type module struct {
	mu      sync.Mutex // serializes writers of configs and workers
	configs atomic.Pointer[map[uintptr]*entry]
	workers atomic.Pointer[[]*worker]
	next    uint32
	// newHost makes a worker's host; tests set it to make a proxy-wasm
	// fake (abi/fakehost through proxywasm.NewHost), which the plugin
	// talks to as under Wasm.
	newHost func(*worker) plugin.Host
	flusher sync.Once
	// release returns freed heap to the OS after configuration changes
	// (releaseSoonLocked); guarded by mu.
	release *time.Timer
	// cookies are the Set-Cookie values requests left, in tests; guarded
	// by mu.
	cookies []string
	// observeStream leaves a request's observed stat ids in its stream's
	// C state (dynmod.Stream.Observe); tests, whose streams are not
	// hooks.c's, record them instead.
	observeStream func(dynmod.Stream, dynmod.Config, []uint64) bool
	// awaitBody marks a stream whose body goes to RequestBody
	// (dynmod.Stream.AwaitBody); tests record it instead.
	awaitBody func(dynmod.Stream) bool
	// replyUnsupported says why this Envoy cannot send a local reply
	// (dynmod.LocalReplyUnsupported; "" when it can); tests replace it.
	replyUnsupported func() string
	// warm is whether configurations get a warm path (WarmEnv), warning
	// what ProgramInit logs about its value; pending is flushWarmLocked's
	// scratch, guarded by mu.
	warm    bool
	warning string
	pending []uint64
	// retained are the outcome stats of the configurations live within
	// retainOutcomes, by name (guarded by mu): each new configuration
	// defines them too (retainLocked).
	retained map[string]retainedStat
}

// retainedStat is an outcome stat a new configuration defines though it
// does not count in it: whether it is a histogram, and when a
// configuration that counts in it was last seen live.
type retainedStat struct {
	histogram bool
	seen      time.Time
}

// retainOutcomes is how long the outcome stats of a configuration stay
// defined after it was last seen live by a new configuration. Envoy frees
// a configuration's stats with it, and with them the counts its streams
// made since the last stats flush; each outcome stat carries its
// assignment revision, so the new configuration's do not keep the old
// ones alive. Defining them in each configuration made within
// retainOutcomes keeps them for two of the bootstraps' 5 s flushes and
// more, so a revision's last counts reach allotd. Bound: the stats of the
// configurations live within the last retainOutcomes.
const retainOutcomes = 30 * time.Second

// entry is one compiled configuration.
type entry struct {
	id    uint32 // the root id every worker's plugin knows it by
	cfg   *plugin.Config
	envoy dynmod.Config
	// counters are Envoy's ids of the configuration's counters, in the
	// order of cfg.MetricNames; names index them.
	counters []uint64
	names    map[string]int
	// outcomes are Envoy's ids of the outcome stats of the observed
	// variations, dynmod.OutcomeIDs per slot of cfg.Outcomes: each
	// class's counter, then the latency histogram (noCounter: not
	// defined).
	outcomes []uint64
	// outStats are the names of those stats (cfg.Outcomes).
	outStats []plugin.OutcomeStats
	// side is the configuration's C side, whose address is its handle:
	// with a warm plan, each worker's C cache, filled after each request
	// Go serves (handOff).
	side *dynmod.WarmConfig
}

// worker is one Envoy worker thread's share of the module.
type worker struct {
	mu     sync.Mutex
	plugin *plugin.Plugin
	host   envoyHost
	fake   plugin.Host // set by tests: used instead of host
	// roots are the configurations installed in plugin.
	roots map[uint32]*entry
	// ids is the request hook's scratch for the observed stat ids.
	ids []uint64
}

func newModule() *module {
	m := &module{observeStream: dynmod.Stream.Observe, awaitBody: dynmod.Stream.AwaitBody,
		replyUnsupported: dynmod.LocalReplyUnsupported}
	m.configs.Store(&map[uintptr]*entry{})
	m.workers.Store(&[]*worker{})
	return m
}

// ProgramInit implements dynmod.Handler: it logs a WarmEnv value it does
// not know, makes the workers and starts the flush tick.
func (m *module) ProgramInit(concurrency uint32) {
	if m.warning != "" {
		dynmod.Log(wire.LogWarn, m.warning)
	}
	m.mu.Lock()
	m.growLocked(int(concurrency))
	m.mu.Unlock()
	if m.newHost == nil {
		setProcs(concurrency)
		m.flusher.Do(func() { go m.tick() })
	}
}

// setProcs gives the Go runtime one P per Envoy worker plus one, unless
// the operator set GOMAXPROCS. Each worker thread that enters a hook
// takes a P for the hook's duration; with only as many Ps as workers, the
// runtime's own work (the flush tick, the collector's workers) has to take
// one from a worker, and the handoffs show up as context switches: at
// --concurrency 2 on 2 cores, 2,983–3,186 per 1,000 requests with 3 Ps
// against 4,585–5,244 with the default 2, CPU per request within the
// noise (docs/perf/native.md).
func setProcs(concurrency uint32) {
	if concurrency == 0 || os.Getenv("GOMAXPROCS") != "" {
		return
	}
	runtime.GOMAXPROCS(int(concurrency) + 1)
}

// tick flushes every worker's counters once per plugin.TickMillis, for the
// life of the process (one goroutine: configuration updates start none).
func (m *module) tick() {
	for range time.Tick(plugin.TickMillis * time.Millisecond) {
		m.flush()
	}
}

// flush adds every worker's accumulated counts to Envoy's counters, one
// worker at a time: a worker waits only while its own share is flushed.
// Holding m.mu keeps every configuration alive meanwhile (ConfigDestroy
// takes it too).
func (m *module) flush() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, w := range *m.workers.Load() {
		w.mu.Lock()
		for id, e := range w.roots {
			w.host.entry = e
			w.plugin.Tick(id)
		}
		w.host.entry = nil
		w.mu.Unlock()
	}
	for _, e := range *m.configs.Load() {
		m.flushWarmLocked(e)
	}
}

// flushWarmLocked adds the counts the warm path made for e on each
// worker to Envoy's counters. m.mu must be held.
func (m *module) flushWarmLocked(e *entry) {
	if cap(m.pending) < len(e.counters) {
		m.pending = make([]uint64, len(e.counters))
	}
	pending := m.pending[:len(e.counters)]
	for i := range e.side.Workers() {
		e.side.Worker(i).TakeAll(pending)
		for pos, n := range pending {
			if n != 0 && e.counters[pos] != noCounter && e.envoy != 0 {
				e.envoy.IncrementCounter(e.counters[pos], n)
			}
		}
	}
}

// growLocked makes sure workers 0..n-1 exist.
func (m *module) growLocked(n int) []*worker {
	ws := *m.workers.Load()
	if len(ws) >= n {
		return ws
	}
	grown := append([]*worker(nil), ws...)
	for len(grown) < n {
		w := &worker{roots: map[uint32]*entry{}}
		if m.newHost != nil {
			w.fake = m.newHost(w)
			w.plugin = plugin.New(w.fake)
		} else {
			w.plugin = plugin.New(wrapHost(&w.host))
		}
		if m.warm {
			w.plugin.KeepWarmResults()
		}
		grown = append(grown, w)
	}
	m.workers.Store(&grown)
	return grown
}

// worker returns worker i, created on first use.
func (m *module) worker(i uint32) *worker {
	if ws := *m.workers.Load(); int(i) < len(ws) {
		return ws[i]
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.growLocked(int(i) + 1)[i]
}

// ConfigNew implements dynmod.Handler: it decodes and compiles the
// configuration with the plugin's parser (the decoder the control plane
// validates with) and defines its counters. A configuration it cannot
// accept is logged at critical level and refused: Envoy rejects it and
// keeps the previous one.
func (m *module) ConfigNew(c dynmod.Config, name string, data []byte) uintptr {
	if name != FilterName {
		dynmod.Log(wire.LogCritical, "allot: configuration rejected: filter_name "+strconv.Quote(name)+", want "+strconv.Quote(FilterName))
		return 0
	}
	cfg, err := plugin.ParseConfig(data)
	if err != nil {
		dynmod.Log(wire.LogCritical, "allot: configuration rejected: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		return 0
	}
	if why := m.answerRefusal(cfg.AnswerPrefix()); why != "" {
		dynmod.Log(wire.LogCritical, "allot: configuration rejected: "+why)
		return 0
	}
	names := cfg.MetricNames()
	e := &entry{cfg: cfg, envoy: c, counters: make([]uint64, len(names)), names: make(map[string]int, len(names))}
	for i, n := range names {
		e.names[n] = i
		if c != 0 {
			id, ok := c.DefineCounter(n)
			if !ok {
				dynmod.Log(wire.LogWarn, "allot: counter "+n+" could not be defined; its counts are dropped")
				id = noCounter
			}
			e.counters[i] = id
		}
	}
	if cfg.Observed() {
		e.outStats = cfg.Outcomes()
		e.outcomes = defineOutcomes(c, e.outStats)
	}
	if e.side = m.newSide(e); e.side == nil {
		return 0
	}
	// The warm path hands Go every request the configuration answers.
	if err := e.side.SetAnswerPrefix(cfg.AnswerPrefix()); err != nil {
		dynmod.Log(wire.LogCritical, "allot: configuration rejected: "+err.Error())
		e.side.Free()
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retainLocked(c, e, time.Now())
	m.next++
	e.id = m.next
	// Only the streams of a sticky, observed or answering configuration
	// keep state: the cookie its request hook leaves for the response, the
	// stat ids of its observed variations, the mark of a request awaiting
	// its body (dynmod's handles).
	h := e.side.Handle() | dynmod.Stateless
	if cfg.Sticky() || cfg.Observed() || cfg.AnswerPrefix() != "" {
		h = e.side.Handle()
	}
	old := *m.configs.Load()
	next := make(map[uintptr]*entry, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[h] = e
	m.configs.Store(&next)
	m.releaseSoonLocked()
	return h
}

// newSide makes a configuration's C side: with the warm path on and a
// configuration it can serve, a cache per worker; else one that sends
// every request to Go (with the path off, C never reads it: it is only
// the configuration's handle). Why the path does not serve a
// configuration is logged, at warning level when its plan was refused by
// C; nil (logged at critical level) if not even a cold side can be made:
// no memory.
func (m *module) newSide(e *entry) *dynmod.WarmConfig {
	if m.warm {
		level := wire.LogInfo // a configuration the warm path does not serve
		w, err := e.cfg.WarmPlan()
		if err == nil {
			var side *dynmod.WarmConfig
			if side, err = newWarmSide(w, e, len(*m.workers.Load())); err == nil {
				return side
			}
			level = wire.LogWarn // one it should serve
		}
		dynmod.Log(level, "allot: warm path off for this configuration: "+err.Error())
	}
	side, err := dynmod.NewColdConfig()
	if err != nil {
		dynmod.Log(wire.LogCritical, "allot: configuration rejected: "+err.Error())
		return nil
	}
	return side
}

// newWarmSide makes the C side of configuration e, which the warm path
// serves with plan w, for workers workers: its counters and outcome stats
// are e's.
func newWarmSide(w plugin.WarmPlan, e *entry, workers int) (*dynmod.WarmConfig, error) {
	headers := make([]dynmod.WarmHeader, len(w.Headers))
	for i, h := range w.Headers {
		headers[i] = dynmod.WarmHeader(h)
	}
	p, err := dynmod.NewWarmPlan(w.Slots, headers, nil, w.Prefix, w.DictionaryHeader, w.VersionHeader)
	if err != nil {
		return nil, err
	}
	r := &dynmod.WarmRender{Experiments: make([]dynmod.WarmExperiment, len(w.Experiments)), PerExperiment: w.PerExperiment,
		Exposure: w.Exposure, Dictionary: w.DictionaryHeader, VersionHeader: w.VersionHeader, Version: w.Version,
		Evaluated: w.Evaluated, Hits: w.Hits, EnvoyConfig: e.envoy, Unrecorded: w.Unrecorded, HasUnrecorded: w.HasUnrecorded}
	for i, x := range w.Experiments {
		r.Experiments[i] = dynmod.WarmExperiment{Header: x.Header, Values: x.Values, Members: x.Members, Stats: x.Stats}
		if x.FirstSlot >= 0 { // the outcome ids of its slots, as module.observe hands them
			from := int(x.FirstSlot) * dynmod.OutcomeIDs
			r.Experiments[i].Outcomes = e.outcomes[from : from+len(x.Values)*dynmod.OutcomeIDs]
		}
	}
	return dynmod.NewWarmConfig(p, r, workers, w.MaxEntries, w.MaxBytes, len(e.counters), exposureState)
}

// retainLocked defines in configuration c, which e is, the outcome stats
// of the configurations live within retainOutcomes, and marks those live
// now as seen at now; m.mu must be held.
func (m *module) retainLocked(c dynmod.Config, e *entry, now time.Time) {
	if m.retained == nil {
		m.retained = map[string]retainedStat{}
	}
	for _, x := range *m.configs.Load() {
		for _, o := range x.outStats {
			for _, name := range o.Counters {
				m.retained[name] = retainedStat{seen: now}
			}
			m.retained[o.Latency] = retainedStat{histogram: true, seen: now}
		}
	}
	own := make(map[string]bool, len(e.outStats)*dynmod.OutcomeIDs)
	for _, o := range e.outStats {
		for _, name := range o.Counters {
			own[name] = true
		}
		own[o.Latency] = true
	}
	for name, r := range m.retained {
		switch {
		case now.Sub(r.seen) > retainOutcomes:
			delete(m.retained, name)
		case own[name] || c == 0:
		case r.histogram:
			c.DefineHistogram(name)
		default:
			c.DefineCounter(name)
		}
	}
}

// defineOutcomes defines the outcome stats of the observed variations in
// Envoy (c 0: tests, where each id is its position) and returns their ids,
// dynmod.OutcomeIDs per variation. A stat Envoy does not define is logged
// and its id is noCounter, which Envoy answers as unknown.
func defineOutcomes(c dynmod.Config, out []plugin.OutcomeStats) []uint64 {
	ids := make([]uint64, 0, len(out)*dynmod.OutcomeIDs)
	for _, o := range out {
		for _, name := range o.Counters {
			id := noCounter
			if c == 0 {
				id = uint64(len(ids)) // tests: the id is the position
			} else {
				if v, ok := c.DefineCounter(name); ok {
					id = v
				} else {
					dynmod.Log(wire.LogWarn, "allot: counter "+name+" could not be defined; its counts are dropped")
				}
			}
			ids = append(ids, id)
		}
		id := noCounter
		if c == 0 {
			id = uint64(len(ids))
		} else {
			if v, ok := c.DefineHistogram(o.Latency); ok {
				id = v
			} else {
				dynmod.Log(wire.LogWarn, "allot: histogram "+o.Latency+" could not be defined; its samples are dropped")
			}
		}
		ids = append(ids, id)
	}
	return ids
}

// releaseDelay is how long after the last configuration change the heap
// it freed goes back to the OS: an update's config-new and the old
// configuration's config-destroy, or a burst of listeners, make one
// release.
const releaseDelay = 500 * time.Millisecond

// releaseSoonLocked returns to the OS, releaseDelay after the last call,
// the heap configuration changes left free: decoding and compiling a
// configuration allocates several times what the compiled form keeps (5.4
// MiB for 1,000 experiments), and Go's scavenger would hand it back only
// over minutes. The collection runs on a timer's goroutine, holding no
// lock: neither Envoy's main thread nor a worker waits for it. Tests
// (newHost set) skip it. m.mu must be held.
func (m *module) releaseSoonLocked() {
	if m.newHost != nil {
		return
	}
	if m.release == nil {
		m.release = time.AfterFunc(releaseDelay, debug.FreeOSMemory)
		return
	}
	m.release.Reset(releaseDelay)
}

// noCounter marks a counter Envoy did not define.
const noCounter = ^uint64(0)

// ConfigDestroy implements dynmod.Handler. Envoy destroys a
// configuration once no stream uses it; each worker's root of it flushes
// its last counts (the configuration's counters are still there during
// this hook) and goes.
func (m *module) ConfigDestroy(h uintptr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.configs.Load()
	e, ok := old[h]
	if !ok {
		return
	}
	next := make(map[uintptr]*entry, len(old))
	for k, v := range old {
		if k != h {
			next[k] = v
		}
	}
	m.configs.Store(&next)
	for _, w := range *m.workers.Load() {
		w.mu.Lock()
		if _, ok := w.roots[e.id]; ok {
			w.host.entry = e
			w.plugin.Delete(e.id)
			w.host.entry = nil
			delete(w.roots, e.id)
		}
		w.mu.Unlock()
	}
	m.flushWarmLocked(e)
	e.side.Free()
	m.releaseSoonLocked()
}

// RequestHeaders implements dynmod.Handler: the plugin's request path on
// the stream's worker, then, if it changed the headers, the route chosen
// again (envoyHost.endRequest). The plugin recovers its own panics (it
// scrubs the request and counts it); a panic here, outside it, reaches
// dynmod, which recovers it too. A sticky cookie the request leaves goes
// into the stream's state, for its response.
//
// A request the plugin answers itself (plugin.Verdict, issue #45) stops at
// its headers: answered there, or awaiting its body, which then reaches
// RequestBody (headersStatus); a header request costs one branch more.
func (m *module) RequestHeaders(f dynmod.Filter, s dynmod.Stream, h uintptr, endOfStream bool) dynmod.HeadersStatus {
	e := (*m.configs.Load())[h]
	if e == nil {
		return dynmod.HeadersContinue
	}
	idx := m.workerIndex(f)
	w := m.worker(idx)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.host.filter, w.host.entry = f, e
	w.host.requests++
	w.host.batch.Reset() // plugin.HeaderBatcher: nothing queued survives a request
	defer w.host.endRequest()
	if w.roots[e.id] == nil {
		w.roots[e.id] = e
		w.plugin.Install(e.id, e.cfg)
	}
	v := w.plugin.Request(w.plugin.Root(e.id)) // a stream here is Envoy's: the module keeps no stream contexts
	if v != plugin.Continue {
		return m.answer(w, e, s, v, endOfStream)
	}
	m.handOff(w, e, idx)
	if sc := w.plugin.SetCookie(); sc != "" {
		m.respond(s, sc)
	}
	if slots := w.plugin.Observed(); len(slots) > 0 {
		m.observe(w, e, s, slots)
	}
	return dynmod.HeadersContinue
}

// handOff gives the stream's worker's C cache, if the configuration has a
// warm path, the assignment the request Go just served got, under Go's
// key for it, which is the key C builds for the same request: the unit's
// next request is served in C, which renders the assignment's headers as
// Go adds them.
func (m *module) handOff(w *worker, e *entry, idx uint32) {
	c := e.side.Worker(int(idx))
	if c == nil {
		return
	}
	if key, items, seen, ok := w.plugin.WarmResult(); ok {
		c.Offer(key, items, seen)
	}
}

// observe leaves the stat ids of the request's observed variations in the
// stream's C state, whose hooks count their outcomes. The ids go through
// the worker's scratch slice: nothing is allocated per request in Go. If
// the stream has no C state or its copy cannot be allocated (malloc), the
// request is served as usual and counted in wire.MetricOutcomesUnrecorded
// instead of its outcome.
func (m *module) observe(w *worker, e *entry, s dynmod.Stream, slots []int32) {
	w.ids = w.ids[:0]
	for _, slot := range slots {
		w.ids = append(w.ids, e.outcomes[int(slot)*dynmod.OutcomeIDs:(int(slot)+1)*dynmod.OutcomeIDs]...)
	}
	if !m.observeStream(s, e.envoy, w.ids) {
		w.plugin.CountUnrecorded(e.id)
	}
}

// respond leaves a sticky cookie for the stream's response; tests record
// it instead (their streams are not hooks.c's).
func (m *module) respond(s dynmod.Stream, setCookie string) {
	if m.newHost != nil {
		m.mu.Lock()
		m.cookies = append(m.cookies, strings.Clone(setCookie))
		m.mu.Unlock()
		return
	}
	s.SetResponseHeader(wire.SetCookieHeader, setCookie)
}

// workerIndex asks Envoy for the stream's worker; tests, whose filter
// values are not Envoy's, encode the worker in the value itself.
func (m *module) workerIndex(f dynmod.Filter) uint32 {
	if m.newHost != nil {
		return uint32(f >> 32)
	}
	return f.WorkerIndex()
}
