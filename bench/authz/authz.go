// Package authz is benchmark variant D's sidecar service: an Envoy ext_authz
// (v3, gRPC) server that runs Allot's engine on each Check and answers OK
// with one x-experiment-<key> header per assignment. It is the
// "call a local assignment service" pattern Allot replaces; the engine work is
// identical, only the transport differs.
package authz

import (
	"context"
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/engine"
)

// Server implements authv3.AuthorizationServer.
type Server struct {
	authv3.UnimplementedAuthorizationServer
	set     *engine.Set
	keys    []string // header names by experiment index
	attrs   map[string]string
	unitHdr string
}

var _ authv3.AuthorizationServer = (*Server)(nil)

// New decodes and compiles cfgJSON, an allot.filter.v1.FilterConfig in
// proto3 JSON, with the filter's own decoder (config.Parse): the service
// reads the unit header, the header prefix, the experiments and the
// attributes mapped from headers.
func New(cfgJSON []byte) (*Server, error) {
	c, set, err := config.Parse(cfgJSON)
	if err != nil {
		return nil, fmt.Errorf("parse filter config: %w", err)
	}
	s := &Server{set: set, attrs: map[string]string{}, unitHdr: c.UnitHeader}
	for _, k := range set.Keys() {
		s.keys = append(s.keys, c.HeaderPrefix+k)
	}
	for _, a := range c.Attributes {
		if a.Header != "" {
			s.attrs[a.Name] = a.Header
		}
	}
	return s, nil
}

// Check assigns the request's unit and returns the headers to add.
func (s *Server) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	h := req.GetAttributes().GetRequest().GetHttp().GetHeaders()
	attrs := engine.Attributes{}
	if id := h[s.unitHdr]; id != "" {
		attrs["id"] = id
	}
	for name, header := range s.attrs {
		if v := h[header]; v != "" {
			attrs[name] = v
		}
	}
	var out []*corev3.HeaderValueOption
	for i, a := range s.set.Assign(nil, attrs) {
		if a.InExperiment {
			out = append(out, &corev3.HeaderValueOption{
				Header:       &corev3.HeaderValue{Key: s.keys[i], Value: a.Value},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			})
		}
	}
	return &authv3.CheckResponse{
		Status:       &status.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{Headers: out}},
	}, nil
}
