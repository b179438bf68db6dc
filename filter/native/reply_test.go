//go:build cgo

package main

import (
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestLocalReplyInHost runs dynmod's local reply, Go side included, in a C
// host standing in for Envoy (testdata/replyhost.c), with a module that
// answers requests itself (testdata/replymod): the statuses each hook
// returns, the body the module reads — in parts, the part each body hook
// received after those Envoy buffered, past the stack's chunk vector and
// the Go buffer's first size — and the reply as Envoy receives it (status,
// headers, body). A request the module does not answer continues and its
// body never reaches Go; one without a body is answered at its headers;
// trailers end a body still awaited. Where Go supports -asan, it runs
// again with the module and the host under AddressSanitizer.
func TestLocalReplyInHost(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testLocalReplyInHost(t, false) })
	t.Run("asan", func(t *testing.T) {
		if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
			t.Skipf("go build -asan does not support %s/%s", runtime.GOOS, runtime.GOARCH)
		}
		testLocalReplyInHost(t, true)
	})
}

func testLocalReplyInHost(t *testing.T, asan bool) {
	dir := t.TempDir()
	so := buildPackage(t, dir, "./testdata/replymod", asan)
	defined := []string{"envoy_dynamic_module_callback_http_get_headers_size", "envoy_dynamic_module_callback_http_get_headers",
		"envoy_dynamic_module_callback_http_get_body_chunks_size", "envoy_dynamic_module_callback_http_get_body_chunks",
		"envoy_dynamic_module_callback_http_received_buffered_request_body", "envoy_dynamic_module_callback_http_send_response"}
	bin := buildHostFrom(t, dir, "replyhost.c", importedCallbacks(t, so), func(name string) bool { return slices.Contains(defined, name) }, asan)
	out, err := exec.Command(bin, so).CombinedOutput()
	if err != nil {
		t.Fatalf("replyhost: %v\n%s", err, out)
	}
	want := "config_new: accepted\n" +
		"/other\n" + hooks("headers 0", "body 0", "body 0", "body 0") +
		"/answer/json\n" + hooks("headers 1", "body 1", "body 1") + reply(`{"context":{}}`, "body") + hooks("body 3") +
		"/answer/many\n" + hooks("headers 1", "body 1", "body 1", "body 1") + reply(strings.Repeat("x", 36), "body") + hooks("body 3") +
		"/answer/now\n" + reply("", "headers") + hooks("headers 1", "body 0", "body 0", "body 0") +
		"/answer/empty\n" + reply("", "headers") + hooks("headers 1") +
		"/answer/trailers\n" + hooks("headers 1", "body 1", "body 1", "body 1") + reply(`{"context":{}}`, "body") + hooks("trailers 1")
	if got := string(out); got != want {
		t.Errorf("replyhost printed:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(string(out), "lacks") {
		t.Error("the module found a callback missing")
	}
}

// hooks is replyhost's lines for hook statuses.
func hooks(lines ...string) string { return "  " + strings.Join(lines, "\n  ") + "\n" }

// reply is replyhost's lines for the reply replymod sends with body, read
// in hook where.
func reply(body, where string) string {
	return hooks("reply 200", "content-type: text/plain", "x-body-length: "+strconv.Itoa(len(body)), "x-answered: "+where+" true",
		"body:"+body)
}
