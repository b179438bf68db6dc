//go:build cgo

package nativemod

import (
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/dynmod"
	"github.com/allotmesh/allot/filter/plugin"
)

// TestVerdictStatuses: each plugin.Verdict maps to the status that makes
// Envoy do what it says — a request answered stops (its headers, or its
// body unbuffered: the reply was sent), one awaiting its body stops its
// headers and buffers each part, one the plugin lets go continues; and
// AwaitBody where no body follows (the headers or the last part end the
// stream) continues rather than wait forever.
func TestVerdictStatuses(t *testing.T) {
	for _, tc := range []struct {
		v       plugin.Verdict
		eos     bool
		headers dynmod.HeadersStatus
		body    dynmod.BodyStatus
	}{
		{plugin.Continue, false, dynmod.HeadersContinue, dynmod.BodyContinue},
		{plugin.Continue, true, dynmod.HeadersContinue, dynmod.BodyContinue},
		{plugin.AwaitBody, false, dynmod.HeadersStop, dynmod.BodyStopAndBuffer},
		{plugin.AwaitBody, true, dynmod.HeadersContinue, dynmod.BodyContinue},
		{plugin.Answered, false, dynmod.HeadersStop, dynmod.BodyStopNoBuffer},
		{plugin.Answered, true, dynmod.HeadersStop, dynmod.BodyStopNoBuffer},
	} {
		if got := headersStatus(tc.v, tc.eos); got != tc.headers {
			t.Errorf("headersStatus(%d, end of stream %v) = %d, want %d", tc.v, tc.eos, got, tc.headers)
		}
		if got := bodyStatus(tc.v, tc.eos); got != tc.body {
			t.Errorf("bodyStatus(%d, end of stream %v) = %d, want %d", tc.v, tc.eos, got, tc.body)
		}
	}
	// The ABI's numbers (envoy_dynamic_module_type_on_http_filter_request_*_status).
	if dynmod.HeadersContinue != 0 || dynmod.HeadersStop != 1 || dynmod.BodyContinue != 0 ||
		dynmod.BodyStopAndBuffer != 1 || dynmod.BodyStopNoBuffer != 3 {
		t.Error("a status is not the ABI's number")
	}
}

// TestAnswerMarksStream: a request awaiting its body marks its stream (its
// body then reaches RequestBody) and stops its headers; without stream
// state to mark, it continues (passed on, as on any failure); a request
// without a body goes to the body path at once; an answered one stops.
func TestAnswerMarksStream(t *testing.T) {
	f := newFakeModule(1)
	h := f.ConfigNew(0, FilterName, []byte(experimentsConfig("v1", 1)))
	e := (*f.configs.Load())[h]
	w := f.worker(0)
	for _, tc := range []struct {
		name   string
		v      plugin.Verdict
		eos    bool
		marked bool // awaitBody succeeds
		want   dynmod.HeadersStatus
		marks  int
	}{
		{"awaiting, marked", plugin.AwaitBody, false, true, dynmod.HeadersStop, 1},
		{"awaiting, no state", plugin.AwaitBody, false, false, dynmod.HeadersContinue, 1},
		{"awaiting, no body to come (the plugin's stub continues)", plugin.AwaitBody, true, true, dynmod.HeadersContinue, 0},
		{"answered", plugin.Answered, false, true, dynmod.HeadersStop, 0},
	} {
		marks := 0
		f.awaitBody = func(dynmod.Stream) bool { marks++; return tc.marked }
		w.mu.Lock()
		w.host.filter, w.host.entry = dynmod.Filter(1), e
		if w.roots[e.id] == nil {
			w.roots[e.id] = e
			w.plugin.Install(e.id, e.cfg)
		}
		got := f.answer(w, e, 2, tc.v, tc.eos)
		w.host.endRequest()
		w.mu.Unlock()
		if got != tc.want || marks != tc.marks {
			t.Errorf("%s: status %d, %d marks; want %d, %d", tc.name, got, marks, tc.want, tc.marks)
		}
	}
}

// TestRequestBodyWithoutConfiguration: a body hook of a configuration the
// module no longer knows passes the request on.
func TestRequestBodyWithoutConfiguration(t *testing.T) {
	f := newFakeModule(1)
	if got := f.RequestBody(1, 0, 12345, true); got != dynmod.BodyContinue {
		t.Errorf("RequestBody of an unknown configuration = %d, want continue", got)
	}
	h := f.ConfigNew(0, FilterName, []byte(experimentsConfig("v1", 1)))
	if got := f.RequestBody(1, 0, h, true); got != dynmod.BodyContinue {
		t.Errorf("RequestBody with the plugin's stub = %d, want continue", got)
	}
}

// TestAnswerRefusal: a configuration that answers requests is refused in
// an Envoy that lacks a local reply's callbacks, naming them and the
// prefix; one that answers none needs none; with them all, both run.
func TestAnswerRefusal(t *testing.T) {
	m := newModule()
	m.replyUnsupported = func() string { return "this Envoy lacks callbacks a local reply needs: x_send_response" }
	if why := m.answerRefusal("/ofrep/v1/evaluate/flags"); !strings.Contains(why, "x_send_response") ||
		!strings.Contains(why, `"/ofrep/v1/evaluate/flags"`) {
		t.Errorf("answerRefusal = %q, want the prefix and the missing callback named", why)
	}
	if why := m.answerRefusal(""); why != "" {
		t.Errorf("no answer prefix: refused: %q", why)
	}
	m.replyUnsupported = func() string { return "" }
	if why := m.answerRefusal("/ofrep/v1/evaluate/flags"); why != "" {
		t.Errorf("every callback present: refused: %q", why)
	}
	// In a test binary no callback resolves: the default says so.
	if why := newModule().answerRefusal("/p"); !strings.Contains(why, "envoy_dynamic_module_callback_http_send_response") {
		t.Errorf("answerRefusal in a test binary = %q, want send_response named", why)
	}
}
