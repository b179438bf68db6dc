// Package plugin is the Allot filter's proxy-wasm logic: contexts,
// configuration decoding, header reads and writes, and fail-open. It holds no
// business rules: assignment is the engine's.
//
// It talks to the proxy only through abi.Host, so every behaviour is tested
// natively against a fake host. It must never import gRPC, net/http or the
// control plane.
package plugin

import (
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/engine"
)

// Plugin implements abi.Handler. One Plugin serves one Wasm VM (one Envoy
// worker thread), so it needs no locks.
type Plugin struct {
	host abi.Host
	// roots are the plugin instances in this VM. Envoy keeps the old root
	// serving its in-flight streams while a new configuration starts in a
	// new root, so each stream remembers the root it was created under.
	roots   map[uint32]*root
	streams map[uint32]*root

	attrs   engine.Attributes
	scratch []engine.Assignment
	strip   []string
}

// root is one plugin instance: its configuration and counters.
type root struct {
	cfg *Config
	// failOpen counts requests that passed through without assignment
	// because of an internal error.
	failOpen int64
}

var _ abi.Handler = (*Plugin)(nil)

// New returns a Plugin that talks to host.
func New(host abi.Host) *Plugin {
	return &Plugin{
		host:    host,
		roots:   map[uint32]*root{},
		streams: map[uint32]*root{},
		attrs:   engine.Attributes{},
	}
}

// OnContextCreate implements abi.Handler.
func (p *Plugin) OnContextCreate(id, parent uint32) {
	if parent == 0 {
		p.roots[id] = &root{}
		return
	}
	p.streams[id] = p.roots[parent]
}

// OnVMStart implements abi.Handler.
func (p *Plugin) OnVMStart(uint32, int) bool { return true }

// OnConfigure implements abi.Handler: it decodes and compiles the plugin
// configuration once. A configuration it cannot accept is logged at critical
// level and refused, so Envoy rejects it and keeps the previous one.
func (p *Plugin) OnConfigure(rootID uint32, size int) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			p.host.Log(abi.LogCritical, "allot: configuration rejected: panic: "+panicString(v))
			ok = false
		}
	}()
	r := p.roots[rootID]
	if r == nil {
		r = &root{}
		p.roots[rootID] = r
	}
	var data []byte
	if size > 0 {
		b, err := p.host.GetBuffer(abi.BufferPluginConfiguration, 0, size)
		if err != nil {
			p.host.Log(abi.LogCritical, "allot: read plugin configuration: "+err.Error())
			return false
		}
		data = b
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		p.host.Log(abi.LogCritical, "allot: configuration rejected: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		return false
	}
	r.cfg = cfg
	p.host.Log(abi.LogInfo, "allot: configured version "+strconv.Quote(cfg.Version)+" with "+strconv.Itoa(cfg.Len())+" experiments")
	return true
}

// OnRequestHeaders implements abi.Handler. It always continues the stream:
// on any internal error the request passes through without assignment
// headers and the error is counted.
func (p *Plugin) OnRequestHeaders(id uint32, _ int, _ bool) abi.Action {
	r := p.streams[id]
	if r == nil || r.cfg == nil {
		return abi.ActionContinue
	}
	defer func() {
		if v := recover(); v != nil {
			r.failOpen++
			p.host.Log(abi.LogDebug, "allot: request passed through unassigned: panic: "+panicString(v))
		}
	}()
	if err := p.assign(r.cfg); err != nil {
		r.failOpen++
		p.host.Log(abi.LogDebug, "allot: request passed through unassigned: "+err.Error())
	}
	return abi.ActionContinue
}

// assign strips client-supplied assignment headers, evaluates every
// experiment for the request's unit and adds one header per experiment the
// request is in. Headers are added only after every assignment is computed.
func (p *Plugin) assign(cfg *Config) error {
	pairs, err := p.host.GetHeaderMapPairs(abi.RequestHeaders)
	if err != nil {
		return err
	}
	unit := ""
	p.strip = p.strip[:0]
	for _, kv := range pairs {
		name := kv[0]
		if hasPrefixFold(name, cfg.HeaderPrefix) {
			p.strip = appendOnce(p.strip, name)
			continue
		}
		if unit == "" && strings.EqualFold(name, cfg.UnitHeader) {
			unit = kv[1]
		}
	}
	for _, name := range p.strip {
		if err := p.host.RemoveHeaderMapValue(abi.RequestHeaders, name); err != nil {
			return err
		}
	}
	if unit == "" {
		return nil
	}
	clear(p.attrs)
	p.attrs["id"] = unit
	p.scratch = cfg.set.Assign(p.scratch[:0], p.attrs)
	for i, a := range p.scratch {
		if !a.InExperiment {
			continue
		}
		if err := p.host.AddHeaderMapValue(abi.RequestHeaders, cfg.headerNames[i], a.Value); err != nil {
			return err
		}
	}
	return nil
}

// OnDone implements abi.Handler.
func (p *Plugin) OnDone(uint32) bool { return true }

// OnDelete implements abi.Handler.
func (p *Plugin) OnDelete(id uint32) {
	if _, ok := p.streams[id]; ok {
		delete(p.streams, id)
		return
	}
	delete(p.roots, id)
}

// OnTick implements abi.Handler.
func (p *Plugin) OnTick(uint32) {}

// FailOpen returns how many requests root rootID passed through unassigned
// because of an internal error.
func (p *Plugin) FailOpen(rootID uint32) int64 {
	if r := p.roots[rootID]; r != nil {
		return r.failOpen
	}
	return 0
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return list
		}
	}
	return append(list, s)
}

func panicString(v any) string {
	switch v := v.(type) {
	case error:
		return v.Error()
	case string:
		return v
	default:
		return "non-error panic value"
	}
}
