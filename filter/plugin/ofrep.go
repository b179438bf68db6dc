package plugin

import (
	"errors"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/internal/jsonx"
	"github.com/allotmesh/allot/filter/internal/panics"
	"github.com/allotmesh/allot/filter/ofrep"
	"github.com/allotmesh/allot/filter/wire"
)

// The filter's OFREP endpoint (filter/ofrep: the protocol): where the
// configuration enables it, a request under ofrep.Prefix is answered by
// the filter itself, from the same compiled configuration, cache and
// sticky cookie the headers are assigned with; no service answers it (in
// the Wasm module its headers go on to the router, whose upstream request
// is reset by the reply: docs/mesh-admins.md, "Answering OFREP").

// ofrepConfig is a configuration's compiled OFREP settings.
type ofrepConfig struct {
	maxBody int
	origins []string
	// index maps an experiment key to its index; json[i][v] is variation
	// v of experiment i as JSON, as its owner defined it; forced[i] is
	// whether experiment i forces a variation.
	index  map[string]int
	json   [][]string
	forced []bool
	// unit is the index of the "id" attribute (-1: no experiment reads
	// it), which targetingKey fills; known maps every attribute the
	// configuration declares to its index (-1: declared, read by no
	// experiment), which a context field of that name fills.
	unit  int
	known map[string]int
}

// compileOfrep lays out the OFREP settings of f, whose experiments c
// compiled.
func (c *Config) compileOfrep(f *config.Filter) {
	o := &ofrepConfig{
		maxBody: f.Ofrep.MaxBodyBytes,
		origins: f.Ofrep.CorsAllowOrigins,
		index:   make(map[string]int, len(c.keys)),
		json:    make([][]string, len(c.keys)),
		forced:  make([]bool, len(c.keys)),
		unit:    -1,
		known:   map[string]int{},
	}
	for i, key := range c.keys {
		o.index[key] = i
		o.forced[i] = f.Experiments[i].Force != nil
		for _, raw := range f.Experiments[i].Variations {
			o.json[i] = append(o.json[i], string(jsonx.Compact(nil, raw)))
		}
	}
	for _, a := range f.Attributes {
		o.known[a.Name] = -1
	}
	for i, a := range c.attrs {
		if a.name == "id" {
			o.unit = i
		}
		if _, ok := o.known[a.name]; ok {
			o.known[a.name] = i
		}
	}
	c.ofrep = o
}

// AnswerPrefix is the path prefix of the requests the configuration
// answers itself ("" when it answers none): the native module's C warm
// path hands a request under it to Go instead of serving it.
func (c *Config) AnswerPrefix() string {
	if c.ofrep == nil {
		return ""
	}
	return ofrep.Prefix
}

// errAnswer is assign's result for a request the filter answers itself
// (an OFREP request): nothing was removed or assigned.
var errAnswer = errors.New("a request the filter answers")

// ofrepState is the plugin's scratch for the OFREP request in hand.
type ofrepState struct {
	// answering is set while the plugin answers a request: a panic then
	// answers 503 instead of passing the request on.
	answering bool
	kind      ofrep.Kind
	key       string
	ctx       ofrep.Context
	vars      []int32
	body      []byte // the request body, copied
	out       []byte // the answer
	headers   [][2]string
	// pairs are the request headers assign read, for ofrepRequest.
	pairs [][2]string
	// held is the request Request just held for its body (HoldRequest);
	// resume the one the next RequestBody answers (ResumeRequest).
	held, resume *HeldRequest
}

// HeldRequest is what answering an OFREP request held for its body needs
// of its headers: for a host that cannot read them in the body callback
// (proxy-wasm in Envoy, once the headers went on), which keeps it with the
// stream (HoldRequest) and hands it back before each RequestBody
// (ResumeRequest).
type HeldRequest struct {
	kind  ofrep.Kind
	key   string
	pairs [][2]string // origin, if-none-match and cookie headers, copied
}

// HoldRequest returns the request the last Request held for its body (its
// Verdict AwaitBody), nil if none.
func (p *Plugin) HoldRequest() *HeldRequest {
	h := p.of.held
	p.of.held = nil
	return h
}

// ResumeRequest makes the next RequestBody answer h (from HoldRequest)
// without reading the request headers.
func (p *Plugin) ResumeRequest(h *HeldRequest) { p.of.resume = h }

// hold keeps what answering the request needs of its headers (pairs).
func (p *Plugin) hold(pairs [][2]string) {
	h := &HeldRequest{kind: p.of.kind, key: strings.Clone(p.of.key)}
	for _, kv := range pairs {
		switch kv[0] {
		case ofrep.HeaderOrigin, ofrep.HeaderIfNoneMatch, "cookie":
			h.pairs = append(h.pairs, [2]string{kv[0], strings.Clone(kv[1])})
		}
	}
	p.of.held = h
}

// isOFREP reports whether the request (its headers, pairs) is one the
// configuration answers, and keeps its kind and key: assign's one branch.
//
//go:noinline
func (p *Plugin) isOFREP(pairs [][2]string) bool {
	method, path := "", ""
	for _, kv := range pairs {
		switch kv[0] {
		case ":method":
			method = kv[1]
		case ":path":
			path = kv[1]
		}
		if method != "" && path != "" { // Envoy lists pseudo-headers first
			break
		}
	}
	p.of.kind, p.of.key = ofrep.Classify(method, path)
	return p.of.kind != ofrep.None
}

// ofrepRequest is Request for an OFREP request: it answers a preflight, a
// path or method the protocol does not have, and a body over the bound
// (by content-length) at once; else it waits for the body (RequestBody).
// pairs are the request's headers.
func (p *Plugin) ofrepRequest(r *Root, pairs [][2]string) Verdict {
	lr, ok := p.host.(LocalReplier)
	if !ok {
		return p.unanswerable(r)
	}
	p.of.answering = true // Request's recover answers a panic, and resets it
	o := r.cfg.ofrep
	switch p.of.kind {
	case ofrep.Preflight:
		h := ofrep.AppendCORS(p.of.headers[:0], header(pairs, ofrep.HeaderOrigin), o.origins, true)
		return p.reply(r, lr, 204, h, nil, false)
	case ofrep.NotFound:
		return p.replyError(r, lr, pairs, "", &ofrep.Error{Status: 404, Details: "no such OFREP path"})
	case ofrep.NotAllowed:
		return p.replyError(r, lr, pairs, "", &ofrep.Error{Status: 405, Details: "OFREP evaluations are POST"})
	}
	if cl := header(pairs, "content-length"); cl != "" {
		n, err := strconv.Atoi(cl)
		switch {
		case err == nil && n > o.maxBody:
			return p.replyError(r, lr, pairs, "", ofrep.TooLarge(n, o.maxBody))
		case err == nil && n == 0:
			return p.evaluate(r, lr, pairs, nil)
		}
	}
	p.hold(pairs)
	return AwaitBody
}

// RequestBody is the body path of a stream whose request callback returned
// AwaitBody: an OFREP evaluation. It answers 413 as soon as the buffered
// body is over the bound; at the end of the body it evaluates and
// answers. It returns AwaitBody while more is to come, then Answered;
// Continue when the root has nothing to answer (its configuration changed
// meanwhile). Any internal failure answers 503 GENERAL, counted as
// fail_open: the request is the filter's own, so no upstream can serve it.
func (p *Plugin) RequestBody(r *Root, endOfStream bool) (v Verdict) {
	if r == nil || r.cfg == nil || r.cfg.ofrep == nil {
		return Continue
	}
	lr, ok := p.host.(LocalReplier)
	if !ok {
		return p.unanswerable(r)
	}
	p.setCookie, p.observed = p.setCookie[:0], p.observed[:0]
	if p.keepWarm {
		p.warm = warmResult{}
	}
	p.of.answering = true
	defer func() {
		p.of.answering = false
		if x := recover(); x != nil {
			v = p.answerFailure(r, lr, "panic: "+panics.Message(x))
		}
	}()
	o := r.cfg.ofrep
	var pairs [][2]string
	resumed := p.of.resume != nil // else the headers are read at the end
	if h := p.of.resume; resumed {
		p.of.resume = nil
		p.of.kind, p.of.key, pairs = h.kind, h.key, h.pairs
	}
	body, err := lr.RequestBody()
	if err != nil {
		return p.answerFailure(r, lr, "read request body: "+err.Error())
	}
	if len(body) > o.maxBody {
		if resumed && pairs == nil {
			pairs = [][2]string{} // no CORS headers, and none to read
		}
		return p.replyError(r, lr, pairs, "", ofrep.TooLarge(len(body), o.maxBody))
	}
	if !endOfStream {
		return AwaitBody
	}
	p.of.body = append(p.of.body[:0], body...) // RequestBody's slice is the host's until its next call
	if !resumed {
		if pairs, err = p.host.RequestHeaders(); err != nil {
			return p.answerFailure(r, lr, "read request headers: "+err.Error())
		}
		if !p.isOFREP(pairs) {
			return p.answerFailure(r, lr, "body of a request that is not OFREP's")
		}
	}
	return p.evaluate(r, lr, pairs, p.of.body)
}

// evaluate answers an evaluation (p.of.kind: Single or Bulk) of body with
// the request's headers pairs: the context mapped onto the attributes,
// the assignment looked up or computed as the headers' is (cache, sticky
// cookie), the exposure recorded, the answer rendered.
func (p *Plugin) evaluate(r *Root, lr LocalReplier, pairs [][2]string, body []byte) Verdict {
	cfg, o := r.cfg, r.cfg.ofrep
	key := p.of.key
	if e := ofrep.ParseBody(&p.of.ctx, body, o.maxBody); e != nil {
		return p.replyError(r, lr, pairs, key, e)
	}
	if e := ofrep.CheckContext(&p.of.ctx, func(name string) bool { _, ok := o.known[name]; return ok }); e != nil {
		return p.replyError(r, lr, pairs, key, e)
	}
	single := -1
	if p.of.kind == ofrep.Single {
		i, ok := o.index[key]
		if !ok {
			return p.replyError(r, lr, pairs, key, ofrep.NotFoundError(key))
		}
		single = i
	}
	e := p.lookup(r, p.contextValues(r, pairs))
	vars := p.of.vars[:0]
	for range cfg.keys {
		vars = append(vars, -1)
	}
	for j := range e.assignments() {
		i, v := e.at(j)
		vars[i] = int32(v)
	}
	p.of.vars = vars
	exposure := ""
	out := p.of.out[:0]
	if single >= 0 {
		out = ofrep.AppendFlag(out, o.flag(cfg, single, vars[single]), cfg.Version)
		if v := vars[single]; v >= 0 {
			exposure = cfg.dictValues[single][v][len(wire.DictionarySeparator):]
		}
	} else {
		out = ofrep.AppendBulkStart(out)
		for n, i := range cfg.byKey {
			if n > 0 {
				out = append(out, ',')
			}
			out = ofrep.AppendFlag(out, o.flag(cfg, i, vars[i]), cfg.Version)
		}
		out = ofrep.AppendBulkEnd(out, cfg.Version)
		exposure = p.dictionary(cfg, e)
	}
	p.of.out = out
	if exposure != "" && cfg.ExposureState {
		if err := p.host.SetExposure(bytesView(exposure)); err != nil {
			p.host.Log(wire.LogDebug, "allot: exposure not recorded: "+err.Error())
		}
	}
	h := append(p.of.headers[:0], [2]string{ofrep.HeaderContentType, ofrep.ContentTypeJSON})
	status := uint32(200)
	if single < 0 {
		tag := ofrep.ETag(out)
		h = append(h, [2]string{ofrep.HeaderETag, tag})
		if inm := header(pairs, ofrep.HeaderIfNoneMatch); inm != "" && ofrep.Matches(inm, tag) {
			status, out, h = 304, nil, h[1:]
		}
	}
	if len(p.setCookie) > 0 {
		h = append(h, [2]string{wire.SetCookieHeader, stringView(p.setCookie)})
	}
	h = ofrep.AppendCORS(h, header(pairs, ofrep.HeaderOrigin), o.origins, false)
	r.stats.ofrep[0]++
	return p.reply(r, lr, status, h, out, true)
}

// contextValues fills the attribute values of an evaluation from its
// context (p.of.ctx): targetingKey is the "id" attribute; a field named
// as an attribute the configuration declares is that attribute (a string
// as it is, a number or boolean as its JSON text); node attributes are
// the proxy's; the sticky cookie is the request's. Nothing else is read
// from the request.
func (p *Plugin) contextValues(r *Root, pairs [][2]string) []string {
	cfg, o := r.cfg, r.cfg.ofrep
	vals := p.values(cfg.nvals)
	if cfg.jar != nil {
		for _, kv := range pairs {
			if kv[0] == "cookie" {
				cfg.cookieValues(kv[1], vals)
			}
		}
		jar := vals[cfg.nvals-1]
		clear(vals)
		vals[cfg.nvals-1] = jar
	}
	if o.unit >= 0 {
		vals[o.unit] = p.of.ctx.TargetingKey
	}
	for _, f := range p.of.ctx.Fields {
		if i, ok := o.known[f.Name]; ok && i >= 0 && i != o.unit {
			vals[i] = f.Text
		}
	}
	for _, i := range cfg.consts {
		if vals[i] == "" {
			vals[i] = r.consts[i]
		}
	}
	return vals
}

// flag is experiment i's evaluation for a unit assigned variation v (-1:
// not in the experiment: variation 0's value, as GrowthBook serves it).
func (o *ofrepConfig) flag(cfg *Config, i int, v int32) ofrep.Flag {
	f := ofrep.Flag{Key: cfg.keys[i], Reason: ofrep.Split}
	switch {
	case v < 0:
		v, f.Reason = 0, ofrep.Default
	case o.forced[i]:
		f.Reason = ofrep.TargetingMatch
	}
	f.Value, f.Variant = o.json[i][v], cfg.values[i][v]
	return f
}

// replyError answers e, counted as an OFREP error. pairs (nil: read
// again) give the CORS origin.
func (p *Plugin) replyError(r *Root, lr LocalReplier, pairs [][2]string, key string, e *ofrep.Error) Verdict {
	if pairs == nil {
		pairs, _ = p.host.RequestHeaders() // without them, no CORS: the browser sees a network error
	}
	p.of.out = ofrep.AppendError(p.of.out[:0], key, e)
	h := append(p.of.headers[:0], [2]string{ofrep.HeaderContentType, ofrep.ContentTypeJSON})
	if e.Status == 405 {
		h = append(h, [2]string{ofrep.HeaderAllow, ofrep.AllowMethods})
	}
	h = ofrep.AppendCORS(h, header(pairs, ofrep.HeaderOrigin), r.cfg.ofrep.origins, false)
	r.stats.ofrep[1]++
	return p.reply(r, lr, e.Status, h, p.of.out, false)
}

// reply sends a local reply. If the host cannot, the request goes on
// unassigned, its forged headers removed (failOpen): the upstream answers
// it, which is better than no answer.
func (p *Plugin) reply(r *Root, lr LocalReplier, status uint32, h [][2]string, body []byte, evaluated bool) Verdict {
	p.of.headers = h[:0]
	p.setCookie, p.observed = p.setCookie[:0], p.observed[:0] // the reply carries the cookie; nothing is observed
	if err := lr.SendLocalReply(status, h, body); err != nil {
		if evaluated {
			r.stats.ofrep[0]--
		}
		p.failOpen(r, errors.New("OFREP reply not sent: "+err.Error()), nil)
		return Continue
	}
	return Answered
}

// answerPanic answers an OFREP request whose Request panicked (v).
func (p *Plugin) answerPanic(r *Root, v any) Verdict {
	p.of.answering = false
	lr, ok := p.host.(LocalReplier)
	if !ok {
		return p.unanswerable(r)
	}
	return p.answerFailure(r, lr, "panic: "+panics.Message(v))
}

// answerFailure answers an internal failure (why) 503 GENERAL, counted as
// fail_open: the filter never breaks a request, and this one is its own.
func (p *Plugin) answerFailure(r *Root, lr LocalReplier, why string) Verdict {
	r.stats.failOpen++
	p.setCookie, p.observed = p.setCookie[:0], p.observed[:0]
	defer func() { recover() }() // the log's and the reply's: the answer was tried
	p.host.Log(wire.LogDebug, "allot: OFREP request answered 503: "+why)
	p.of.out = ofrep.AppendError(p.of.out[:0], "", &ofrep.Error{Code: ofrep.General, Details: "internal error"})
	h := append(p.of.headers[:0], [2]string{ofrep.HeaderContentType, ofrep.ContentTypeJSON})
	if err := lr.SendLocalReply(503, h, p.of.out); err != nil {
		p.host.Log(wire.LogDebug, "allot: OFREP reply not sent: "+err.Error())
	}
	return Answered
}

// ReleaseHeaders removes the assignment headers a request the plugin
// holds for its body (AwaitBody) carries, for a host that lets its headers
// go on before the body comes (proxy-wasm in Envoy, which delivers a body
// only to a filter whose headers continued): the route's upstream may see
// the request start, never with forged assignments. A failure is logged:
// the request is answered anyway.
func (p *Plugin) ReleaseHeaders(r *Root) {
	if r == nil || r.cfg == nil {
		return
	}
	defer func() { recover() }()
	p.scrub(r.cfg)
}

// unanswerable passes on an OFREP request over a host that cannot answer
// it, unassigned and counted as failed open.
func (p *Plugin) unanswerable(r *Root) Verdict {
	p.failOpen(r, errors.New("host cannot send local replies"), nil)
	return Continue
}

// header is the first value of request header name in pairs ("" if none).
func header(pairs [][2]string, name string) string {
	for _, kv := range pairs {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

// OFREPLimit is the most request body bytes a host need hand RequestBody:
// one more than the largest bound a configuration may set, so that a
// longer body is seen to be over any bound without being copied whole.
const OFREPLimit = config.MaxOfrepMaxBodyBytes + 1
