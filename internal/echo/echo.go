// Package echo provides the demo upstream: an HTTP handler that answers every
// request with a JSON description of the request it received, so tests and
// humans can see which headers (x-experiment-*) Envoy added on the way.
//
// It imports only the standard library. It is internal to the module: the
// harness (internal/harness) starts it in-process for e2e and bench, and
// internal/echo/cmd/allot-echo serves it as a binary for `make run`.
package echo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Response is the JSON document the handler writes for every request.
type Response struct {
	// Method is the request method, e.g. "GET".
	Method string `json:"method"`
	// Path is the request target as received: path plus "?query" if any.
	Path string `json:"path"`
	// Host is the Host header (the HTTP/2 :authority).
	Host string `json:"host"`
	// Headers holds every other request header under its lowercased name,
	// values in the order received.
	Headers map[string][]string `json:"headers"`
	// Server is the address the request arrived on ("127.0.0.1:8081"): it
	// tells which upstream answered when Envoy routes to several.
	Server string `json:"server,omitempty"`
}

// Header returns the values of the request header name, matched
// case-insensitively, or nil if the request did not carry it.
func (r Response) Header(name string) []string {
	if v, ok := r.Headers[strings.ToLower(name)]; ok {
		return v
	}
	for k, v := range r.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return nil
}

// maxBody bounds how much of a request body the handler reads and discards.
const maxBody = 1 << 20

// Fault knobs: request headers a test sets to make the upstream misbehave
// for that request only.
const (
	// StatusHeader makes the handler answer with its value as the status
	// (200–599; anything else is answered 400, naming the header), the
	// body as usual.
	StatusHeader = "x-echo-status"
	// HangHeader makes the handler answer nothing until the request is
	// gone (the client or the proxy reset it), or MaxHang has passed.
	HangHeader = "x-echo-hang"
)

// MaxHang bounds how long a request with HangHeader is held.
const MaxHang = 10 * time.Second

// Handler returns the echo handler. It answers every method and path with
// status 200 (or StatusHeader's) and a Response as application/json, or
// holds a request with HangHeader unanswered.
func Handler() http.Handler {
	return http.HandlerFunc(serveEcho)
}

func serveEcho(w http.ResponseWriter, r *http.Request) {
	// Drain (a bounded amount of) the body so keep-alive connections stay usable.
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, maxBody))
	if r.Header.Get(HangHeader) != "" {
		select {
		case <-r.Context().Done():
		case <-time.After(MaxHang):
		}
		return
	}
	status := http.StatusOK
	if v := r.Header.Get(StatusHeader); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 200 || n > 599 {
			http.Error(w, StatusHeader+": "+strconv.Quote(v)+" is not a status 200–599", http.StatusBadRequest)
			return
		}
		status = n
	}

	resp := Response{
		Method:  r.Method,
		Path:    r.URL.RequestURI(),
		Host:    r.Host,
		Headers: make(map[string][]string, len(r.Header)),
	}
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		resp.Server = a.String()
	}
	for name, values := range r.Header {
		key := strings.ToLower(name)
		resp.Headers[key] = append(resp.Headers[key], values...)
	}

	body, err := json.Marshal(resp)
	if err != nil {
		http.Error(w, "encode response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// Server is a running echo server.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
	err  error // set before done is closed
}

// Start listens on addr (e.g. "127.0.0.1:8081", or "127.0.0.1:0" for any free
// port) and serves Handler in the background until Shutdown or Close.
func Start(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	s := &Server{
		ln: ln,
		srv: &http.Server{
			Handler:           Handler(),
			ReadHeaderTimeout: 10 * time.Second,
		},
		done: make(chan struct{}),
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.err = fmt.Errorf("serve echo on %s: %w", s.Addr(), err)
		}
	}()
	return s, nil
}

// Addr returns the address the server listens on, as "host:port".
func (s *Server) Addr() string {
	return s.ln.Addr().String()
}

// URL returns the base URL of the server, "http://host:port".
func (s *Server) URL() string {
	return "http://" + s.Addr()
}

// Shutdown stops accepting connections and waits for in-flight requests to
// finish or ctx to end, whichever comes first.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	return errors.Join(s.err, err)
}

// Close stops the server immediately, closing all connections.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	return errors.Join(s.err, err)
}
