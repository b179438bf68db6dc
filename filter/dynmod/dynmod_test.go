//go:build cgo

package dynmod

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// panicky panics in every hook.
type panicky struct{}

func (panicky) ProgramInit(uint32)                                         { panic("program init") }
func (panicky) ConfigNew(Config, string, []byte) uintptr                   { panic("config new") }
func (panicky) ConfigDestroy(uintptr)                                      { panic(errString("config destroy")) }
func (panicky) RequestHeaders(Filter, Stream, uintptr, bool) HeadersStatus { panic(42) }
func (panicky) RequestBody(Filter, Stream, uintptr, bool) BodyStatus       { panic("body") }

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
	resolveAll(t)
	before := Panics()
	if v := envoy_dynamic_module_on_program_init(); v != abiVersion {
		t.Errorf("program_init returned %v, want the ABI version", v)
	}
	if h := envoy_dynamic_module_on_http_filter_config_new(1, buf("allot"), buf("{}")); h != 0 {
		t.Errorf("config_new returned %d after a panic, want 0 (reject)", h)
	}
	envoy_dynamic_module_on_http_filter_config_destroy(7)
	if s := allot_go_request_headers(9, 7, true); int32(s) != int32(HeadersContinue) {
		t.Errorf("request_headers returned %d after a panic, want %d (continue)", s, HeadersContinue)
	}
	if s := allot_go_request_body(9, 7, true); int32(s) != int32(BodyContinue) {
		t.Errorf("request_body returned %d after a panic, want %d (continue)", s, BodyContinue)
	}
	if n := Panics() - before; n != 5 {
		t.Errorf("%d panics counted, want 5 (one per Go hook)", n)
	}
}

// TestNoHandler: a module whose main installed no Handler answers every
// hook as a module that does nothing.
func TestNoHandler(t *testing.T) {
	SetHandler(nil)
	if h := envoy_dynamic_module_on_http_filter_config_new(1, buf("allot"), buf("{}")); h != 0 {
		t.Errorf("config_new without a handler returned %d, want 0", h)
	}
	if s := allot_go_request_headers(9, 7, false); s != 0 {
		t.Errorf("request_headers returned %d, want 0", s)
	}
	if s := allot_go_request_body(9, 7, true); s != 0 {
		t.Errorf("request_body returned %d, want 0", s)
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

// resolveAll makes the hooks behave, for the test, as if every callback
// into Envoy resolved (in a test binary none does).
func resolveAll(t *testing.T) {
	t.Helper()
	saved := unresolved
	unresolved = func() []string { return nil }
	t.Cleanup(func() { unresolved = saved })
}

// recording records which hooks reached it.
type recording struct{ calls []string }

func (r *recording) ProgramInit(uint32) { r.calls = append(r.calls, "program_init") }
func (r *recording) ConfigNew(Config, string, []byte) uintptr {
	r.calls = append(r.calls, "config_new")
	return 7
}
func (r *recording) ConfigDestroy(uintptr) { r.calls = append(r.calls, "config_destroy") }
func (r *recording) RequestHeaders(Filter, Stream, uintptr, bool) HeadersStatus {
	r.calls = append(r.calls, "request_headers")
	return HeadersContinue
}
func (r *recording) RequestBody(Filter, Stream, uintptr, bool) BodyStatus {
	r.calls = append(r.calls, "request_body")
	return BodyContinue
}

// TestUnresolvedCallbackRefused: while a callback into Envoy is missing,
// program-init still answers the ABI version but initializes nothing (the
// Handler's ProgramInit would ask Envoy for its concurrency), and
// config-new refuses every configuration without reaching the Handler;
// with all of them resolved, both reach it. (filter/native's
// TestMissingCallbackRefused loads the built module in a host lacking each
// one.)
func TestUnresolvedCallbackRefused(t *testing.T) {
	for _, missing := range [][]string{nil, {"envoy_dynamic_module_callback_http_clear_route_cache"}} {
		r := &recording{}
		SetHandler(r)
		saved := unresolved
		unresolved = func() []string { return missing }
		v := envoy_dynamic_module_on_program_init()
		h := envoy_dynamic_module_on_http_filter_config_new(1, buf("allot"), buf("{}"))
		unresolved = saved
		SetHandler(nil)
		if v != abiVersion {
			t.Errorf("missing %q: program_init returned %v, want the ABI version", missing, v)
		}
		want, wantHandle := []string{"program_init", "config_new"}, 7
		if len(missing) > 0 {
			want, wantHandle = nil, 0
		}
		if !slices.Equal(r.calls, want) || int(h) != wantHandle {
			t.Errorf("missing %q: the handler got %q and config_new returned %d; want %q and %d", missing, r.calls, h, want, wantHandle)
		}
	}
}

// TestNothingResolvesInTestBinary: the check sees what is missing — in a
// test binary, linked without Envoy, every callback: those of every
// configuration, and apart from them those of a local reply, which
// LocalReplyUnsupported names.
func TestNothingResolvesInTestBinary(t *testing.T) {
	reply := LocalReplyCallbacks()
	required := slices.DeleteFunc(callbackNames(), func(n string) bool { return slices.Contains(reply, n) })
	if got := unresolvedCallbacks(); !slices.Equal(got, required) || len(required) == 0 {
		t.Errorf("unresolved callbacks %q, want every one of ALLOT_CALLBACKS %q", got, required)
	}
	want := []string{"envoy_dynamic_module_callback_http_get_body_chunks_size", "envoy_dynamic_module_callback_http_get_body_chunks",
		"envoy_dynamic_module_callback_http_received_buffered_request_body", "envoy_dynamic_module_callback_http_send_response"}
	if !slices.Equal(reply, want) {
		t.Errorf("LocalReplyCallbacks() = %q, want %q", reply, want)
	}
	why := LocalReplyUnsupported()
	for _, name := range reply {
		if !strings.Contains(why, name) {
			t.Errorf("LocalReplyUnsupported() = %q: does not name %s", why, name)
		}
	}
	if !strings.Contains(why, "ABI "+ABIVersion) {
		t.Errorf("LocalReplyUnsupported() = %q: does not name the ABI", why)
	}
}

// TestLocalReplySupported: with every callback of a local reply resolved,
// LocalReplyUnsupported has nothing to say; with one missing, it names
// that one only.
func TestLocalReplySupported(t *testing.T) {
	saved := replyUnresolved
	t.Cleanup(func() { replyUnresolved = saved })
	replyUnresolved = func() []string { return nil }
	if why := LocalReplyUnsupported(); why != "" {
		t.Errorf("every callback resolved: LocalReplyUnsupported() = %q, want \"\"", why)
	}
	send := "envoy_dynamic_module_callback_http_send_response"
	replyUnresolved = func() []string { return []string{send} }
	if why := LocalReplyUnsupported(); !strings.Contains(why, "lacks callbacks a local reply needs: "+send+" (") {
		t.Errorf("send_response missing: LocalReplyUnsupported() = %q", why)
	}
}

// TestCallbacksListed: every callback into Envoy that this package names,
// in Go, C or a header, is in ALLOT_CALLBACKS (callbacks.h), the list the
// check walks, and the list names nothing else: a callback declared
// outside it would escape the check, and config-new would accept a
// configuration in an Envoy that lacks it.
func TestCallbacksListed(t *testing.T) {
	re := regexp.MustCompile(`\benvoy_dynamic_module_callback_\w+`)
	var named []string
	for _, glob := range []string{"*.go", "*.c", "*.h"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			named = append(named, re.FindAllString(string(b), -1)...)
		}
	}
	slices.Sort(named)
	named = slices.Compact(named)
	listed := slices.Sorted(slices.Values(callbackNames()))
	if !slices.Equal(named, listed) {
		t.Errorf("callbacks named in filter/dynmod:\n%q\nlisted in ALLOT_CALLBACKS:\n%q", named, listed)
	}
}

// TestStreamHooksInC builds testdata/hooks_test.c — hooks.c's stream hooks
// over fake callbacks — with AddressSanitizer (which fails it on a leak
// too) and runs it: a response counts each observed variation's class
// once and records its latency, a stream destroyed without one counts a
// reset on the configuration's counters, an odd handle's stream makes no
// callback, and the sticky cookie's header still goes out.
func TestStreamHooksInC(t *testing.T) {
	runCTest(t, "hooks_test.c")
}

// TestWarmServeInC builds testdata/warm_test.c — the warm path's hit
// (wserve.c) over its cache and the stream hooks, with fake callbacks and
// every malloc counted — with AddressSanitizer and
// UndefinedBehaviorSanitizer, and runs it: a hit in every header mode adds
// exactly the plugin's headers in its order, writes the exposure record
// when asked, counts, and clears the route once; an item out of range and
// an add Envoy refuses at each position serve nothing and count nothing; an
// observed hit leaves its outcome ids in the stream without allocating, and
// they are counted and freed; a stateless handle of an observed
// configuration, a miss, a forged header and a worker with nothing cached
// go to Go.
func TestWarmServeInC(t *testing.T) {
	runCTest(t, "warm_test.c", "-Wl,--wrap=malloc")
}

// TestReplyInC builds testdata/reply_test.c — a local reply's C half
// (reply.c) and the body and trailers hooks (hooks.c) over fake callbacks —
// with AddressSanitizer and UndefinedBehaviorSanitizer, and runs it: a body
// in parts is read whole (the buffered parts, then the received one; once
// when the received part is the buffered body; past the stack's chunk
// vector), a buffer too small gets the length and nothing copied, refused
// chunks are an error; a reply reaches Envoy with its status, headers and
// body as sent, and one over the header bound is not sent; only a stream
// that awaits its body hands it to Go, until Go stops buffering it, and
// trailers end a body still awaited.
func TestReplyInC(t *testing.T) {
	runCTest(t, "reply_test.c")
}

// runCTest builds testdata/src with $CC (gcc by default) under
// AddressSanitizer (which also fails it on a leak) and
// UndefinedBehaviorSanitizer, with flags, runs it, and fails unless it
// prints "ok" and exits 0. A missing compiler or sanitizer fails the test:
// never a skip.
func runCTest(t *testing.T, src string, flags ...string) {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	bin := filepath.Join(t.TempDir(), strings.TrimSuffix(src, ".c"))
	args := append([]string{"-std=gnu11", "-g", "-Wall", "-Wshadow", "-Werror", "-fsanitize=address,undefined",
		"-fno-sanitize-recover=undefined", "-o", bin, filepath.Join("testdata", src)}, flags...)
	build := exec.Command(cc, args...)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	out, err := exec.Command(bin).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("%s: %v\n%s", src, err, out)
	}
}

// TestEnvoyReleaseOutsideEnvoy: in a process that exports none of the
// releases' marker callbacks (this test binary, which is no Envoy),
// envoyRelease says it cannot tell, instead of naming a release.
func TestEnvoyReleaseOutsideEnvoy(t *testing.T) {
	if got := envoyRelease(); !strings.HasPrefix(got, "unknown: ") {
		t.Errorf("envoyRelease() = %q, want unknown outside Envoy", got)
	}
}
