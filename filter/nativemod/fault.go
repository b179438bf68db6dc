//go:build cgo && allotfault

package nativemod

import (
	"strings"

	"github.com/allotmesh/allot/filter/plugin"
)

// FaultHeader is the request header that, in the allotfault build only,
// makes one host call of that request panic: the e2e tests use it to prove
// against real Envoy that a panic on the request path is recovered. Its
// value names the call: read (the first header read), remove (one name
// removed), add (the headers added), set (more than 40 forged names
// removed with one call), property, state (the exposure record).
const FaultHeader = "x-allot-test-fault"

// faultHost panics in the call the request's FaultHeader names, once.
type faultHost struct {
	*envoyHost
	armed   string
	request uint64 // the request armed was read for
}

var _ plugin.HeaderBatcher = (*faultHost)(nil)

func wrapHost(h *envoyHost) plugin.Host { return &faultHost{envoyHost: h} }

func (f *faultHost) fire(call string) {
	if f.armed == call {
		f.armed = ""
		panic("allotfault: injected panic in " + call)
	}
}

func (f *faultHost) RequestHeaders() ([][2]string, error) {
	pairs, err := f.envoyHost.RequestHeaders()
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

func (f *faultHost) RemoveRequestHeader(name string) error {
	f.fire("remove")
	return f.envoyHost.RemoveRequestHeader(name)
}

func (f *faultHost) RemoveRequestHeaders(names []string) error {
	f.fire("set")
	return f.envoyHost.RemoveRequestHeaders(names)
}

func (f *faultHost) AddRequestHeader(name, value string) error {
	f.fire("add")
	return f.envoyHost.AddRequestHeader(name, value)
}

func (f *faultHost) AddQueuedRequestHeaders() error {
	f.fire("add")
	return f.envoyHost.AddQueuedRequestHeaders()
}

func (f *faultHost) Property(p *plugin.Property) ([]byte, error) {
	f.fire("property")
	return f.envoyHost.Property(p)
}

func (f *faultHost) SetExposure(value []byte) error {
	f.fire("state")
	return f.envoyHost.SetExposure(value)
}
