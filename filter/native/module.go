package main

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/dynmod"
	"github.com/allotmesh/allot/filter/plugin"
)

// FilterName is the filter_name the module serves (DynamicModuleFilter's
// filter_name); any other is refused.
const FilterName = "allot"

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
	// epoch counts destroyed configurations; a worker that sees it change
	// drops its roots of destroyed ones.
	epoch atomic.Uint64
	// newHost makes a worker's host; tests replace it with a fake.
	newHost func(*worker) abi.Host
	now     func() time.Time
}

// entry is one compiled configuration.
type entry struct {
	id  uint32 // the root id every worker's plugin knows it by
	cfg *plugin.Config
	// counters are Envoy's ids of the configuration's counters, in the
	// order of cfg.MetricNames; names index them.
	counters []uint64
	names    map[string]int
	dead     atomic.Bool
}

// worker is one Envoy worker thread's share of the module.
type worker struct {
	mu     sync.Mutex
	plugin *plugin.Plugin
	host   envoyHost
	fake   abi.Host // set by tests: used instead of host
	// roots are the configurations installed in plugin, with when each
	// last flushed its counters.
	roots map[uint32]*rootState
	epoch uint64
}

type rootState struct {
	e       *entry
	flushed time.Time
}

func newModule() *module {
	m := &module{now: time.Now}
	m.configs.Store(&map[uintptr]*entry{})
	m.workers.Store(&[]*worker{})
	return m
}

var _ dynmod.Handler = (*module)(nil)

// ProgramInit implements dynmod.Handler.
func (m *module) ProgramInit(concurrency uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.growLocked(int(concurrency))
}

// growLocked makes sure workers 0..n-1 exist.
func (m *module) growLocked(n int) []*worker {
	ws := *m.workers.Load()
	if len(ws) >= n {
		return ws
	}
	grown := append([]*worker(nil), ws...)
	for len(grown) < n {
		w := &worker{roots: map[uint32]*rootState{}}
		var h abi.Host = &w.host
		if m.newHost != nil {
			h = m.newHost(w)
			w.fake = h
		}
		w.plugin = plugin.New(h)
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
		dynmod.Log(dynmod.LogCritical, "allot: configuration rejected: filter_name "+quote(name)+", want "+quote(FilterName))
		return 0
	}
	cfg, err := plugin.ParseConfig(data)
	if err != nil {
		dynmod.Log(dynmod.LogCritical, "allot: configuration rejected: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		return 0
	}
	names := cfg.MetricNames()
	e := &entry{cfg: cfg, counters: make([]uint64, len(names)), names: make(map[string]int, len(names))}
	for i, n := range names {
		e.names[n] = i
		if c != 0 {
			id, ok := c.DefineCounter(n)
			if !ok {
				dynmod.Log(dynmod.LogWarn, "allot: counter "+n+" could not be defined; its counts are dropped")
				id = noCounter
			}
			e.counters[i] = id
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	e.id = m.next
	h := uintptr(e.id)
	old := *m.configs.Load()
	next := make(map[uintptr]*entry, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	next[h] = e
	m.configs.Store(&next)
	return h
}

// noCounter marks a counter Envoy did not define.
const noCounter = ^uint64(0)

// ConfigDestroy implements dynmod.Handler. Workers drop their roots of the
// configuration on their next request; counts they had not flushed yet
// (at most a second's) are lost with it: Envoy's counters of a destroyed
// configuration cannot be reached any more.
func (m *module) ConfigDestroy(h uintptr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.configs.Load()
	e, ok := old[h]
	if !ok {
		return
	}
	e.dead.Store(true)
	next := make(map[uintptr]*entry, len(old))
	for k, v := range old {
		if k != h {
			next[k] = v
		}
	}
	m.configs.Store(&next)
	m.epoch.Add(1)
}

// FilterNew implements dynmod.Handler: a stream needs nothing of its own,
// so its module value is the configuration's handle.
func (m *module) FilterNew(h uintptr, _ dynmod.Filter) uintptr { return h }

// FilterDestroy implements dynmod.Handler.
func (m *module) FilterDestroy(uintptr) {}

// RequestHeaders implements dynmod.Handler: the plugin's request path on
// the stream's worker. The plugin recovers its own panics (it scrubs the
// request and counts it); a panic here, outside it, reaches dynmod, which
// recovers it too.
func (m *module) RequestHeaders(f dynmod.Filter, h uintptr, _ bool) {
	e := (*m.configs.Load())[h]
	if e == nil {
		return
	}
	w := m.worker(m.workerIndex(f))
	w.mu.Lock()
	defer w.mu.Unlock()
	w.host.filter, w.host.entry = f, e
	defer func() { w.host.filter, w.host.entry = 0, nil }()
	if ep := m.epoch.Load(); ep != w.epoch {
		w.sweep()
		w.epoch = ep
	}
	rs := w.roots[e.id]
	now := m.now()
	if rs == nil {
		rs = &rootState{e: e, flushed: now}
		w.roots[e.id] = rs
		w.plugin.Install(e.id, e.cfg)
	}
	w.plugin.RequestHeaders(e.id)
	if now.Sub(rs.flushed) >= plugin.TickMillis*time.Millisecond {
		rs.flushed = now
		w.plugin.OnTick(e.id)
	}
}

// workerIndex asks Envoy for the stream's worker; tests, whose filter
// values are not Envoy's, encode the worker in the value itself.
func (m *module) workerIndex(f dynmod.Filter) uint32 {
	if m.newHost != nil {
		return uint32(f >> 32)
	}
	return f.WorkerIndex()
}

// sweep removes the roots of destroyed configurations (their counters are
// gone: the host drops the final flush).
func (w *worker) sweep() {
	filter, e := w.host.filter, w.host.entry
	w.host.filter, w.host.entry = 0, nil
	for id, rs := range w.roots {
		if rs.e.dead.Load() {
			w.plugin.OnDelete(id)
			delete(w.roots, id)
		}
	}
	w.host.filter, w.host.entry = filter, e
}

func quote(s string) string { return `"` + s + `"` }
