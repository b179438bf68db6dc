//go:build cgo

package nativemod

import (
	"strconv"

	"github.com/allotmesh/allot/filter/dynmod"
	"github.com/allotmesh/allot/filter/plugin"
)

// A request the plugin answers itself (issue #45: an OFREP evaluation)
// stops at its headers and, when the plugin awaits its body, goes on in
// the body hook, where the plugin reads the body and sends its local reply
// through the host (envoyHost.RequestBody, envoyHost.SendLocalReply).
//
// A local reply carries every header it needs itself: Envoy runs none of
// the sending filter's response hooks on it (Envoy 1.40.0: a response
// header left in the stream's state, as the sticky cookie is, did not
// reach the reply). So nothing the plugin leaves for the response
// (SetCookie, Observed) is handed to C for an answered request: a cookie
// belongs in the reply's headers, and a reply from the filter is no
// upstream outcome to count.

// answerRefusal says why a configuration that answers the requests under
// prefix itself (a local reply) cannot run in this Envoy: the callbacks of
// a local reply it lacks. "" when it can, or when prefix is "" (the
// configuration answers none, and needs none of them).
func (m *module) answerRefusal(prefix string) string {
	if prefix == "" {
		return ""
	}
	why := m.replyUnsupported()
	if why == "" {
		return ""
	}
	return "it answers the requests under " + strconv.Quote(prefix) + " itself, and " + why
}

// answer is the request hook of a request the plugin answers itself
// (verdict v, not Continue). Awaiting its body, the stream is marked so
// that its body reaches RequestBody; a request without a body (its headers
// end the stream) goes to the body path at once, with the body empty.
func (m *module) answer(w *worker, e *entry, s dynmod.Stream, v plugin.Verdict, endOfStream bool) dynmod.HeadersStatus {
	if v == plugin.AwaitBody && endOfStream {
		v = w.plugin.RequestBody(w.plugin.Root(e.id), true)
	}
	if v == plugin.AwaitBody && !endOfStream && !m.awaitBody(s) {
		return dynmod.HeadersContinue // no state to await the body with: the request passes, as on any failure
	}
	return headersStatus(v, endOfStream)
}

// RequestBody implements dynmod.Handler: each part of the body of a
// request the plugin awaits (answer), to the plugin's body path; the
// plugin reads the body through the host (envoyHost.RequestBody) and
// answers (envoyHost.SendLocalReply).
func (m *module) RequestBody(f dynmod.Filter, s dynmod.Stream, h uintptr, endOfStream bool) dynmod.BodyStatus {
	e := (*m.configs.Load())[h]
	if e == nil {
		return dynmod.BodyContinue
	}
	w := m.begin(f, e, m.workerIndex(f))
	defer w.mu.Unlock()
	defer w.host.endRequest()
	return bodyStatus(w.plugin.RequestBody(w.plugin.Root(e.id), endOfStream), endOfStream)
}

// headersStatus is the request-headers status of verdict v: a request
// answered or awaiting its body stops (StopIteration: Envoy still calls
// the body hook, and buffers the parts it is told to). AwaitBody with the
// headers ending the stream would wait for a body that never comes: it
// continues.
func headersStatus(v plugin.Verdict, endOfStream bool) dynmod.HeadersStatus {
	if v == plugin.Answered || (v == plugin.AwaitBody && !endOfStream) {
		return dynmod.HeadersStop
	}
	return dynmod.HeadersContinue
}

// bodyStatus is the request-body status of verdict v: AwaitBody buffers
// the part and waits for the next (but on the last part, which nothing
// follows, it continues), Answered stops the stream without buffering
// (its reply was sent), Continue passes the headers and body on.
func bodyStatus(v plugin.Verdict, endOfStream bool) dynmod.BodyStatus {
	switch {
	case v == plugin.Answered:
		return dynmod.BodyStopNoBuffer
	case v == plugin.AwaitBody && !endOfStream:
		return dynmod.BodyStopAndBuffer
	}
	return dynmod.BodyContinue
}

// begin starts a body hook of stream f of configuration e on worker idx,
// as RequestHeaders starts its request hook (written out there, where a
// call more is a cost on every request): the worker locked (the caller
// unlocks it), its host pointed at the stream, e's root installed.
func (m *module) begin(f dynmod.Filter, e *entry, idx uint32) *worker {
	w := m.worker(idx)
	w.mu.Lock()
	w.host.filter, w.host.entry = f, e
	w.host.requests++
	w.host.batch.Reset() // plugin.HeaderBatcher: nothing queued survives a request
	if w.roots[e.id] == nil {
		w.roots[e.id] = e
		w.plugin.Install(e.id, e.cfg)
	}
	return w
}
