//go:build cgo

// Command replymod is a dynamic module for TestLocalReplyInHost: a
// dynmod.Handler that answers requests itself, as Allot's module does for
// an OFREP evaluation, over dynmod's local-reply calls. A request under
// /answer/ awaits its body (/answer/now is answered at once, as is one
// without a body) and is answered 200 with the body it read, its length in
// x-body-length and where it was answered in x-answered; any other
// request continues.
package main

import (
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/dynmod"
)

type handler struct {
	headers dynmod.Headers
	body    []byte
}

func (*handler) ProgramInit(uint32)                              {}
func (*handler) ConfigDestroy(uintptr)                           {}
func (*handler) ConfigNew(dynmod.Config, string, []byte) uintptr { return 2 } // even: streams keep state

func (h *handler) RequestHeaders(f dynmod.Filter, s dynmod.Stream, _ uintptr, eos bool) dynmod.HeadersStatus {
	h.headers = f.RequestHeaders(h.headers)
	path := ""
	for i := range h.headers {
		if k, v := dynmod.HeaderAt(h.headers, i); k == ":path" {
			path = v
		}
	}
	switch {
	case !strings.HasPrefix(path, "/answer/"):
		return dynmod.HeadersContinue
	case path == "/answer/now" || eos:
		h.reply(f, "headers")
		return dynmod.HeadersStop
	case !s.AwaitBody():
		return dynmod.HeadersContinue
	}
	return dynmod.HeadersStop
}

func (h *handler) RequestBody(f dynmod.Filter, _ dynmod.Stream, _ uintptr, eos bool) dynmod.BodyStatus {
	if !eos {
		return dynmod.BodyStopAndBuffer
	}
	h.reply(f, "body")
	return dynmod.BodyStopNoBuffer
}

func (h *handler) reply(f dynmod.Filter, where string) {
	body, ok := f.RequestBody(h.body[:0])
	h.body = body
	var b dynmod.HeaderBatch
	b.Add("content-type", "text/plain")
	b.Add("x-body-length", strconv.Itoa(len(body)))
	b.Add("x-answered", where+" "+strconv.FormatBool(ok))
	f.SendResponse(200, &b, append([]byte("body:"), body...))
}

func init() { dynmod.SetHandler(&handler{}) }

func main() {}
