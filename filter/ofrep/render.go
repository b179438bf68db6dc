package ofrep

import (
	"strings"

	"github.com/allotmesh/allot/filter/internal/jsonx"
)

// Flag is one successful evaluation.
type Flag struct {
	// Key is the flag key: the experiment key.
	Key string
	// Value is the variation's value as JSON, typed as the owner defined
	// it ("blue", 2, true).
	Value string
	// Variant is the variation as the x-experiment-<key> header carries
	// it.
	Variant string
	// Reason is Split, TargetingMatch or Default.
	Reason string
}

// AppendFlag appends f's evaluation to b:
// {"key":…,"value":…,"reason":…,"variant":…,"metadata":{"configVersion":…}}.
func AppendFlag(b []byte, f Flag, version string) []byte {
	b = append(b, `{"key":`...)
	b = jsonx.AppendString(b, f.Key)
	b = append(b, `,"value":`...)
	b = append(b, f.Value...)
	b = append(b, `,"reason":`...)
	b = jsonx.AppendString(b, f.Reason)
	b = append(b, `,"variant":`...)
	b = jsonx.AppendString(b, f.Variant)
	b = appendMetadata(b, version)
	return append(b, '}')
}

// AppendBulkStart begins a bulk answer, {"flags":[; each flag follows
// (AppendFlag, a comma between them), then AppendBulkEnd.
func AppendBulkStart(b []byte) []byte { return append(b, `{"flags":[`...) }

// AppendBulkEnd ends a bulk answer with the set's metadata.
func AppendBulkEnd(b []byte, version string) []byte {
	b = append(b, ']')
	b = appendMetadata(b, version)
	return append(b, '}')
}

// appendMetadata appends ,"metadata":{"configVersion":version}.
func appendMetadata(b []byte, version string) []byte {
	b = append(b, `,"metadata":{"configVersion":`...)
	b = jsonx.AppendString(b, version)
	return append(b, '}')
}

// AppendError appends an error answer: {"key":…,"errorCode":…,"errorDetails":…},
// without key when key is "" (a bulk evaluation's, or a request refused
// before its key mattered). A 404 or 405 for a path the protocol does not
// have carries errorDetails only (the spec's generalErrorResponse).
func AppendError(b []byte, key string, e *Error) []byte {
	b = append(b, '{')
	if key != "" {
		b = append(b, `"key":`...)
		b = jsonx.AppendString(b, key)
		b = append(b, ',')
	}
	if e.Code != "" {
		b = append(b, `"errorCode":`...)
		b = jsonx.AppendString(b, e.Code)
		b = append(b, ',')
	}
	b = append(b, `"errorDetails":`...)
	b = jsonx.AppendString(b, e.Details)
	return append(b, '}')
}

// ETag is the bulk answer's entity tag: a quoted FNV-1a 64 digest of its
// body. The body holds the configuration version and every assignment, so
// the tag changes exactly when the answer does.
func ETag(body []byte) string {
	h := uint64(14695981039346656037)
	for _, c := range body {
		h ^= uint64(c)
		h *= 1099511628211
	}
	const hexDigits = "0123456789abcdef"
	var t [18]byte
	t[0], t[17] = '"', '"'
	for i := 16; i >= 1; i-- {
		t[i] = hexDigits[h&15]
		h >>= 4
	}
	return string(t[:])
}

// Matches reports whether an If-None-Match value names etag: "*", or a
// comma-separated list holding it (a weak W/ tag compares by its opaque
// part, as RFC 9110's weak comparison for If-None-Match does).
func Matches(ifNoneMatch, etag string) bool {
	for tag := range strings.SplitSeq(ifNoneMatch, ",") {
		tag = strings.TrimSpace(tag)
		if tag == "*" || strings.TrimPrefix(tag, "W/") == etag {
			return true
		}
	}
	return false
}

// Response header names and values.
const (
	HeaderContentType      = "content-type"
	ContentTypeJSON        = "application/json"
	HeaderETag             = "etag"
	HeaderIfNoneMatch      = "if-none-match"
	HeaderOrigin           = "origin"
	HeaderAllow            = "allow"
	AllowMethods           = "POST, OPTIONS"
	HeaderAllowOrigin      = "access-control-allow-origin"
	HeaderAllowCredentials = "access-control-allow-credentials"
	HeaderExposeHeaders    = "access-control-expose-headers"
	HeaderAllowMethods     = "access-control-allow-methods"
	HeaderAllowHeaders     = "access-control-allow-headers"
	HeaderMaxAge           = "access-control-max-age"
	HeaderVary             = "vary"
	// PreflightAllowHeaders are the request headers a browser may send:
	// the JSON body's and the bulk evaluation's If-None-Match.
	PreflightAllowHeaders = "content-type, if-none-match"
	// PreflightMaxAge is how long a browser may keep a preflight's answer,
	// in seconds.
	PreflightMaxAge = "600"
)

// AppendCORS appends the CORS headers of an answer to origin, when origin
// is one of allowed (exact match): the origin itself, credentials allowed
// (the sticky cookie), ETag exposed and, on a preflight, the methods, the
// request headers and Max-Age. Vary: Origin is added whenever the
// configuration lists origins, so a cache never serves one origin's answer
// to another.
func AppendCORS(h [][2]string, origin string, allowed []string, preflight bool) [][2]string {
	if len(allowed) == 0 {
		return h
	}
	h = append(h, [2]string{HeaderVary, "Origin"})
	ok := false
	for _, a := range allowed {
		if origin == a {
			ok = true
		}
	}
	if !ok || origin == "" {
		return h
	}
	h = append(h, [2]string{HeaderAllowOrigin, origin}, [2]string{HeaderAllowCredentials, "true"})
	if preflight {
		return append(h, [2]string{HeaderAllowMethods, "POST"}, [2]string{HeaderAllowHeaders, PreflightAllowHeaders}, [2]string{HeaderMaxAge, PreflightMaxAge})
	}
	return append(h, [2]string{HeaderExposeHeaders, "ETag"})
}
