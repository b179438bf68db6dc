// Package config is the one decoder of the filter's wire contract,
// allot.filter.v1.FilterConfig (proto/allot/filter/v1/config.proto), and the
// checks of its settings. Everything that reads a filter configuration or an
// experiment definition — the filter's on_configure, the admin API's
// validation and preview, allotctl eval, allotd's start-up check of its mesh
// settings — calls Parse (or Decode and Check), then the engine compiles the
// experiments: what the control plane accepts is exactly what a proxy runs.
//
// It decodes both forms Envoy may hand the filter: the protobuf encoding of
// a google.protobuf.Struct holding the proto3 JSON form, and JSON text —
// strictly, as protojson does: exact field names, no unknown fields, no
// values of the wrong type, and no control-plane fields with values. It
// imports only the standard library, the engine and filter/internal/jsonx:
// it is linked into the Wasm module, so it must never import gRPC, net/http,
// the protobuf runtime, fmt, os, encoding/json, regexp or time.
package config

import (
	"errors"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/engine"
)

// Defaults for the settings a mesh admin may leave unset.
const (
	DefaultUnitHeader       = "x-user-id"
	DefaultHeaderPrefix     = "x-experiment-"
	DefaultDictionaryHeader = "x-experiments"
	DefaultVersionHeader    = "x-experiments-version"
	DefaultCacheSize        = 10000
	// DefaultCacheMaxBytes bounds a VM's cache by the size of its entries.
	DefaultCacheMaxBytes = 1 << 20
)

// MaxIndex bounds the experiments of one configuration and the variations
// of one experiment: the filter's cache entries store their indices in 16
// bits, so Parse refuses more.
const MaxIndex = 0xffff

// MaxObserved bounds the experiments of one configuration that observe
// their outcomes (Experiment.Observe): each of their variations costs
// Envoy seven stats, and each observed assignment a request gets costs its
// response a few host calls, so Parse refuses more.
const MaxObserved = 100

// The values of the AssignmentHeaders enum, by name.
const (
	AssignmentHeadersUnspecified = "ASSIGNMENT_HEADERS_UNSPECIFIED"
	AssignmentHeadersAll         = "ASSIGNMENT_HEADERS_ALL"
	AssignmentHeadersDictionary  = "ASSIGNMENT_HEADERS_DICTIONARY"
)

// Filter is allot.filter.v1.FilterConfig as decoded: every field of the
// contract a proxy acts on, with proto3 defaults (zero values) for what the
// input left unset. Defaults fills the settings' defaults.
type Filter struct {
	Version              string
	UnitHeader           string
	HeaderPrefix         string
	DictionaryHeader     string
	VersionHeader        string
	CacheSize            int
	DisableExposureState bool
	// AssignmentHeaders is the enum value's name: "" when unset or 0, the
	// decimal number for a number the enum does not define (proto3 enums
	// are open; Check rejects it).
	AssignmentHeaders string
	CacheMaxBytes     int
	Experiments       []engine.Experiment
	SavedGroups       map[string]engine.RawMessage
	Attributes        []Attribute
	// StickyCookie, when set, turns sticky bucketing on.
	StickyCookie *StickyCookie
	// Ofrep, when set and enabled, makes the filter answer OFREP.
	Ofrep *Ofrep
}

// Ofrep is allot.filter.v1.Ofrep: the filter's OFREP endpoint. Defaults
// fills MaxBodyBytes.
type Ofrep struct {
	Enabled          bool
	MaxBodyBytes     int
	CorsAllowOrigins []string
}

// OFREP bounds and defaults.
const (
	// DefaultOfrepMaxBodyBytes bounds an OFREP request's body when
	// maxBodyBytes is unset: an evaluation context of a few hundred
	// attributes.
	DefaultOfrepMaxBodyBytes = 16 << 10
	// MaxOfrepMaxBodyBytes is the largest maxBodyBytes: Envoy buffers the
	// whole body before the filter answers.
	MaxOfrepMaxBodyBytes = 64 << 10
	// MaxOfrepOrigins bounds corsAllowOrigins.
	MaxOfrepOrigins = 16
	// MaxOfrepOriginLen bounds one origin.
	MaxOfrepOriginLen = 256
)

// OfrepEnabled reports whether the configuration answers OFREP.
func (f *Filter) OfrepEnabled() bool { return f.Ofrep != nil && f.Ofrep.Enabled }

// StickyCookie is allot.filter.v1.StickyCookie: the cookie that carries a
// unit's sticky assignments and the keys that sign it. Defaults fills its
// defaults.
type StickyCookie struct {
	Name           string
	Keys           []SigningKey
	Path           string
	Domain         string
	MaxAgeSeconds  int
	SameSite       string
	Insecure       bool
	ScriptReadable bool
}

// SigningKey is allot.filter.v1.SigningKey.
type SigningKey struct {
	ID     string
	Secret []byte
}

// Sticky cookie defaults and bounds.
const (
	DefaultStickyCookiePath   = "/"
	DefaultStickyCookieMaxAge = 365 * 24 * 3600
	DefaultStickySameSite     = "Lax"
	// MinSigningKeyBytes is the shortest secret a signing key may have:
	// SHA-256's output size (RFC 2104 advises no less).
	MinSigningKeyBytes = 32
	// MaxSigningKeyID is the longest key id: ids travel in every cookie.
	MaxSigningKeyID = 16
)

// Attribute is allot.filter.v1.Attribute: a name and exactly one source.
type Attribute struct {
	Name     string
	Header   string
	Cookie   string
	Query    string
	Property string
}

// Decode decodes a FilterConfig from either form Envoy hands the filter:
// the protobuf encoding of a google.protobuf.Struct, or JSON text. Empty
// input is the empty configuration. It reports every problem with its
// field path.
func Decode(data []byte) (*Filter, error) {
	f, err := decode(data)
	if err != nil {
		return nil, err
	}
	return &f, nil
}

// Parse decodes a configuration, fills the defaults, checks the settings
// and compiles the experiments: the whole of what a proxy does with a
// configuration before its first request. It reports every problem at
// once.
func Parse(data []byte) (*Filter, *engine.Set, error) {
	f, err := Decode(data)
	if err != nil {
		return nil, nil, err
	}
	f.Defaults()
	errs := []error{f.Check()}
	set, err := engine.Compile(engine.Config{Experiments: f.Experiments, SavedGroups: f.SavedGroups})
	errs = append(errs, err)
	if n := len(f.Experiments); n > MaxIndex {
		errs = append(errs, &engine.FieldError{Path: "experiments", Message: strconv.Itoa(n) + " for one proxy, at most " + strconv.Itoa(MaxIndex)})
	}
	observed := 0
	for i := range f.Experiments {
		if n := len(f.Experiments[i].Variations); n > MaxIndex {
			errs = append(errs, &engine.FieldError{Path: "experiments[" + strconv.Itoa(i) + "].variations", Message: strconv.Itoa(n) + ", at most " + strconv.Itoa(MaxIndex)})
		}
		if f.Experiments[i].Observe {
			if observed++; observed > MaxObserved {
				errs = append(errs, &engine.FieldError{Path: "experiments[" + strconv.Itoa(i) + "].observe", Message: "observed experiment " + strconv.Itoa(observed) + " of one proxy, at most " + strconv.Itoa(MaxObserved)})
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return f, set, nil
}

// Defaults fills the unset settings with their defaults.
func (f *Filter) Defaults() {
	f.UnitHeader = or(f.UnitHeader, DefaultUnitHeader)
	f.HeaderPrefix = or(f.HeaderPrefix, DefaultHeaderPrefix)
	f.DictionaryHeader = or(f.DictionaryHeader, DefaultDictionaryHeader)
	f.VersionHeader = or(f.VersionHeader, DefaultVersionHeader)
	if f.CacheSize == 0 {
		f.CacheSize = DefaultCacheSize
	}
	if f.CacheMaxBytes == 0 {
		f.CacheMaxBytes = DefaultCacheMaxBytes
	}
	if f.AssignmentHeaders == "" || f.AssignmentHeaders == AssignmentHeadersUnspecified {
		f.AssignmentHeaders = AssignmentHeadersAll
	}
	if o := f.Ofrep; o != nil && o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = DefaultOfrepMaxBodyBytes
	}
	if c := f.StickyCookie; c != nil {
		c.Path = or(c.Path, DefaultStickyCookiePath)
		c.SameSite = or(c.SameSite, DefaultStickySameSite)
		if c.MaxAgeSeconds == 0 {
			c.MaxAgeSeconds = DefaultStickyCookieMaxAge
		}
	}
}

// Check validates the settings (not the experiments: engine.Compile does),
// each problem an *engine.FieldError naming its field. Unset header names
// are valid: their defaults apply.
func (f *Filter) Check() error {
	var errs []error
	fail := func(path, msg string) { errs = append(errs, &engine.FieldError{Path: path, Message: msg}) }
	switch f.AssignmentHeaders {
	case "", AssignmentHeadersUnspecified, AssignmentHeadersAll, AssignmentHeadersDictionary:
	default:
		v := strconv.Quote(f.AssignmentHeaders)
		if _, err := strconv.Atoi(f.AssignmentHeaders); err == nil {
			v = "enum number " + f.AssignmentHeaders
		}
		fail("assignmentHeaders", v+" is not "+AssignmentHeadersAll+" (1) or "+AssignmentHeadersDictionary+" (2)")
	}
	prefix := or(f.HeaderPrefix, DefaultHeaderPrefix)
	for _, h := range []struct{ field, value string }{
		{"unitHeader", f.UnitHeader}, {"headerPrefix", f.HeaderPrefix},
		{"dictionaryHeader", f.DictionaryHeader}, {"versionHeader", f.VersionHeader},
	} {
		if h.value != "" && !ValidHeaderName(h.value) {
			fail(h.field, strconv.Quote(h.value)+" is not a lowercase header name")
		}
	}
	for _, h := range []struct{ field, value, def string }{
		{"dictionaryHeader", f.DictionaryHeader, DefaultDictionaryHeader},
		{"versionHeader", f.VersionHeader, DefaultVersionHeader},
	} {
		if v := or(h.value, h.def); strings.HasPrefix(v, prefix) {
			fail(h.field, strconv.Quote(v)+" must not start with headerPrefix "+strconv.Quote(prefix))
		}
	}
	// A header the filter reads must not be one it owns: it removes those
	// from every request as forged before reading anything.
	dict, version := or(f.DictionaryHeader, DefaultDictionaryHeader), or(f.VersionHeader, DefaultVersionHeader)
	owned := func(h string) bool { return strings.HasPrefix(h, prefix) || h == dict || h == version }
	if owned(f.UnitHeader) {
		fail("unitHeader", strconv.Quote(f.UnitHeader)+" is an assignment header (headerPrefix, dictionaryHeader or versionHeader), which the filter removes from every request")
	}
	seen := map[string]bool{}
	for i, a := range f.Attributes {
		p := "attributes[" + strconv.Itoa(i) + "]"
		set := 0
		for _, s := range []string{a.Header, a.Cookie, a.Query, a.Property} {
			if s != "" {
				set++
			}
		}
		switch {
		case a.Name == "":
			fail(p+".name", "is required")
			continue
		case set != 1:
			fail(p, "exactly one of header, cookie, query or property is required")
			continue
		case seen[a.Name]:
			fail(p+".name", strconv.Quote(a.Name)+" mapped twice")
			continue
		}
		seen[a.Name] = true
		switch {
		case a.Header == "" || strings.HasPrefix(a.Header, ":"):
		case !ValidHeaderName(a.Header):
			fail(p+".header", strconv.Quote(a.Header)+" is not a lowercase header name")
		case owned(a.Header):
			fail(p+".header", strconv.Quote(a.Header)+" is an assignment header (headerPrefix, dictionaryHeader or versionHeader), which the filter removes from every request")
		}
	}
	if c := f.StickyCookie; c != nil {
		errs = append(errs, c.check())
	}
	if o := f.Ofrep; o != nil {
		errs = append(errs, o.check())
	}
	return errors.Join(errs...)
}

// check validates the OFREP settings: the body bound and the CORS origins,
// each an exact origin (a wildcard would let any site read a unit's
// assignments with its cookie).
func (o *Ofrep) check() error {
	var errs []error
	fail := func(path, msg string) {
		errs = append(errs, &engine.FieldError{Path: "ofrep." + path, Message: msg})
	}
	if o.MaxBodyBytes > MaxOfrepMaxBodyBytes {
		fail("maxBodyBytes", strconv.Itoa(o.MaxBodyBytes)+", at most "+strconv.Itoa(MaxOfrepMaxBodyBytes))
	}
	if n := len(o.CorsAllowOrigins); n > MaxOfrepOrigins {
		fail("corsAllowOrigins", strconv.Itoa(n)+" origins, at most "+strconv.Itoa(MaxOfrepOrigins))
	}
	for i, s := range o.CorsAllowOrigins {
		p := "corsAllowOrigins[" + strconv.Itoa(i) + "]"
		switch {
		case len(s) > MaxOfrepOriginLen:
			fail(p, strconv.Itoa(len(s))+" characters, at most "+strconv.Itoa(MaxOfrepOriginLen))
		case s == "*":
			fail(p, `"*" is not allowed: the browser sends the sticky cookie, so list exact origins`)
		case !isOrigin(s):
			fail(p, strconv.Quote(s)+` is not an origin ("http://host[:port]" or "https://host[:port]", no path)`)
		}
	}
	return errors.Join(errs...)
}

// isOrigin reports whether s is an origin as browsers send it in Origin:
// http or https, a host of visible ASCII and an optional port, nothing
// after.
func isOrigin(s string) bool {
	rest, ok := strings.CutPrefix(s, "https://")
	if !ok {
		if rest, ok = strings.CutPrefix(s, "http://"); !ok {
			return false
		}
	}
	if rest == "" {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '_') {
			return false
		}
	}
	return true
}

// check validates the sticky cookie's settings; unset ones are valid
// (their defaults apply), except the name and the keys.
func (c *StickyCookie) check() error {
	var errs []error
	fail := func(path, msg string) {
		errs = append(errs, &engine.FieldError{Path: "stickyCookie." + path, Message: msg})
	}
	switch {
	case c.Name == "":
		fail("name", "is required")
	case !isToken(c.Name):
		fail("name", strconv.Quote(c.Name)+" is not a cookie name (an RFC 6265 token)")
	}
	if c.Path != "" && (c.Path[0] != '/' || !cookieAttrValue(c.Path)) {
		fail("path", strconv.Quote(c.Path)+" is not a path starting with /")
	}
	if c.Domain != "" && !cookieAttrValue(c.Domain) {
		fail("domain", strconv.Quote(c.Domain)+" is not a domain")
	}
	switch c.SameSite {
	case "", "Lax", "Strict":
	case "None":
		if c.Insecure {
			fail("sameSite", `"None" requires Secure: unset insecure`)
		}
	default:
		fail("sameSite", strconv.Quote(c.SameSite)+` is not "Lax", "Strict" or "None"`)
	}
	if len(c.Keys) == 0 {
		fail("keys", "at least one signing key is required (allotd: -sticky-keys)")
	}
	errs = append(errs, CheckKeys("stickyCookie.keys", c.Keys))
	return errors.Join(errs...)
}

// CheckKeys validates signing keys, each problem an *engine.FieldError
// under path ("stickyCookie.keys", or a key file's "keys"): ids of 1 to
// MaxSigningKeyID characters of A-Z a-z 0-9 _ -, unique, and secrets of at
// least MinSigningKeyBytes.
func CheckKeys(path string, keys []SigningKey) error {
	var errs []error
	fail := func(p, msg string) { errs = append(errs, &engine.FieldError{Path: p, Message: msg}) }
	seen := map[string]bool{}
	for i, k := range keys {
		p := path + "[" + strconv.Itoa(i) + "]"
		switch {
		case k.ID == "":
			fail(p+".id", "is required")
		case len(k.ID) > MaxSigningKeyID || !keyID(k.ID):
			fail(p+".id", strconv.Quote(k.ID)+" is not 1 to "+strconv.Itoa(MaxSigningKeyID)+" characters of A-Z a-z 0-9 _ -")
		case seen[k.ID]:
			fail(p+".id", strconv.Quote(k.ID)+" is given twice")
		}
		seen[k.ID] = true
		if len(k.Secret) < MinSigningKeyBytes {
			fail(p+".secret", strconv.Itoa(len(k.Secret))+" bytes, at least "+strconv.Itoa(MinSigningKeyBytes))
		}
	}
	return errors.Join(errs...)
}

// isToken reports whether s is an RFC 7230 token, as RFC 6265 requires of
// a cookie name.
func isToken(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`()<>@,;:\"/[]?={}`, c) >= 0 {
			return false
		}
	}
	return s != ""
}

// cookieAttrValue reports whether s may be a cookie attribute's value:
// visible ASCII without ';'.
func cookieAttrValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == ';' {
			return false
		}
	}
	return true
}

// keyID reports whether s holds only A-Z a-z 0-9 _ -: the characters a
// cookie value may carry unencoded.
func keyID(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidHeaderName reports whether s is a non-empty lowercase HTTP token, as
// Envoy stores header names.
func ValidHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
