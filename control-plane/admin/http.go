package admin

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// MaxBodyBytes bounds a request body; larger ones get 413.
const MaxBodyBytes = 1 << 20

// HTTP serves the admin API as HTTP/JSON under /v1/.
type HTTP struct {
	svc    *Service
	tokens *Tokens
	log    *slog.Logger
	mux    *http.ServeMux
}

// NewHTTP returns the HTTP/JSON transport of svc, authenticating with tokens.
func NewHTTP(svc *Service, tokens *Tokens, log *slog.Logger) *HTTP {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &HTTP{svc: svc, tokens: tokens, log: log, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /v1/experiments", h.create)
	h.mux.HandleFunc("GET /v1/experiments", h.list)
	h.mux.HandleFunc("GET /v1/experiments/{key}", h.get)
	h.mux.HandleFunc("PUT /v1/experiments/{key}", h.update)
	h.mux.HandleFunc("DELETE /v1/experiments/{key}", h.delete)
	return h
}

// ServeHTTP implements http.Handler.
func (h *HTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

var jsonOut = protojson.MarshalOptions{EmitUnpopulated: false}

// principal authenticates the request's bearer token; on failure it writes
// 401 and returns nil.
func (h *HTTP) principal(w http.ResponseWriter, r *http.Request) *Principal {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	p := h.tokens.Authenticate(strings.TrimSpace(token))
	if !ok || p == nil {
		h.log.WarnContext(r.Context(), "admin request unauthenticated", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="allot"`)
		h.writeError(w, r, errorf(CodeUnauthenticated, "missing or invalid bearer token"))
		return nil
	}
	return p
}

// decode reads one Experiment from the body: unknown fields are rejected, a
// body over MaxBodyBytes is 413.
func (h *HTTP) decode(w http.ResponseWriter, r *http.Request) (*experimentv1.Experiment, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, errorf(CodeTooLarge, "request body exceeds %d bytes", MaxBodyBytes)
		}
		return nil, errorf(CodeInvalid, "read request body: %v", err)
	}
	e := &experimentv1.Experiment{}
	if err := protojson.Unmarshal(b, e); err != nil {
		return nil, &Error{Code: CodeInvalid, Message: "invalid experiment JSON", Details: []string{strings.TrimPrefix(err.Error(), "proto: ")}}
	}
	return e, nil
}

func (h *HTTP) create(w http.ResponseWriter, r *http.Request) {
	p := h.principal(w, r)
	if p == nil {
		return
	}
	e, err := h.decode(w, r)
	if err == nil {
		e, err = h.svc.Create(r.Context(), p, e)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.writeExperiment(w, http.StatusCreated, e)
}

func (h *HTTP) get(w http.ResponseWriter, r *http.Request) {
	p := h.principal(w, r)
	if p == nil {
		return
	}
	e, err := h.svc.Get(r.Context(), p, r.PathValue("key"))
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.writeExperiment(w, http.StatusOK, e)
}

func (h *HTTP) list(w http.ResponseWriter, r *http.Request) {
	p := h.principal(w, r)
	if p == nil {
		return
	}
	exps, rev, err := h.svc.List(r.Context(), p)
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	items := make([]json.RawMessage, 0, len(exps))
	for _, e := range exps {
		b, err := jsonOut.Marshal(e)
		if err != nil {
			h.writeError(w, r, err)
			return
		}
		items = append(items, b)
	}
	writeJSON(w, http.StatusOK, map[string]any{"experiments": items, "revision": strconv.FormatInt(rev, 10)})
}

func (h *HTTP) update(w http.ResponseWriter, r *http.Request) {
	p := h.principal(w, r)
	if p == nil {
		return
	}
	e, err := h.decode(w, r)
	if err == nil {
		key := r.PathValue("key")
		switch {
		case e.Key == "":
			e.Key = key
		case e.Key != key:
			err = &Error{Code: CodeInvalid, Message: "invalid experiment", Details: []string{"key: " + strconv.Quote(e.Key) + " does not match the URL's " + strconv.Quote(key)}}
		}
	}
	if err == nil {
		e, err = h.svc.Update(r.Context(), p, e)
	}
	if err != nil {
		h.writeError(w, r, err)
		return
	}
	h.writeExperiment(w, http.StatusOK, e)
}

func (h *HTTP) delete(w http.ResponseWriter, r *http.Request) {
	p := h.principal(w, r)
	if p == nil {
		return
	}
	var rev int64
	if s := r.URL.Query().Get("revision"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			h.writeError(w, r, &Error{Code: CodeInvalid, Message: "invalid revision", Details: []string{"revision: want a non-negative integer"}})
			return
		}
		rev = n
	}
	if err := h.svc.Delete(r.Context(), p, r.PathValue("key"), rev); err != nil {
		h.writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *HTTP) writeExperiment(w http.ResponseWriter, status int, e *experimentv1.Experiment) {
	b, err := jsonOut.Marshal(e)
	if err != nil {
		h.writeError(w, nil, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// writeError is the HTTP transport's single exit for errors.
func (h *HTTP) writeError(w http.ResponseWriter, r *http.Request, err error) {
	e := toError(err)
	if e.Code == CodeInternal {
		attrs := []any{"error", err.Error()}
		if r != nil {
			attrs = append(attrs, "method", r.Method, "path", r.URL.Path)
		}
		h.log.Error("admin request failed", attrs...)
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
