package proxywasm

import (
	"strings"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/plugin"
)

// Handler implements abi.Handler over the filter's core. One Handler
// serves one Wasm VM (one Envoy worker thread), so it needs no locks.
type Handler struct {
	p    *plugin.Plugin
	host plugin.Host
	// slots and streams map a stream context to its root. Envoy numbers
	// contexts consecutively, so a stream almost always finds a free slot
	// at id % len(slots), which costs no hashing; the map takes the rest.
	slots   [256]streamSlot
	streams map[uint32]*plugin.Root
	// pending holds the Set-Cookie of each stream whose response has not
	// begun yet (a stream's callbacks come one at a time).
	pending map[uint32]string
	// observing holds, per stream, the outcome slots its request assigned
	// for its response; free the records to reuse.
	observing map[uint32]*plugin.Observation
	free      []*plugin.Observation
	// awaiting holds the streams whose request the plugin answers once
	// its body has come (OFREP), with their root; w is the host under
	// host, which hands the plugin the body.
	awaiting map[uint32]held
	w        *proxyWasm

	vm vmMetrics
}

// held is a stream the plugin holds for its body: its root and what the
// plugin needs of its headers, which Envoy no longer gives in the body
// callback.
type held struct {
	r   *plugin.Root
	req *plugin.HeldRequest
}

// streamSlot is one entry of Handler.slots; id 0 is free.
type streamSlot struct {
	id uint32
	r  *plugin.Root
}

var _ abi.Handler = (*Handler)(nil)

// New returns a Handler whose plugin talks to a proxy-wasm host (the Wasm
// module's, or a fake) through NewHost.
func New(host abi.Host) *Handler {
	h, w := newHost(host)
	return &Handler{p: plugin.New(h), host: h, w: w, streams: map[uint32]*plugin.Root{}}
}

// Plugin is the core h drives.
func (h *Handler) Plugin() *plugin.Plugin { return h.p }

// OnContextCreate implements abi.Handler: a root context starts a plugin
// root, a stream context remembers its root.
func (h *Handler) OnContextCreate(id, parent uint32) {
	if parent == 0 {
		h.p.NewRoot(id)
		return
	}
	r := h.p.Root(parent)
	if s := &h.slots[id%uint32(len(h.slots))]; s.id == 0 {
		s.id, s.r = id, r
		return
	}
	h.streams[id] = r
}

// stream returns the root stream context id was created under.
func (h *Handler) stream(id uint32) *plugin.Root {
	if s := &h.slots[id%uint32(len(h.slots))]; s.id == id {
		return s.r
	}
	return h.streams[id]
}

// OnVMStart implements abi.Handler.
func (h *Handler) OnVMStart(uint32, int) bool { return true }

// OnConfigure implements abi.Handler with plugin.Configure; it defines
// the VM's metrics once a configuration is accepted. A configuration
// the plugin refuses is refused, so Envoy keeps the previous one.
func (h *Handler) OnConfigure(rootID uint32, size int) bool {
	if !h.p.Configure(rootID, size) {
		return false
	}
	h.vm.define(h.host)
	return true
}

// OnRequestHeaders implements abi.Handler with plugin.Request; it
// continues every stream the plugin assigns. A sticky cookie or an
// observation the request leaves waits with the stream for its response.
// A request the plugin answers itself (OFREP) pauses once answered; held
// for its body (OnRequestBody), its headers go on (answer).
func (h *Handler) OnRequestHeaders(id uint32, _ int, endOfStream bool) abi.Action {
	r := h.stream(id)
	if v := h.p.Request(r); v != plugin.Continue {
		return h.answer(id, r, v, endOfStream)
	}
	if sc := h.p.SetCookie(); sc != "" {
		if h.pending == nil {
			h.pending = map[uint32]string{}
		}
		h.pending[id] = strings.Clone(sc)
	}
	if len(h.p.Observed()) > 0 {
		h.observe(id, r)
	}
	return abi.ActionContinue
}

// answer is OnRequestHeaders for a request the plugin answers itself:
// one without a body is answered now (plugin.RequestBody at its end),
// one with a body waits for it.
//
// Waiting for the body, the headers continue: Envoy turns a paused
// proxy_on_request_headers into StopAllIterationAndWatermark for a module
// that exports a body callback, and then delivers it no body at all. So the
// route's upstream may see the request's headers start before the body
// callback answers it (never with forged assignment headers:
// plugin.ReleaseHeaders), and the answer resets that upstream request.
//
//go:noinline
func (h *Handler) answer(id uint32, r *plugin.Root, v plugin.Verdict, endOfStream bool) abi.Action {
	if v == plugin.AwaitBody && endOfStream {
		h.w.bodySize = 0
		h.p.ResumeRequest(h.p.HoldRequest())
		v = h.p.RequestBody(r, true)
	}
	switch v {
	case plugin.Continue:
		return abi.ActionContinue
	case plugin.AwaitBody:
		if h.awaiting == nil {
			h.awaiting = map[uint32]held{}
		}
		h.awaiting[id] = held{r, h.p.HoldRequest()}
		h.p.ReleaseHeaders(r)
		return abi.ActionContinue
	}
	return abi.ActionPause
}

// OnRequestBody implements abi.Handler with plugin.RequestBody for a
// stream the plugin holds (OFREP); any other continues at once. A held
// stream pauses, so Envoy buffers its body, until the plugin has
// answered it.
func (h *Handler) OnRequestBody(id uint32, bodySize int, endOfStream bool) abi.Action {
	if len(h.awaiting) == 0 {
		return abi.ActionContinue
	}
	st, ok := h.awaiting[id]
	if !ok {
		return abi.ActionContinue
	}
	h.w.bodySize = bodySize
	h.p.ResumeRequest(st.req)
	v := h.p.RequestBody(st.r, endOfStream)
	h.w.bodySize = 0
	if v == plugin.AwaitBody {
		return abi.ActionPause
	}
	delete(h.awaiting, id)
	if v == plugin.Continue {
		return abi.ActionContinue
	}
	return abi.ActionPause
}

// observe keeps the outcome slots the request just assigned for stream
// id's response (plugin.Observe), in a record reused if one is free.
//
//go:noinline
func (h *Handler) observe(id uint32, r *plugin.Root) {
	var ob *plugin.Observation
	if n := len(h.free); n > 0 {
		ob, h.free = h.free[n-1], h.free[:n-1]
	}
	if ob = h.p.Observe(r, ob); ob == nil {
		return
	}
	if h.observing == nil {
		h.observing = map[uint32]*plugin.Observation{}
	}
	h.observing[id] = ob
}

// observed counts stream id's response, if its request was observed
// (plugin.ObserveResponse); aborted: it ended without one.
//
//go:noinline
func (h *Handler) observed(id uint32, aborted bool) {
	ob, ok := h.observing[id]
	if !ok {
		return
	}
	delete(h.observing, id)
	h.p.ObserveResponse(ob, aborted)
	h.free = append(h.free, ob)
}

// OnResponseHeaders implements abi.Handler: a stream whose request left a
// sticky cookie gets it as a Set-Cookie header (plugin.SetResponseCookie),
// one whose request was observed is counted; any other returns at once (a
// mesh without sticky bucketing or observed experiments pays only the
// call). It always continues the stream.
func (h *Handler) OnResponseHeaders(id uint32, _ int, _ bool) abi.Action {
	if len(h.pending) == 0 && len(h.observing) == 0 {
		return abi.ActionContinue
	}
	if len(h.observing) > 0 {
		h.observed(id, false)
	}
	if len(h.pending) == 0 {
		return abi.ActionContinue
	}
	v, ok := h.pending[id]
	if !ok {
		return abi.ActionContinue
	}
	delete(h.pending, id)
	h.p.SetResponseCookie(v)
	return abi.ActionContinue
}

// OnDelete implements abi.Handler. A stream forgets its cookie and counts
// its observation as aborted if no response headers came; a root flushes
// its counters before it goes (there is no proxy_on_done: the wasip1 build
// does not export it, to save a VM crossing per stream), and the last
// takes the VM's share out of its gauges.
func (h *Handler) OnDelete(id uint32) {
	if len(h.pending) > 0 {
		delete(h.pending, id) // a stream reset before its response
	}
	if len(h.observing) > 0 {
		h.observed(id, true) // no response headers came: a reset
	}
	if len(h.awaiting) > 0 {
		delete(h.awaiting, id) // a stream reset before its body ended
	}
	if s := &h.slots[id%uint32(len(h.slots))]; s.id == id {
		*s = streamSlot{}
		return
	}
	if _, ok := h.streams[id]; ok {
		delete(h.streams, id)
		return
	}
	if h.p.Delete(id) && h.p.Roots() == 0 {
		h.vm.withdraw(h.host)
	}
}

// OnTick implements abi.Handler: it flushes the root's counters and the
// VM's figures.
func (h *Handler) OnTick(rootID uint32) {
	h.p.Tick(rootID)
	h.vm.flush(h.host)
}

// Waiting is how many streams wait with a sticky cookie or an outcome
// observation for their response: none once every stream has ended.
func (h *Handler) Waiting() int { return len(h.pending) + len(h.observing) + len(h.awaiting) }
