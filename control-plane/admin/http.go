package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// MaxBodyBytes bounds a request body (and a gRPC request message); larger
// ones get 413 / RESOURCE_EXHAUSTED.
const MaxBodyBytes = 1 << 20

// HTTP serves the admin API as HTTP/JSON under /v1/:
//
//	POST   /v1/experiments                     CreateExperiment (body: Experiment)
//	GET    /v1/experiments?owner=&status=&service=  ListExperiments
//	GET    /v1/experiments/{key}               GetExperiment
//	PUT    /v1/experiments/{key}               UpdateExperiment (body: Experiment with revision)
//	DELETE /v1/experiments/{key}[?revision=N]  DeleteExperiment
//	POST   /v1/experiments/{key}:start         StartExperiment (also /start; optional body {"revision", "acknowledgeRollback"})
//	POST   /v1/experiments/{key}:pause         PauseExperiment (also /pause)
//	POST   /v1/experiments/{key}:stop          StopExperiment (also /stop)
//	POST   /v1/evaluate                        EvaluateExperiments (body: EvaluateExperimentsRequest)
//	GET    /v1/experiments/{key}/history       GetHistory of one experiment
//	GET    /v1/experiments/{key}/outcomes[?minutes=N]  GetOutcomes: an observed experiment's outcomes per variation
//	GET    /v1/history                         GetHistory of every experiment
//	GET    /v1/rollout                         GetRollout
//	GET    /v1/whoami                          WhoAmI (the caller's name, role, namespaces)
//
// Bodies are the proto3 JSON form of allot.admin.v1 / allot.experiment.v1
// messages; unknown fields are rejected. Errors are {"error": Error}.
type HTTP struct {
	svc     *Service
	tokens  *Tokens
	log     *slog.Logger
	metrics *Metrics
	mux     *http.ServeMux
}

// Option configures a transport (HTTP or GRPC).
type Option func(*transport)

// transport is what both transports share.
type transport struct {
	log     *slog.Logger
	metrics *Metrics
}

// WithLogger sets the transport's logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(t *transport) { t.log = l } }

// WithMetrics records request latency in m.
func WithMetrics(m *Metrics) Option { return func(t *transport) { t.metrics = m } }

func newTransport(opts []Option) transport {
	var t transport
	for _, o := range opts {
		o(&t)
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	return t
}

// httpHandler handles one authenticated request. It returns the status and
// body of a success (a proto.Message is written as proto3 JSON, anything
// else with encoding/json, nil writes no body) or an error.
type httpHandler func(r *http.Request, p *Principal) (int, any, error)

// NewHTTP returns the HTTP/JSON transport of svc, authenticating with tokens.
func NewHTTP(svc *Service, tokens *Tokens, opts ...Option) *HTTP {
	t := newTransport(opts)
	h := &HTTP{svc: svc, tokens: tokens, log: t.log, metrics: t.metrics, mux: http.NewServeMux()}
	h.route("POST /v1/experiments", "CreateExperiment", h.create)
	h.route("GET /v1/experiments", "ListExperiments", h.list)
	h.route("GET /v1/experiments/{key}", "GetExperiment", h.get)
	h.route("PUT /v1/experiments/{key}", "UpdateExperiment", h.update)
	h.route("DELETE /v1/experiments/{key}", "DeleteExperiment", h.delete)
	h.route("POST /v1/experiments/{key}", "Transition", h.transition)
	h.route("POST /v1/experiments/{key}/{action}", "Transition", h.transition)
	h.route("POST /v1/evaluate", "EvaluateExperiments", h.evaluate)
	h.route("GET /v1/experiments/{key}/history", "GetHistory", h.history)
	h.route("GET /v1/experiments/{key}/outcomes", "GetOutcomes", h.outcomes)
	h.route("GET /v1/history", "GetHistory", h.history)
	h.route("GET /v1/rollout", "GetRollout", h.rollout)
	h.route("GET /v1/whoami", "WhoAmI", h.whoami)
	h.mux.HandleFunc("/v1/", func(w http.ResponseWriter, r *http.Request) {
		h.writeError(w, r, errorf(CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})
	return h
}

// ServeHTTP implements http.Handler.
func (h *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

var jsonOut = protojson.MarshalOptions{EmitUnpopulated: false}

// statusWriter remembers the status written, for metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

// route registers fn under pattern: authentication, metrics and the
// writing of results and errors happen here, once.
func (h *HTTP) route(pattern, method string, fn httpHandler) {
	h.mux.HandleFunc(pattern, func(rw http.ResponseWriter, r *http.Request) {
		start := time.Now()
		w := &statusWriter{ResponseWriter: rw}
		name := method
		if method == "Transition" {
			name = transitionMethod(r)
		}
		defer func() { h.metrics.observe("http", name, strconv.Itoa(w.status), time.Since(start)) }()
		p := h.tokens.Authenticate(bearer(r.Header.Get("Authorization")))
		if p == nil {
			h.log.WarnContext(r.Context(), "admin request unauthenticated", "transport", "http", "method", name, "path", r.URL.Path, "remote", r.RemoteAddr)
			w.Header().Set("WWW-Authenticate", `Bearer realm="allot"`)
			h.writeError(w, r, errorf(CodeUnauthenticated, "missing or invalid bearer token"))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		status, body, err := fn(r, p)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		h.write(w, r, status, body)
	})
}

// transitionMethod names the RPC of a POST /v1/experiments/{key}:action or
// /{key}/action request, for metrics.
func transitionMethod(r *http.Request) string {
	_, action := splitAction(r)
	switch action {
	case "start":
		return "StartExperiment"
	case "pause":
		return "PauseExperiment"
	case "stop":
		return "StopExperiment"
	}
	return "Unknown"
}

// splitAction returns the key and action of a transition request.
func splitAction(r *http.Request) (key, action string) {
	if a := r.PathValue("action"); a != "" {
		return r.PathValue("key"), a
	}
	key, action, _ = strings.Cut(r.PathValue("key"), ":")
	return key, action
}

// decode reads a JSON body into m: unknown fields are rejected, a body over
// MaxBodyBytes (route limits every body) is 413. An empty body leaves m unset unless
// required.
func decode(r *http.Request, m proto.Message, required bool) error {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return errorf(CodeTooLarge, "request body exceeds %d bytes", MaxBodyBytes)
		}
		return errorf(CodeInvalid, "read request body: %v", err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		if required {
			return &Error{Code: CodeInvalid, Message: "invalid request", Details: []string{"body: required"}}
		}
		return nil
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		return &Error{Code: CodeInvalid, Message: "invalid JSON", Details: []string{protoError(err)}}
	}
	return nil
}

func (h *HTTP) create(r *http.Request, p *Principal) (int, any, error) {
	e := &experimentv1.Experiment{}
	if err := decode(r, e, true); err != nil {
		return 0, nil, err
	}
	wait, err := waitParam(r)
	if err != nil {
		return 0, nil, err
	}
	ro, err := h.svc.Await(r.Context(), wait, func() (_ int64, err error) {
		e, err = h.svc.Create(r.Context(), p, e)
		return e.GetRevision(), err
	})
	if err != nil {
		return 0, nil, err
	}
	body, err := withRollout(e, ro)
	return http.StatusCreated, body, err
}

func (h *HTTP) rollout(r *http.Request, p *Principal) (int, any, error) {
	ro, err := h.svc.Rollout(r.Context(), p)
	return http.StatusOK, ro, err
}

func (h *HTTP) whoami(r *http.Request, p *Principal) (int, any, error) {
	c, err := h.svc.WhoAmI(r.Context(), p)
	return http.StatusOK, c, err
}

func (h *HTTP) get(r *http.Request, p *Principal) (int, any, error) {
	e, err := h.svc.Get(r.Context(), p, r.PathValue("key"))
	return http.StatusOK, e, err
}

func (h *HTTP) list(r *http.Request, p *Principal) (int, any, error) {
	q := r.URL.Query()
	var unknown []string
	for k := range q {
		if k != "owner" && k != "status" && k != "service" {
			unknown = append(unknown, k+": unknown query parameter (want owner, status, service)")
		}
	}
	if len(unknown) > 0 {
		return 0, nil, &Error{Code: CodeInvalid, Message: "invalid filter", Details: unknown}
	}
	exps, rev, err := h.svc.List(r.Context(), p, Filter{Owner: q.Get("owner"), Status: q.Get("status"), Service: q.Get("service")})
	if err != nil {
		return 0, nil, err
	}
	items, err := marshalAll(exps)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"experiments": items, "revision": strconv.FormatInt(rev, 10)}, nil
}

func (h *HTTP) update(r *http.Request, p *Principal) (int, any, error) {
	e := &experimentv1.Experiment{}
	if err := decode(r, e, true); err != nil {
		return 0, nil, err
	}
	key := r.PathValue("key")
	switch {
	case e.Key == "":
		e.Key = key
	case e.Key != key:
		return 0, nil, &Error{Code: CodeInvalid, Message: "invalid experiment", Details: []string{"key: " + strconv.Quote(e.Key) + " does not match the URL's " + strconv.Quote(key)}}
	}
	wait, err := waitParam(r)
	if err != nil {
		return 0, nil, err
	}
	ro, err := h.svc.Await(r.Context(), wait, func() (_ int64, err error) {
		e, err = h.svc.Update(r.Context(), p, e)
		return e.GetRevision(), err
	})
	if err != nil {
		return 0, nil, err
	}
	body, err := withRollout(e, ro)
	return http.StatusOK, body, err
}

func (h *HTTP) delete(r *http.Request, p *Principal) (int, any, error) {
	rev, err := revisionParam(r)
	if err != nil {
		return 0, nil, err
	}
	wait, err := waitParam(r)
	if err != nil {
		return 0, nil, err
	}
	ro, err := h.svc.Await(r.Context(), wait, func() (int64, error) {
		return 0, h.svc.Delete(r.Context(), p, r.PathValue("key"), rev) // the revision of a delete is not returned: Wait reads it
	})
	if err != nil || ro == nil {
		return http.StatusNoContent, nil, err
	}
	body, err := withRollout(nil, ro)
	return http.StatusOK, body, err
}

func revisionParam(r *http.Request) (int64, error) {
	s := r.URL.Query().Get("revision")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, &Error{Code: CodeInvalid, Message: "invalid revision", Details: []string{"revision: want a non-negative integer"}}
	}
	return n, nil
}

func (h *HTTP) transition(r *http.Request, p *Principal) (int, any, error) {
	key, action := splitAction(r)
	ops := map[string]func(context.Context, *Principal, string, int64) (*experimentv1.Experiment, error){
		"start": h.svc.Start, "pause": h.svc.Pause, "stop": h.svc.Stop,
	}
	op := ops[action]
	if op == nil {
		return 0, nil, errorf(CodeNotFound, "no route %s %s (actions: start, pause, stop)", r.Method, r.URL.Path)
	}
	// The optional body is {"revision": "N"} (the key may be repeated).
	req := &adminv1.StartExperimentRequest{}
	if err := decode(r, req, false); err != nil {
		return 0, nil, err
	}
	if req.Key != "" && req.Key != key {
		return 0, nil, &Error{Code: CodeInvalid, Message: "invalid request", Details: []string{"key: " + strconv.Quote(req.Key) + " does not match the URL's " + strconv.Quote(key)}}
	}
	if req.AcknowledgeRollback {
		if action != "start" {
			return 0, nil, &Error{Code: CodeInvalid, Message: "invalid request", Details: []string{"acknowledgeRollback: only a start acknowledges a rollback"}}
		}
		op = h.svc.StartAcknowledgingRollback
	}
	rev := req.Revision
	if rev == 0 {
		var err error
		if rev, err = revisionParam(r); err != nil {
			return 0, nil, err
		}
	}
	wait := waitOf(req.GetWait())
	if wait == 0 {
		var err error
		if wait, err = waitParam(r); err != nil {
			return 0, nil, err
		}
	}
	var e *experimentv1.Experiment
	ro, err := h.svc.Await(r.Context(), wait, func() (_ int64, err error) {
		e, err = op(r.Context(), p, key, rev)
		return e.GetRevision(), err
	})
	if err != nil {
		return 0, nil, err
	}
	body, err := withRollout(e, ro)
	return http.StatusOK, body, err
}

func (h *HTTP) evaluate(r *http.Request, p *Principal) (int, any, error) {
	req := &adminv1.EvaluateExperimentsRequest{}
	if err := decode(r, req, true); err != nil {
		return 0, nil, err
	}
	resp, err := h.svc.Evaluate(r.Context(), p, req.GetService(), req.GetAttributes().AsMap(), timeOf(req.GetTime()))
	if err != nil {
		return 0, nil, err
	}
	// Every field, zero or not: scripts read inExperiment: false.
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(resp)
	return http.StatusOK, json.RawMessage(b), err
}

func (h *HTTP) history(r *http.Request, p *Principal) (int, any, error) {
	changes, err := h.svc.History(r.Context(), p, r.PathValue("key"))
	if err != nil {
		return 0, nil, err
	}
	items, err := marshalAll(changes)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, map[string]any{"changes": items}, nil
}

// marshalAll renders messages as proto3 JSON, for lists that must show as
// [] when empty.
func marshalAll[M proto.Message](ms []M) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, 0, len(ms))
	for _, m := range ms {
		b, err := jsonOut.Marshal(m)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// write writes a success.
func (h *HTTP) write(w http.ResponseWriter, r *http.Request, status int, body any) {
	if body == nil {
		w.WriteHeader(status)
		return
	}
	if m, ok := body.(proto.Message); ok {
		b, err := appendJSON(nil, m)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		body = json.RawMessage(b)
	}
	if b, ok := body.(json.RawMessage); ok { // compact already: as writeJSON would write it
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(append(b, '\n'))
		return
	}
	writeJSON(w, status, body)
}

// rolloutBytesPerProxy is about what a rollout's JSON takes per proxy
// listed: the size its buffers start at.
const rolloutBytesPerProxy = 400

// appendJSON appends m as the HTTP API writes a message: protojson's
// encoding (jsonOut), compacted. A rollout, which lists every proxy, is
// encoded without protojson's reflection (appendRolloutJSON).
func appendJSON(b []byte, m proto.Message) ([]byte, error) {
	if ro, ok := m.(*adminv1.Rollout); ok {
		if b == nil {
			b = make([]byte, 0, 64+rolloutBytesPerProxy*len(ro.GetProxies()))
		}
		if out, ok := appendRolloutJSON(b, ro); ok {
			return out, nil
		}
	}
	n := len(b)
	b, err := jsonOut.MarshalAppend(b, m)
	if err != nil {
		return nil, err
	}
	return b[:n+len(compactJSON(b[n:]))], nil
}

// compactJSON is json.Compact for JSON known to be valid (protojson's,
// which puts a space after commas at random), in place and without
// validating it: encoding/json compacting a waited write's rollout of
// 10,000 proxies (3 MB) cost 5% of a replica's CPU (docs/perf/replicas.md).
func compactJSON(b []byte) []byte {
	out := b[:0]
	inString, escaped := false, false
	for _, c := range b {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			continue
		}
		out = append(out, c)
	}
	return out
}

// writeError is the HTTP transport's single exit for errors. Unknown
// errors are logged and reach the client only as "internal error".
func (h *HTTP) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := toError(err)
	if e.Code == CodeInternal {
		h.log.ErrorContext(r.Context(), "admin request failed", "transport", "http", "http_method", r.Method, "path", r.URL.Path, "error", err.Error())
	}
	writeJSON(w, HTTPStatus(e.Code), map[string]any{"error": e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
}

// timeOf is ts as a time.Time; zero for nil.
func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// protoError is a protojson error without its "proto:" prefix, which
// protojson deliberately spells with a random space (U+0020 or U+00A0).
func protoError(err error) string {
	return strings.TrimLeft(strings.TrimPrefix(err.Error(), "proto:"), " \u00a0")
}
