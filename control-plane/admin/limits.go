package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/plugin"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// Bounds of an experiment document, enforced by Validate with an error
// naming the field (control-plane/README.md lists them for owners). The
// whole document is bounded by store.MaxSpecBytes; the key by the engine
// (^[a-z][a-z0-9._-]{0,62}$); a condition's size by the document and its
// nesting by the filter's decoder.
const (
	// MaxDescriptionBytes bounds description.
	MaxDescriptionBytes = 4 << 10
	// MaxOwnerBytes bounds owner.
	MaxOwnerBytes = 128
	// MaxServices bounds the entries of services.
	MaxServices = 64
	// MaxServiceNameBytes bounds each entry of services (a DNS name's
	// length).
	MaxServiceNameBytes = 253
	// MaxVariations bounds the entries of variations.
	MaxVariations = 64
	// MaxVariationValueBytes bounds a variation's rendered header value:
	// what the filter writes (engine.RenderVariation). A header at the
	// bound still fits the 8 KiB line common upstreams accept (nginx's
	// large_client_header_buffers, Apache's LimitRequestFieldSize); two
	// experiments at the bound exceed MaxServiceHeaderBytes.
	MaxVariationValueBytes = 4 << 10
	// MaxAttributeNameBytes bounds hashAttribute and fallbackAttribute.
	MaxAttributeNameBytes = 128
	// MaxSeedBytes bounds seed.
	MaxSeedBytes = 256
)

// Bounds of what the running experiments of one service put on its
// requests, enforced when a write would leave an experiment running (a
// create, an update, a start) against every other experiment stored at the
// revision the write is based on. An experiment applies to the services it
// names, or to every service when it names none; its schedule is not
// considered (it runs some time).
const (
	// MaxServiceHeaderBytes bounds the request headers the filter can add
	// to one request of a service (names and values, as Envoy counts them:
	// every running experiment's header with its longest variation, the
	// dictionary header and the version header): a quarter of Envoy's
	// default request header limit (max_request_headers_kb, 60 KiB), so the
	// application's own headers keep the rest.
	MaxServiceHeaderBytes = 16 << 10
	// MaxExperimentsPerService bounds the running experiments of one
	// service: the largest configuration make bench measures (ready time
	// and memory with 1,000 experiments).
	MaxExperimentsPerService = 1000
)

// documentBytes is the size of e as the store keeps it (compact proto3
// JSON without output-only metadata), counted with the longest status
// ("running"), so that no status transition writes a larger document than
// Validate accepted.
func documentBytes(e *experimentv1.Experiment) (int, error) {
	d := translate.Spec(e)
	d.Status = translate.StatusRunning
	b, err := protojson.Marshal(d)
	if err != nil {
		return 0, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return 0, err
	}
	return buf.Len(), nil
}

// checkBounds lists every bound of the document e breaks.
func checkBounds(e *experimentv1.Experiment) []string {
	var details []string
	over := func(field string, n, limit int, unit string) {
		if n > limit {
			details = append(details, fmt.Sprintf("%s: %d %s, limit %d", field, n, unit, limit))
		}
	}
	if n, err := documentBytes(e); err != nil {
		details = append(details, "experiment: not encodable as JSON: "+err.Error())
	} else {
		over("experiment", n, store.MaxSpecBytes, "bytes as compact JSON (with the longest status)")
	}
	over("description", len(e.GetDescription()), MaxDescriptionBytes, "bytes")
	over("owner", len(e.GetOwner()), MaxOwnerBytes, "bytes")
	over("services", len(e.GetServices()), MaxServices, "services")
	for i, svc := range e.GetServices() {
		over("services["+strconv.Itoa(i)+"]", len(svc), MaxServiceNameBytes, "bytes")
	}
	over("variations", len(e.GetVariations()), MaxVariations, "variations")
	for i, v := range e.GetVariations() {
		if value, err := renderValue(v); err == nil {
			over("variations["+strconv.Itoa(i)+"]", len(value), MaxVariationValueBytes, "bytes as a header value")
		} // an invalid one is the engine's to report
	}
	over("hashAttribute", len(e.GetHashAttribute()), MaxAttributeNameBytes, "bytes")
	over("fallbackAttribute", len(e.GetFallbackAttribute()), MaxAttributeNameBytes, "bytes")
	over("seed", len(e.GetSeed()), MaxSeedBytes, "bytes")
	return details
}

// renderValue is a variation's header value as the filter renders it.
func renderValue(v *structpb.Value) (string, error) {
	raw, err := protojson.Marshal(v)
	if err != nil {
		return "", err
	}
	return engine.RenderVariation(raw)
}

// headers are the mesh's header settings, defaults filled, that decide
// what the filter adds to a request.
type headers struct {
	prefix, dictionary, versionHeader, version string
	perExperiment                              bool
}

// meshHeaders reads the header settings from the configuration mesh gives
// every proxy, with the filter's own decoder and defaults.
func meshHeaders(mesh translate.Mesh) (headers, error) {
	cfg, err := translate.FilterConfig(nil, "", time.Time{}, mesh)
	if err != nil {
		return headers{}, err
	}
	js, err := translate.ConfigJSON(cfg)
	if err != nil {
		return headers{}, err
	}
	f, err := config.Decode(js)
	if err != nil {
		return headers{}, fmt.Errorf("mesh settings: %w", err)
	}
	f.Defaults()
	return headers{
		prefix: f.HeaderPrefix, dictionary: f.DictionaryHeader, versionHeader: f.VersionHeader, version: f.Version,
		perExperiment: f.AssignmentHeaders != config.AssignmentHeadersDictionary,
	}, nil
}

// cost is the most bytes of request headers e's assignment adds: its
// longest variation's (plugin.AssignmentHeaderBytes).
func (h headers) cost(e *experimentv1.Experiment) int {
	most := 0
	for _, v := range e.GetVariations() {
		value, err := renderValue(v)
		if err != nil {
			continue // not a valid header value: Validate refused it
		}
		most = max(most, plugin.AssignmentHeaderBytes(h.prefix, e.GetKey(), value, h.perExperiment))
	}
	return most
}

// load is what the running experiments of one service put on its requests.
type load struct{ experiments, assigned, observed int }

func (h headers) bytes(l load) int {
	return plugin.HeaderBytes(l.assigned, h.dictionary, h.versionHeader, h.version)
}

// checkServices checks the bounds of every service e applies to
// (MaxServiceHeaderBytes, MaxExperimentsPerService) if e is written as it
// is, against the experiments stored now; base is the revision of e's key
// the write replaces (0: e is new), and any other stored revision is a
// conflict. A service already over a bound may still take a write that
// does not add to it. It returns the context to write with: based on the
// revision of the store it checked (store.WithBase), so that a write to
// another experiment in between makes the write store.ErrStale rather than
// pass a bound (retryStale runs it again). Nothing is checked when e does
// not run.
func (s *Service) checkServices(ctx context.Context, e *experimentv1.Experiment, base int64) (context.Context, error) {
	if translate.Status(e) != translate.StatusRunning {
		return ctx, nil
	}
	items, rev, err := s.store.List(ctx)
	if err != nil {
		return nil, err
	}
	h, err := meshHeaders(s.mesh)
	if err != nil {
		return nil, err
	}
	var (
		old    *experimentv1.Experiment
		others []*experimentv1.Experiment
	)
	for _, se := range items {
		x, err := FromStore(se)
		if err != nil {
			return nil, fmt.Errorf("stored experiment %q: %w", se.Key, err)
		}
		switch {
		case x.Key == e.Key && base == 0:
			return nil, fmt.Errorf("create experiment %q: %w", e.Key, store.ErrExists)
		case x.Key == e.Key && se.Revision != base:
			return nil, fmt.Errorf("experiment %q at revision %d, stored %d: %w", e.Key, base, se.Revision, store.ErrConflict)
		case x.Key == e.Key:
			old = x
		case translate.Status(x) == translate.StatusRunning:
			others = append(others, x)
		}
	}
	// The services to check, each with the field that names it.
	type target struct{ field, service string }
	var targets []target
	seen := map[string]bool{}
	if len(e.GetServices()) > 0 {
		for i, svc := range e.GetServices() {
			if !seen[svc] {
				seen[svc] = true
				targets = append(targets, target{"services[" + strconv.Itoa(i) + "]", svc})
			}
		}
	} else {
		for _, x := range others {
			for _, svc := range x.GetServices() {
				if !seen[svc] {
					seen[svc] = true
					targets = append(targets, target{"services", svc})
				}
			}
		}
		targets = append(targets, target{"services", ""}) // every service no experiment names
	}
	cost := make(map[*experimentv1.Experiment]int, len(others))
	for _, x := range others {
		cost[x] = h.cost(x)
	}
	mine := h.cost(e)
	var details []string
	for _, t := range targets {
		var before load
		for _, x := range others {
			if applies(x, t.service) {
				before.experiments++
				before.assigned += cost[x]
				before.observed += observes(x)
			}
		}
		after := load{before.experiments + 1, before.assigned + mine, before.observed + observes(e)}
		if old != nil && translate.Status(old) == translate.StatusRunning && applies(old, t.service) {
			before.experiments++
			before.assigned += h.cost(old)
			before.observed += observes(old)
		}
		name := "service " + strconv.Quote(t.service)
		if t.service == "" {
			name = "every service no experiment names"
		}
		if n := h.bytes(after); n > MaxServiceHeaderBytes && n > h.bytes(before) {
			details = append(details, fmt.Sprintf("%s: %s: a request could receive %d bytes of assignment headers from %d running experiments, %d over the limit of %d",
				t.field, name, n, after.experiments, n-MaxServiceHeaderBytes, MaxServiceHeaderBytes))
		}
		if after.experiments > MaxExperimentsPerService && after.experiments > before.experiments {
			details = append(details, fmt.Sprintf("%s: %s: %d running experiments, limit %d", t.field, name, after.experiments, MaxExperimentsPerService))
		}
		if after.observed > config.MaxObserved && after.observed > before.observed {
			details = append(details, fmt.Sprintf("observe: %s: %d running experiments observe their outcomes, limit %d", name, after.observed, config.MaxObserved))
		}
	}
	if len(details) > 0 {
		return nil, &Error{Code: CodeInvalid, Message: "invalid experiment", Details: details}
	}
	return store.WithBase(ctx, rev), nil
}

// observes is 1 if e observes its outcomes (the filter's bound on them:
// config.MaxObserved per proxy), else 0.
func observes(e *experimentv1.Experiment) int {
	if e.GetObserve() {
		return 1
	}
	return 0
}

// staleRetries bounds how many times retryStale runs a write.
const staleRetries = 8

// retryStale runs write, a write decided on the whole store (checkServices),
// again while it fails because another write committed between its read
// and its write (store.ErrStale), at most staleRetries times in all; then
// the error stands (a conflict).
func retryStale[T any](write func() (T, error)) (T, error) {
	for i := 1; ; i++ {
		v, err := write()
		if !errors.Is(err, store.ErrStale) || i == staleRetries {
			return v, err
		}
	}
}

// applies reports whether e reaches the proxies of service ("": a service
// no experiment names, which only experiments for every service reach).
func applies(e *experimentv1.Experiment, service string) bool {
	if service == "" {
		return len(e.GetServices()) == 0
	}
	return translate.AppliesTo(e, service)
}
