//go:build cgo

package dynmod

import (
	"testing"
)

// panicky panics in every hook.
type panicky struct{}

func (panicky) ProgramInit(uint32)                           { panic("program init") }
func (panicky) ConfigNew(Config, string, []byte) uintptr     { panic("config new") }
func (panicky) ConfigDestroy(uintptr)                        { panic(errString("config destroy")) }
func (panicky) RequestHeaders(Filter, Stream, uintptr, bool) { panic(42) }

type errString string

func (e errString) Error() string { return string(e) }

// TestEveryHookRecovers calls each exported hook with a Handler that
// panics in all of them, as Envoy would: no panic escapes (it would abort
// Envoy), each is counted, and each hook answers as if the module were
// absent — the ABI version still, NULL from config-new (Envoy rejects the
// configuration), the stream kept, continue.
func TestEveryHookRecovers(t *testing.T) {
	SetHandler(panicky{})
	t.Cleanup(func() { SetHandler(nil) })
	before := Panics()
	if v := envoy_dynamic_module_on_program_init(); v != abiVersion {
		t.Errorf("program_init returned %v, want the ABI version", v)
	}
	if h := envoy_dynamic_module_on_http_filter_config_new(1, buf("allot"), buf("{}")); h != 0 {
		t.Errorf("config_new returned %d after a panic, want 0 (reject)", h)
	}
	envoy_dynamic_module_on_http_filter_config_destroy(7)
	if s := envoy_dynamic_module_on_http_filter_request_headers(9, 7, true); s != 0 {
		t.Errorf("request_headers returned %d after a panic, want 0 (continue)", s)
	}
	if n := Panics() - before; n != 4 {
		t.Errorf("%d panics counted, want 4 (one per Go hook)", n)
	}
}

// TestNoHandler: a module whose main installed no Handler answers every
// hook as a module that does nothing.
func TestNoHandler(t *testing.T) {
	SetHandler(nil)
	if h := envoy_dynamic_module_on_http_filter_config_new(1, buf("allot"), buf("{}")); h != 0 {
		t.Errorf("config_new without a handler returned %d, want 0", h)
	}
	if s := envoy_dynamic_module_on_http_filter_request_headers(9, 7, false); s != 0 {
		t.Errorf("request_headers returned %d, want 0", s)
	}
}

// TestStreamOf: an odd module value is the configuration's handle with no
// stream state; 0 (state Envoy could not be given) has neither, and is
// never read.
func TestStreamOf(t *testing.T) {
	for _, m := range []uintptr{0, 1, 7, 1<<20 | Stateless} {
		s, h := streamOf(m)
		if s != 0 || h != m {
			t.Errorf("streamOf(%#x) = %v, %#x; want no stream, handle %#x", m, s, h, m)
		}
	}
}
