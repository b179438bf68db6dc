// Package ofrep is OpenFeature's remote evaluation protocol (OFREP, the
// spec's v0.3.0: github.com/open-feature/protocol, service/openapi.yaml) as
// the filter answers it: which requests are its own (Classify), the
// evaluation request's body (ParseBody, bounded), the answers' JSON written
// by hand (AppendFlag, AppendBulk..., AppendError), the bulk answer's ETag
// and If-None-Match, and the CORS a gateway's browsers need.
//
// It is pure: no host, no engine. The plugin maps a parsed context onto its
// attributes, evaluates with the engine and renders the result here. It
// imports only the standard library and filter/internal/jsonx, and none of
// fmt, encoding/json, net or time: it is linked into the Wasm module.
package ofrep

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/internal/jsonx"
)

// The protocol's paths.
const (
	// Prefix is the path prefix of every request the filter answers when
	// OFREP is on: no service answers one.
	Prefix = "/ofrep/v1/"
	// FlagsPath is the bulk evaluation; FlagsPath + "/" + key a single
	// flag's.
	FlagsPath = "/ofrep/v1/evaluate/flags"
)

// Kind is what a request under Prefix asks.
type Kind uint8

// Request kinds.
const (
	// None is a request outside Prefix: not OFREP's.
	None Kind = iota
	// Single is POST /ofrep/v1/evaluate/flags/{key}.
	Single
	// Bulk is POST /ofrep/v1/evaluate/flags.
	Bulk
	// Preflight is a CORS preflight (OPTIONS) of either evaluation.
	Preflight
	// NotAllowed is another method on an evaluation path: 405.
	NotAllowed
	// NotFound is any other path under Prefix: 404.
	NotFound
)

// Classify says what a request with :method method and :path path asks,
// and for Single the flag key. The query string is ignored.
func Classify(method, path string) (Kind, string) {
	if !strings.HasPrefix(path, Prefix) {
		return None, ""
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	key := ""
	switch {
	case path == FlagsPath || path == FlagsPath+"/":
	case strings.HasPrefix(path, FlagsPath+"/"):
		key = path[len(FlagsPath)+1:]
		if strings.IndexByte(key, '/') >= 0 {
			return NotFound, ""
		}
	default:
		return NotFound, ""
	}
	switch method {
	case "POST":
		if key == "" {
			return Bulk, ""
		}
		return Single, key
	case "OPTIONS":
		return Preflight, ""
	}
	return NotAllowed, ""
}

// Error codes, as the spec names them.
const (
	ParseError          = "PARSE_ERROR"
	TargetingKeyMissing = "TARGETING_KEY_MISSING"
	InvalidContext      = "INVALID_CONTEXT"
	FlagNotFound        = "FLAG_NOT_FOUND"
	General             = "GENERAL"
)

// Reasons, as OpenFeature names them.
const (
	// Split: the unit was hashed into its variation (or kept the one its
	// sticky bucket holds, which a hash chose).
	Split = "SPLIT"
	// TargetingMatch: a forced variation decided, for a unit its targeting
	// let in.
	TargetingMatch = "TARGETING_MATCH"
	// Default: the unit is not in the experiment (targeting, coverage,
	// namespace or a missing hash attribute); the value is variation 0's,
	// as GrowthBook serves it.
	Default = "DEFAULT"
)

// Error is an evaluation request the filter refuses: the HTTP status and
// the spec's error code.
type Error struct {
	Status  uint32
	Code    string
	Details string
}

// Error implements error as "CODE: details".
func (e *Error) Error() string { return e.Code + ": " + e.Details }

// MaxNesting bounds how deep a request body's JSON may nest: a context's
// values are scalars, so anything deeper is refused unread.
const MaxNesting = 16

// Field is one context member the request gave, besides targetingKey: its
// value as text (a string as it is, a number or boolean as its JSON
// literal). Object reports that the value was an object, an array or null,
// which no attribute can take (Text is then empty).
type Field struct {
	Name, Text string
	Object     bool
}

// Context is an evaluation request's context: its targetingKey and the
// other top-level members, in document order (the last of a duplicate
// name counts, as encoding/json reads it).
type Context struct {
	TargetingKey string
	Fields       []Field
}

// ParseBody parses an evaluation request's body, {"context": {...}}, into
// dst (its Fields reused), refusing a body over max bytes (413). Only the
// structure is checked here: a missing targeting key and fields that
// cannot map onto attributes are the caller's to refuse (CheckContext),
// since only it knows the attributes. An empty body is the empty context.
func ParseBody(dst *Context, body []byte, max int) *Error {
	dst.TargetingKey, dst.Fields = "", dst.Fields[:0]
	if len(body) > max {
		return TooLarge(len(body), max)
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil
	}
	v, err := jsonx.ParseStrict(body, MaxNesting)
	if err != nil {
		return &Error{400, ParseError, "request body: " + err.Error()}
	}
	obj, ok := v.(jsonx.Object)
	if !ok {
		return &Error{400, ParseError, "request body: want an object {\"context\": {...}}"}
	}
	var ctx any
	for _, m := range obj {
		if m.Key == "context" {
			ctx = m.Value
		}
	}
	if ctx == nil {
		return nil // no context: no targeting key
	}
	members, ok := ctx.(jsonx.Object)
	if !ok {
		return &Error{400, InvalidContext, "context: want an object"}
	}
	for _, m := range members {
		if m.Key == "targetingKey" {
			s, ok := m.Value.(string)
			if !ok {
				return &Error{400, InvalidContext, "context.targetingKey: want a string"}
			}
			dst.TargetingKey = s
			continue
		}
		f := Field{Name: m.Key}
		switch x := m.Value.(type) {
		case string:
			f.Text = x
		case jsonx.Number:
			f.Text = string(x)
		case bool:
			f.Text = strconv.FormatBool(x)
		default:
			f.Object = true
		}
		dst.Fields = append(dst.Fields, f)
	}
	return nil
}

// CheckContext refuses a context without a targeting key, or one that
// gives an attribute the configuration maps (known) a value no attribute
// can take (an object, an array or null). Unknown fields are ignored.
func CheckContext(c *Context, known func(name string) bool) *Error {
	if c.TargetingKey == "" {
		return &Error{400, TargetingKeyMissing, "context.targetingKey is required"}
	}
	for _, f := range c.Fields {
		if f.Object && known(f.Name) {
			return &Error{400, InvalidContext, "context." + f.Name + ": attributes are strings, numbers or booleans"}
		}
	}
	return nil
}

// TooLarge is the error of a body of n bytes over max: 413.
func TooLarge(n, max int) *Error {
	return &Error{413, ParseError, "request body: " + strconv.Itoa(n) + " bytes or more, at most " + strconv.Itoa(max) + " (ofrep.maxBodyBytes)"}
}

// NotFoundError is the answer to a flag key the proxy does not run: an
// experiment of another service is not revealed.
func NotFoundError(key string) *Error {
	return &Error{404, FlagNotFound, "flag " + strconv.Quote(key) + " was not found"}
}
