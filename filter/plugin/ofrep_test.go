package plugin_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/ofrep"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/proxywasm"
	"github.com/allotmesh/allot/filter/wire"
)

// ofrepConfig enables OFREP over experiments of every value type, a
// forced one, a targeted one and one nobody is in.
const ofrepConfig = `{"version":"v7","ofrep":{"enabled":true,"maxBodyBytes":256,"corsAllowOrigins":["http://127.0.0.1:8080"]},
	"attributes":[{"name":"country","header":"x-country"},{"name":"plan","cookie":"plan"},{"name":"tier","header":"x-tier"}],
	"experiments":[
		{"key":"button","variations":["blue","green"]},
		{"key":"discount","variations":[0,10,25.5]},
		{"key":"newcheckout","variations":[false,true],"force":1},
		{"key":"ca-only","variations":["a","b"],"condition":{"country":"CA"}},
		{"key":"nobody","variations":["x","y"],"coverage":0},
		{"key":"premium","variations":["p","q"],"hashAttribute":"plan","condition":{"tier":{"$gt":2}}}]}`

// evaluation is one OFREP answer's flag.
type evaluation struct {
	Key, Reason, Variant, ErrorCode, ErrorDetails string
	Value                                         any
	Metadata                                      map[string]any
}

// post sends an OFREP POST of body to path, in parts of size part (0:
// one), with extra headers.
func post(h *fakehost.Host, p *proxywasm.Handler, root uint32, path, body string, part int, extra ...[2]string) fakehost.Stream {
	req := append([][2]string{{":method", "POST"}, {":path", path}, {"content-type", "application/json"}}, extra...)
	var parts [][]byte
	for len(body) > 0 {
		n := len(body)
		if part > 0 {
			n = min(part, n)
		}
		parts = append(parts, []byte(body[:n]))
		body = body[n:]
	}
	return h.Send(p, root, req, parts...)
}

func single(t *testing.T, s fakehost.Stream, status uint32) evaluation {
	t.Helper()
	if s.HeadersOn && len(values(s.Upstream, "x-experiment-button")) > 0 {
		t.Errorf("forged headers went on: %v", s.Upstream)
	}
	if s.Reply == nil {
		t.Fatalf("no local reply; upstream saw %v", s.Upstream)
	}
	if s.Reply.Status != status {
		t.Fatalf("status %d, want %d: %s", s.Reply.Status, status, s.Reply.Body)
	}
	var e evaluation
	if err := json.Unmarshal(s.Reply.Body, &e); err != nil {
		t.Fatalf("answer %q: %v", s.Reply.Body, err)
	}
	return e
}

func bulk(t *testing.T, s fakehost.Stream) map[string]evaluation {
	t.Helper()
	if s.Reply == nil || s.Reply.Status != 200 {
		t.Fatalf("bulk reply %+v", s.Reply)
	}
	var b struct {
		Flags    []evaluation
		Metadata map[string]any
	}
	if err := json.Unmarshal(s.Reply.Body, &b); err != nil {
		t.Fatalf("answer %q: %v", s.Reply.Body, err)
	}
	if v := b.Metadata["configVersion"]; v != "v7" && !strings.HasPrefix(v.(string), "w") { // ofrepConfig's, stickyConfig's
		t.Errorf("bulk metadata %v", b.Metadata)
	}
	out := map[string]evaluation{}
	for _, f := range b.Flags {
		out[f.Key] = f
	}
	return out
}

func TestOFREPSingle(t *testing.T) {
	h, p, root := start(t, ofrepConfig)
	headers, err := h.Request(p, root, [][2]string{{":path", "/"}, {"x-user-id", "u-1"}})
	if err != nil {
		t.Fatal(err)
	}
	e := single(t, post(h, p, root, "/ofrep/v1/evaluate/flags/button", `{"context":{"targetingKey":"u-1"}}`, 0, [2]string{"x-experiment-button", "forged"}), 200)
	if want := values(headers, "x-experiment-button")[0]; e.Key != "button" || e.Variant != want || e.Value != want || e.Reason != ofrep.Split || e.Metadata["configVersion"] != "v7" {
		t.Errorf("button: %+v, header %q", e, want)
	}
	e = single(t, post(h, p, root, "/ofrep/v1/evaluate/flags/discount", `{"context":{"targetingKey":"u-1"}}`, 5), 200)
	if v, ok := e.Value.(float64); !ok || strconv.FormatFloat(v, 'f', -1, 64) != e.Variant {
		t.Errorf("discount: value %#v, variant %q: want the number the variant renders", e.Value, e.Variant)
	}
	e = single(t, post(h, p, root, "/ofrep/v1/evaluate/flags/newcheckout", `{"context":{"targetingKey":"u-1"}}`, 0), 200)
	if e.Value != true || e.Variant != "true" || e.Reason != ofrep.TargetingMatch {
		t.Errorf("forced: %+v", e)
	}
	e = single(t, post(h, p, root, "/ofrep/v1/evaluate/flags/nobody", `{"context":{"targetingKey":"u-1"}}`, 0), 200)
	if e.Value != "x" || e.Variant != "x" || e.Reason != ofrep.Default {
		t.Errorf("not in the experiment: %+v, want variation 0, DEFAULT", e)
	}
	e = single(t, post(h, p, root, "/ofrep/v1/evaluate/flags/ca-only", `{"context":{"targetingKey":"u-1","country":"CA"}}`, 0), 200)
	if e.Reason != ofrep.Split {
		t.Errorf("targeted, matched: %+v", e)
	}
	e = single(t, post(h, p, root, "/ofrep/v1/evaluate/flags/premium", `{"context":{"targetingKey":"u-1","tier":3,"plan":"gold"}}`, 0), 200)
	if e.Reason != ofrep.Split {
		t.Errorf("number attribute, other hash attribute: %+v", e)
	}
	if got := string(h.Properties[wire.ExposureProperty]); got != `premium="`+e.Variant+`"` {
		t.Errorf("exposure %q", got)
	}
	p.OnTick(root)
	if n := h.Counter(wire.MetricOfrepEvaluations); n != 6 {
		t.Errorf("%s = %d, want 6", wire.MetricOfrepEvaluations, n)
	}
	if p.Waiting() != 0 {
		t.Errorf("%d streams still waiting", p.Waiting())
	}
}

func TestOFREPErrors(t *testing.T) {
	h, p, root := start(t, ofrepConfig)
	big := `{"context":{"targetingKey":"` + strings.Repeat("u", 300) + `"}}`
	tests := []struct {
		name, method, path, body string
		part                     int
		extra                    [][2]string
		status                   uint32
		code                     string
		bodyCalls                int
	}{
		{"bad JSON", "POST", "/ofrep/v1/evaluate/flags/button", `{"context":`, 0, nil, 400, ofrep.ParseError, 1},
		{"missing targeting key", "POST", "/ofrep/v1/evaluate/flags", `{"context":{"country":"CA"}}`, 0, nil, 400, ofrep.TargetingKeyMissing, 1},
		{"no body", "POST", "/ofrep/v1/evaluate/flags", ``, 0, nil, 400, ofrep.TargetingKeyMissing, 0},
		{"empty body by length", "POST", "/ofrep/v1/evaluate/flags", ``, 0, [][2]string{{"content-length", "0"}}, 400, ofrep.TargetingKeyMissing, 0},
		{"invalid context", "POST", "/ofrep/v1/evaluate/flags/button", `{"context":{"targetingKey":"u","country":["CA"]}}`, 0, nil, 400, ofrep.InvalidContext, 1},
		{"unknown flag", "POST", "/ofrep/v1/evaluate/flags/other-teams", `{"context":{"targetingKey":"u"}}`, 0, nil, 404, ofrep.FlagNotFound, 1},
		{"oversized by length", "POST", "/ofrep/v1/evaluate/flags", big, 0, [][2]string{{"content-length", strconv.Itoa(len(big))}}, 413, ofrep.ParseError, 0},
		{"oversized mid-body", "POST", "/ofrep/v1/evaluate/flags", big, 100, nil, 413, ofrep.ParseError, 3},
		{"method", "GET", "/ofrep/v1/evaluate/flags", ``, 0, nil, 405, "", 0},
		{"path", "POST", "/ofrep/v1/configuration", `{}`, 0, nil, 404, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req := append([][2]string{{":method", tc.method}, {":path", tc.path}}, tc.extra...)
			var parts [][]byte
			for b := tc.body; len(b) > 0; {
				n := len(b)
				if tc.part > 0 {
					n = min(n, tc.part)
				}
				parts, b = append(parts, []byte(b[:n])), b[n:]
			}
			s := h.Send(p, root, req, parts...)
			e := single(t, s, tc.status)
			if e.ErrorCode != tc.code || e.ErrorDetails == "" || s.BodyCalls != tc.bodyCalls {
				t.Errorf("%+v after %d body calls, want %s after %d", e, s.BodyCalls, tc.code, tc.bodyCalls)
			}
			if tc.code == ofrep.FlagNotFound && e.Key != "other-teams" {
				t.Errorf("key %q", e.Key)
			}
			if s.Reply.Header("content-type") != "application/json" {
				t.Errorf("content-type %q", s.Reply.Header("content-type"))
			}
		})
	}
	p.OnTick(root)
	if n := h.Counter(wire.MetricOfrepErrors); n != int64(len(tests)) {
		t.Errorf("%s = %d, want %d", wire.MetricOfrepErrors, n, len(tests))
	}
	if n := h.Counter(wire.MetricFailOpen); n != 0 {
		t.Errorf("fail_open = %d", n)
	}
}

func TestOFREPBulkETag(t *testing.T) {
	h, p, root := start(t, ofrepConfig)
	body := `{"context":{"targetingKey":"u-2","country":"CA"}}`
	s := post(h, p, root, "/ofrep/v1/evaluate/flags", body, 7)
	flags := bulk(t, s)
	if len(flags) != 6 || flags["ca-only"].Reason != ofrep.Split || flags["nobody"].Reason != ofrep.Default || flags["premium"].Reason != ofrep.Default {
		t.Errorf("flags %+v", flags)
	}
	tag, first := s.Reply.Header("etag"), string(s.Reply.Body)
	if len(tag) != 18 || tag[0] != '"' {
		t.Fatalf("ETag %q", tag)
	}
	if exp := string(h.Properties[wire.ExposureProperty]); !strings.Contains(exp, `button="`+flags["button"].Variant+`"`) || strings.Contains(exp, "nobody") {
		t.Errorf("exposure %q: want the assignments returned, those the unit is in", exp)
	}
	s = post(h, p, root, "/ofrep/v1/evaluate/flags", body, 0, [2]string{"if-none-match", tag})
	if s.Reply == nil || s.Reply.Status != 304 || len(s.Reply.Body) != 0 || s.Reply.Header("etag") != tag {
		t.Errorf("If-None-Match of the same answer: %+v", s.Reply)
	}
	// The tag is the answer's: another unit's answer matches it exactly
	// when it is the same.
	for i := range 20 {
		ctx := fmt.Sprintf(`{"context":{"targetingKey":"u-%d","country":"CA"}}`, i)
		fresh := post(h, p, root, "/ofrep/v1/evaluate/flags", ctx, 0)
		s = post(h, p, root, "/ofrep/v1/evaluate/flags", ctx, 0, [2]string{"if-none-match", tag})
		if same := string(fresh.Reply.Body) == first; same != (s.Reply.Status == 304) {
			t.Errorf("unit u-%d: same answer %v, status %d", i, same, s.Reply.Status)
		}
	}
	// A new configuration (version) is a new answer.
	if !h.Configure(p, root, []byte(strings.Replace(ofrepConfig, `"v7"`, `"v8"`, 1))) {
		t.Fatal("reconfigure refused")
	}
	s = post(h, p, root, "/ofrep/v1/evaluate/flags", body, 0, [2]string{"if-none-match", tag})
	if s.Reply == nil || s.Reply.Status != 200 {
		t.Errorf("after a configuration change: %+v", s.Reply)
	}
}

func TestOFREPCORS(t *testing.T) {
	h, p, root := start(t, ofrepConfig)
	s := h.Send(p, root, [][2]string{{":method", "OPTIONS"}, {":path", "/ofrep/v1/evaluate/flags"}, {"origin", "http://127.0.0.1:8080"}})
	if r := s.Reply; r == nil || r.Status != 204 || r.Header("access-control-allow-origin") != "http://127.0.0.1:8080" ||
		r.Header("access-control-allow-credentials") != "true" || r.Header("access-control-allow-methods") != "POST" ||
		r.Header("access-control-allow-headers") != "content-type, if-none-match" || r.Header("access-control-max-age") == "" {
		t.Errorf("preflight %+v", s.Reply)
	}
	s = post(h, p, root, "/ofrep/v1/evaluate/flags", `{"context":{"targetingKey":"u"}}`, 0, [2]string{"origin", "http://127.0.0.1:8080"})
	if r := s.Reply; r.Header("access-control-allow-origin") != "http://127.0.0.1:8080" || r.Header("access-control-expose-headers") != "ETag" || r.Header("vary") != "Origin" {
		t.Errorf("answer to a listed origin: %+v", r.Headers)
	}
	s = post(h, p, root, "/ofrep/v1/evaluate/flags", `{"context":{"targetingKey":"u"}}`, 0, [2]string{"origin", "http://evil.example"})
	if r := s.Reply; r.Header("access-control-allow-origin") != "" {
		t.Errorf("answer to another origin: %+v", r.Headers)
	}
}

// TestOFREPSticky: a browser's bulk evaluation returns its sticky
// assignment and refreshes its cookie, so its next request's headers agree
// even after the weights move.
func TestOFREPSticky(t *testing.T) {
	cfg := strings.Replace(stickyConfig("0.5,0.5", 0, 0), `"version"`, `"ofrep":{"enabled":true},"version"`, 1)
	h, p, root := start(t, cfg)
	s := post(h, p, root, "/ofrep/v1/evaluate/flags", `{"context":{"targetingKey":"u-5"}}`, 0)
	flags := bulk(t, s)
	sc := s.Reply.Header("set-cookie")
	if sc == "" {
		t.Fatalf("no Set-Cookie on the answer: %+v", s.Reply.Headers)
	}
	moved := strings.Replace(stickyConfig("0.01,0.99", 0, 0), `"version"`, `"ofrep":{"enabled":true},"version"`, 1)
	if !h.Configure(p, root, []byte(moved)) {
		t.Fatal("reconfigure refused")
	}
	cookie, _, _ := strings.Cut(sc, ";")
	got, _ := exchange(t, h, p, root, "u-5", cookie)
	if got != flags["checkout"].Variant {
		t.Errorf("header after the weights moved: %q, OFREP said %q", got, flags["checkout"].Variant)
	}
	s = post(h, p, root, "/ofrep/v1/evaluate/flags", `{"context":{"targetingKey":"u-5"}}`, 0, [2]string{"cookie", cookie})
	if f := bulk(t, s); f["checkout"].Variant != flags["checkout"].Variant {
		t.Errorf("OFREP with the cookie after the weights moved: %q, want %q", f["checkout"].Variant, flags["checkout"].Variant)
	}
}

// TestOFREPOff: without ofrep.enabled a request under /ofrep/v1/ is
// assigned and continues like any other.
func TestOFREPOff(t *testing.T) {
	h, p, root := start(t, `{"experiments":[{"key":"button","variations":["blue","green"]}]}`)
	s := post(h, p, root, "/ofrep/v1/evaluate/flags", `{"context":{"targetingKey":"u"}}`, 0, [2]string{"x-user-id", "u"}, [2]string{"x-experiment-button", "forged"})
	if s.Reply != nil || len(values(s.Upstream, "x-experiment-button")) != 1 || values(s.Upstream, "x-experiment-button")[0] == "forged" {
		t.Errorf("reply %+v, upstream %v", s.Reply, s.Upstream)
	}
	if p.Plugin().Config(root).AnswerPrefix() != "" {
		t.Error("AnswerPrefix without OFREP")
	}
	_, p2, root2 := start(t, ofrepConfig)
	if got := p2.Plugin().Config(root2).AnswerPrefix(); got != "/ofrep/v1/" {
		t.Errorf("AnswerPrefix = %q", got)
	}
}

// TestOFREPFailures: a reply the host cannot send lets the request on,
// unassigned and scrubbed; a panic or a host failure while answering
// answers 503 GENERAL; each counts as fail_open.
func TestOFREPFailures(t *testing.T) {
	h, p, root := start(t, ofrepConfig)
	h.Inject(fakehost.Fault{Call: "proxy_send_local_response"})
	s := post(h, p, root, "/ofrep/v1/evaluate/flags", `{"context":{"targetingKey":"u"}}`, 0, [2]string{"x-experiment-button", "forged"})
	if s.Reply != nil || s.Upstream == nil || len(values(h.Headers[abi.RequestHeaders], "x-experiment-button")) != 0 {
		t.Errorf("reply not sent: %+v, upstream %v; want the request on, scrubbed", s.Reply, s.Upstream)
	}
	h.Inject(fakehost.Fault{Call: "proxy_get_buffer_bytes", Panic: true})
	s = post(h, p, root, "/ofrep/v1/evaluate/flags", `{"context":{"targetingKey":"u"}}`, 0)
	if e := single(t, s, 503); e.ErrorCode != ofrep.General {
		t.Errorf("panic: %+v", e)
	}
	h.Inject(fakehost.Fault{Call: "proxy_set_property", Panic: true})
	s = post(h, p, root, "/ofrep/v1/evaluate/flags", `{"context":{"targetingKey":"u"}}`, 0)
	if e := single(t, s, 503); e.ErrorCode != ofrep.General {
		t.Errorf("panic writing the exposure: %+v", e)
	}
	h.Fail = nil
	p.OnTick(root)
	if n := h.Counter(wire.MetricFailOpen); n != 3 {
		t.Errorf("fail_open = %d, want 3", n)
	}
}

// TestOFREPDifferential: for random units and attributes, OFREP's variant
// is the x-experiment-<key> header the same plugin adds to a header
// request, and a unit without the header is DEFAULT.
func TestOFREPDifferential(t *testing.T) {
	h, p, root := start(t, ofrepConfig)
	rng := rand.New(rand.NewPCG(45, 1))
	countries := []string{"CA", "US", "FR", ""}
	plans := []string{"gold", "free", ""}
	for n := range 500 {
		id := fmt.Sprintf("unit-%d-%x", n, rng.Uint64())
		country, plan, tier := countries[rng.IntN(len(countries))], plans[rng.IntN(len(plans))], strconv.Itoa(rng.IntN(5))
		req := [][2]string{{":path", "/"}, {"x-user-id", id}, {"x-tier", tier}}
		ctx := map[string]any{"targetingKey": id, "tier": json.Number(tier)}
		if country != "" {
			req = append(req, [2]string{"x-country", country})
			ctx["country"] = country
		}
		if plan != "" {
			req = append(req, [2]string{"cookie", "plan=" + plan})
			ctx["plan"] = plan
		}
		up, err := h.Request(p, root, req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := json.Marshal(map[string]any{"context": ctx})
		flags := bulk(t, post(h, p, root, "/ofrep/v1/evaluate/flags", string(body), 0))
		for key, f := range flags {
			hv := values(up, "x-experiment-"+key)
			switch {
			case len(hv) == 1 && (f.Variant != hv[0] || f.Reason == ofrep.Default):
				t.Fatalf("%s %v: header %q, OFREP %+v", id, ctx, hv[0], f)
			case len(hv) == 0 && f.Reason != ofrep.Default:
				t.Fatalf("%s %v: no header, OFREP %+v", id, ctx, f)
			}
		}
	}
}

// replier is a host that answers as the native module's does: it reads the
// request headers in the body callback (no HoldRequest), and hands the
// plugin the body the test sets.
type replier struct {
	plugin.Host
	body    []byte
	replies []fakehost.LocalReply
}

func (r *replier) RequestBody() ([]byte, error) { return r.body, nil }

func (r *replier) SendLocalReply(status uint32, headers [][2]string, body []byte) error {
	r.replies = append(r.replies, fakehost.LocalReply{Status: status, Headers: headers, Body: append([]byte(nil), body...)})
	return nil
}

// TestOFREPBodyReadsHeaders: over a host that reads the request headers in
// the body callback (the native module's), interleaved streams are each
// answered from their own headers and body, a body over the bound is
// answered 413 as soon as it is.
func TestOFREPBodyReadsHeaders(t *testing.T) {
	fh := fakehost.New()
	fh.Buffers[abi.BufferPluginConfiguration] = []byte(ofrepConfig)
	host := &replier{Host: proxywasm.NewHost(fh)}
	pl := plugin.New(host)
	pl.NewRoot(1)
	if !pl.Configure(1, len(ofrepConfig)) {
		t.Fatalf("configuration refused: %v", fh.Logs)
	}
	r := pl.Root(1)
	reqA := [][2]string{{":method", "POST"}, {":path", "/ofrep/v1/evaluate/flags/button"}, {"origin", "http://127.0.0.1:8080"}}
	reqB := [][2]string{{":method", "POST"}, {":path", "/ofrep/v1/evaluate/flags/nosuch"}}
	fh.Headers[abi.RequestHeaders] = reqA
	if v := pl.Request(r); v != plugin.AwaitBody {
		t.Fatalf("A: %v", v)
	}
	fh.Headers[abi.RequestHeaders] = reqB
	if v := pl.Request(r); v != plugin.AwaitBody {
		t.Fatalf("B: %v", v)
	}
	fh.Headers[abi.RequestHeaders] = reqA
	host.body = []byte(`{"context":{"targ`)
	if v := pl.RequestBody(r, false); v != plugin.AwaitBody {
		t.Fatalf("A's first part: %v", v)
	}
	host.body = []byte(`{"context":{"targetingKey":"u-1"}}`)
	if v := pl.RequestBody(r, true); v != plugin.Answered {
		t.Fatalf("A's end: %v", v)
	}
	fh.Headers[abi.RequestHeaders] = reqB
	if v := pl.RequestBody(r, true); v != plugin.Answered {
		t.Fatalf("B's end: %v", v)
	}
	host.body = make([]byte, 300)
	if v := pl.RequestBody(r, false); v != plugin.Answered {
		t.Fatalf("an oversized part: %v", v)
	}
	if len(host.replies) != 3 || host.replies[0].Status != 200 || host.replies[0].Header("access-control-allow-origin") == "" ||
		host.replies[1].Status != 404 || host.replies[2].Status != 413 {
		t.Errorf("replies %+v", host.replies)
	}
}
