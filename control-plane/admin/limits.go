package admin

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/allotmesh/allot/control-plane/experiment"
	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/filter/config"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
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

// load is what the running experiments of one service put on its
// requests: how many, the sum of their translate.Headers.Cost, and how
// many observe their outcomes.
type load struct{ experiments, assigned, observed int }

// checkServices checks the bounds of every service e applies to
// (MaxServiceHeaderBytes, MaxExperimentsPerService) if e is written as it
// is, against the stored experiments (checkAgainst). It returns the context
// to write with, based on the revision of the store it checked. Nothing is
// checked when e does not run.
//
// A write's first attempt checks against the experiments as this allotd
// last read them (WithLists), without a read of every experiment: if the
// store moved on since, the write is stale (retryStale reads them on the
// next attempt). A refusal from them is not trusted: they may miss a
// change that allows the write (its key's newer revision, an experiment
// stopped), so the store's decide.
func (s *Service) checkServices(ctx context.Context, e *experimentv1.Experiment, base int64) (context.Context, error) {
	if experiment.Status(e) != experiment.StatusRunning {
		return ctx, nil
	}
	if _, retry := ctx.Value(staleKey{}).(bool); !retry && s.lists != nil {
		if items, rev, err := s.lists.List(ctx, 0); err == nil { // as last read, or read now if never
			if wctx, err := s.checkAgainst(ctx, e, base, items, rev); err == nil {
				return wctx, nil
			}
		}
	}
	items, rev, err := s.store.List(ctx)
	if err != nil {
		return nil, err
	}
	return s.checkAgainst(ctx, e, base, items, rev)
}

// checkAgainst is checkServices against items, the stored experiments as
// of store revision rev; base is the revision of e's key the write
// replaces (0: e is new), and any other stored revision is a conflict. A
// service already over a bound may still take a write that does not add
// to it. The context it returns bases the write on rev (store.WithBase),
// so that a write to another experiment in between makes the write
// store.ErrStale rather than pass a bound (retryStale runs it again).
func (s *Service) checkAgainst(ctx context.Context, e *experimentv1.Experiment, base int64, items []*store.Experiment, rev int64) (context.Context, error) {
	h, err := translate.MeshHeaders(s.mesh)
	if err != nil {
		return nil, err
	}
	var (
		old    *experimentv1.Experiment
		others []*experimentv1.Experiment
	)
	for _, se := range items {
		x, err := experiment.FromStore(se)
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
		case experiment.Status(x) == experiment.StatusRunning:
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
		cost[x] = h.Cost(x)
	}
	mine := h.Cost(e)
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
		if old != nil && experiment.Status(old) == experiment.StatusRunning && applies(old, t.service) {
			before.experiments++
			before.assigned += h.Cost(old)
			before.observed += observes(old)
		}
		name := "service " + strconv.Quote(t.service)
		if t.service == "" {
			name = "every service no experiment names"
		}
		if n := h.Bytes(after.assigned); n > MaxServiceHeaderBytes && n > h.Bytes(before.assigned) {
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
// the error stands (a conflict). Each attempt after the first runs under a
// ctx that tells checkServices to read the store.
func retryStale[T any](ctx context.Context, write func(ctx context.Context) (T, error)) (T, error) {
	for i := 1; ; i++ {
		v, err := write(ctx)
		if !errors.Is(err, store.ErrStale) || i == staleRetries {
			return v, err
		}
		ctx = context.WithValue(ctx, staleKey{}, true)
	}
}

// staleKey marks the ctx of a write's attempt after a stale one.
type staleKey struct{}

// applies reports whether e reaches the proxies of service ("": a service
// no experiment names, which only experiments for every service reach).
func applies(e *experimentv1.Experiment, service string) bool {
	if service == "" {
		return len(e.GetServices()) == 0
	}
	return experiment.AppliesTo(e, service)
}
