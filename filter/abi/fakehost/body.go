package fakehost

import (
	"strings"

	"github.com/allotmesh/allot/filter/abi"
)

// LocalReply is a proxy_send_local_response call: the answer a client got
// from the filter itself.
type LocalReply struct {
	Status  uint32
	Details string
	Headers [][2]string
	Body    []byte
}

// Header is the first value of reply header name ("" if none).
func (l *LocalReply) Header(name string) string {
	for _, kv := range l.Headers {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

// SendLocalResponse implements abi.Host: it records the reply (Replies).
// A second reply for one stream is an error, as it is in Envoy.
func (h *Host) SendLocalResponse(status uint32, details string, body, headers []byte, grpcStatus int32) error {
	if err := h.fail("proxy_send_local_response"); err != nil {
		return err
	}
	if h.replied {
		return &abi.Error{Call: "proxy_send_local_response", Status: abi.StatusBadArgument}
	}
	pairs, err := abi.ParsePairs(headers)
	if err != nil {
		return &abi.Error{Call: "proxy_send_local_response", Status: abi.StatusBadArgument}
	}
	r := &LocalReply{Status: status, Details: details, Body: append([]byte(nil), body...)}
	for _, kv := range pairs {
		r.Headers = append(r.Headers, [2]string{strings.Clone(kv[0]), strings.Clone(kv[1])}) // kv aliases the caller's buffer
	}
	h.Replies = append(h.Replies, r)
	h.replied = true
	return nil
}

// Stream is what one stream with a body came to (Send).
type Stream struct {
	// Upstream are the request headers the upstream received; nil when
	// the headers did not continue.
	Upstream [][2]string
	// Reply is the local reply, nil if none.
	Reply *LocalReply
	// BodyCalls counts the proxy_on_request_body callbacks made.
	BodyCalls int
	// HeadersOn is whether proxy_on_request_headers continued: the
	// upstream saw the request start.
	HeadersOn bool
	// Stalled is whether the stream would hang in Envoy: its headers
	// paused (which Envoy makes StopAllIterationAndWatermark for a module
	// exporting a body callback, so no body callback comes) without a
	// local reply.
	Stalled bool
}

// Send runs one stream under root whose request has a body, sent in parts,
// as Envoy does: proxy_on_request_headers (end of stream when there are no
// parts), then proxy_on_request_body for each part, the buffer holding
// every part so far while the handler pauses (Envoy buffers the body of a
// filter that returns StopIterationAndBuffer), the last with end of
// stream; no callback after a local reply, and none after paused headers
// (Envoy's StopAllIterationAndWatermark: the stream stalls). A local
// reply goes through the
// filter's proxy_on_response_headers, as Envoy's does; then
// proxy_on_delete.
func (h *Host) Send(hd abi.Handler, root uint32, headers [][2]string, parts ...[]byte) Stream {
	id := h.newID()
	hd.OnContextCreate(id, root)
	h.replied = false
	start := len(h.Replies)
	h.Headers[abi.RequestHeaders] = append([][2]string(nil), headers...)
	action := hd.OnRequestHeaders(id, len(headers), len(parts) == 0)
	var s Stream
	if s.HeadersOn = action == abi.ActionContinue; s.HeadersOn {
		s.Upstream = append([][2]string(nil), h.Headers[abi.RequestHeaders]...)
		h.headersGone = true // Envoy's body callback reads no request headers once they went on
		defer func() { h.headersGone = false }()
	}
	var buf []byte
	for i, part := range parts {
		if len(h.Replies) > start {
			break
		}
		if i == 0 && !s.HeadersOn {
			s.Stalled = true
			break
		}
		if action != abi.ActionPause {
			buf = buf[:0] // not buffered: the host holds this part only
		}
		buf = append(buf, part...)
		h.Buffers[abi.BufferHTTPRequestBody] = buf
		s.BodyCalls++
		action = hd.OnRequestBody(id, len(buf), i == len(parts)-1)
	}
	delete(h.Buffers, abi.BufferHTTPRequestBody)
	if len(h.Replies) > start {
		s.Reply = h.Replies[start]
		h.Headers[abi.ResponseHeaders] = append([][2]string{{":status", itoa(s.Reply.Status)}}, s.Reply.Headers...)
		hd.OnResponseHeaders(id, len(s.Reply.Headers)+1, len(s.Reply.Body) == 0)
	} else if action == abi.ActionContinue {
		s.Upstream = h.Headers[abi.RequestHeaders]
	}
	hd.OnDelete(id)
	return s
}

func itoa(n uint32) string {
	if n == 0 {
		return "0"
	}
	var b [10]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
