//go:build cgo && allotfault

package main

import (
	"strings"

	"github.com/allotmesh/allot/filter/abi"
)

// FaultHeader is the request header that, in the allotfault build only,
// makes one host call of that request panic: the e2e tests use it to prove
// against real Envoy that a panic on the request path is recovered. Its
// value names the call: read (the first header read), remove, add, set
// (the one-call map rewrite), property, state (the exposure record).
const FaultHeader = "x-allot-test-fault"

// faultHost panics in the call the request's FaultHeader names, once.
type faultHost struct {
	*envoyHost
	armed   string
	request uint64 // the request armed was read for
}

func wrapHost(h *envoyHost) abi.Host { return &faultHost{envoyHost: h} }

func (f *faultHost) fire(call string) {
	if f.armed == call {
		f.armed = ""
		panic("allotfault: injected panic in " + call)
	}
}

func (f *faultHost) GetHeaderMapPairs(t abi.MapType) ([][2]string, error) {
	pairs, err := f.envoyHost.GetHeaderMapPairs(t)
	if f.request != f.requests {
		f.request, f.armed = f.requests, ""
		for _, kv := range pairs {
			if strings.EqualFold(kv[0], FaultHeader) {
				f.armed = kv[1]
			}
		}
	}
	f.fire("read")
	return pairs, err
}

func (f *faultHost) RemoveHeaderMapValue(t abi.MapType, key string) error {
	f.fire("remove")
	return f.envoyHost.RemoveHeaderMapValue(t, key)
}

func (f *faultHost) AddHeaderMapValue(t abi.MapType, key, value string) error {
	f.fire("add")
	return f.envoyHost.AddHeaderMapValue(t, key, value)
}

func (f *faultHost) AddQueuedRequestHeaders() error {
	f.fire("add")
	return f.envoyHost.AddQueuedRequestHeaders()
}

func (f *faultHost) SetHeaderMapPairs(t abi.MapType, b []byte) error {
	f.fire("set")
	return f.envoyHost.SetHeaderMapPairs(t, b)
}

func (f *faultHost) GetProperty(path ...string) ([]byte, error) {
	f.fire("property")
	return f.envoyHost.GetProperty(path...)
}

func (f *faultHost) SetProperty(path string, value []byte) error {
	f.fire("state")
	return f.envoyHost.SetProperty(path, value)
}
