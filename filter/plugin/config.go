package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/allotmesh/allot/filter/engine"
)

// Defaults for the FilterConfig fields a mesh admin may leave unset.
const (
	DefaultUnitHeader       = "x-user-id"
	DefaultHeaderPrefix     = "x-experiment-"
	DefaultDictionaryHeader = "x-experiments"
	DefaultVersionHeader    = "x-experiments-version"
	DefaultCacheSize        = 10000
	// ExposureProperty is the filter state the filter writes each request's
	// assignments to; Envoy's access log prints it with
	// %FILTER_STATE(wasm.allot:PLAIN)%.
	ExposureProperty = "allot"
)

// rawConfig is allot.filter.v1.FilterConfig in its proto3 JSON form. Field
// names follow the proto's JSON names; the control plane's contract test
// keeps the two in step.
type rawConfig struct {
	Version          string                     `json:"version"`
	UnitHeader       string                     `json:"unitHeader"`
	HeaderPrefix     string                     `json:"headerPrefix"`
	DictionaryHeader string                     `json:"dictionaryHeader"`
	VersionHeader    string                     `json:"versionHeader"`
	CacheSize        int                        `json:"cacheSize"`
	DisableExposure  bool                       `json:"disableExposureState"`
	Experiments      []engine.Experiment        `json:"experiments"`
	SavedGroups      map[string]json.RawMessage `json:"savedGroups"`
	Attributes       []rawAttribute             `json:"attributes"`
}

// rawAttribute is allot.filter.v1.Attribute: a name and exactly one source.
type rawAttribute struct {
	Name     string `json:"name"`
	Header   string `json:"header"`
	Cookie   string `json:"cookie"`
	Query    string `json:"query"`
	Property string `json:"property"`
}

// source says where an attribute's value is read on each request.
type source uint8

const (
	srcNone     source = iota // not mapped: always missing
	srcHeader                 // a request header (pseudo-headers included)
	srcCookie                 // a cookie in the Cookie header(s)
	srcQuery                  // a query parameter of :path
	srcURLPath                // :path without its query string
	srcProperty               // proxy_get_property, once per request
	srcConst                  // proxy_get_property, once per configuration (node.*)
)

// attr is one attribute the compiled experiments reference.
type attr struct {
	name string
	src  source
	key  string   // header, cookie or query name
	path []string // property path
}

// Config is a compiled plugin configuration: everything the request path
// needs, computed once in on_configure.
type Config struct {
	Version          string
	UnitHeader       string
	HeaderPrefix     string
	DictionaryHeader string
	VersionHeader    string
	CacheSize        int
	// ExposureState is whether each request's assignments are recorded as
	// filter state (ExposureProperty) for the access log.
	ExposureState bool

	set *engine.Set
	// headerNames[i] is the assignment header of the set's i-th experiment;
	// keys[i] its key, values[i] its variations (header values).
	headerNames []string
	keys        []string
	values      [][]string
	// dictValues[i][v] is variation v of experiment i as an RFC 9651
	// dictionary member, key included: key="value".
	dictValues [][]string
	// byKey lists experiment indices sorted by key: the dictionary's order.
	byKey []int

	// attrs are the referenced attributes, in the set's Referenced order;
	// a request's values are read into a slice of the same length.
	attrs    []attr
	byHeader map[string][]int
	cookies  map[string][]int
	queries  map[string][]int
	urlPath  []int
	props    []int
	consts   []int
}

// ParseConfig decodes and compiles a plugin configuration: FilterConfig's
// proto3 JSON form either wrapped in a google.protobuf.Struct (what the
// control plane sends; Envoy passes its protobuf encoding) or as plain JSON
// (a google.protobuf.StringValue, which Envoy passes as its text). It reports
// every problem at once, each naming its field.
func ParseConfig(data []byte) (*Config, error) {
	if js, err := structToJSON(data); err == nil {
		data = js
	} else if t := bytes.TrimSpace(data); len(t) > 0 && t[0] != '{' {
		return nil, fmt.Errorf("decode filter configuration: neither a google.protobuf.Struct nor JSON: %w", err)
	}
	var raw rawConfig
	dec := json.NewDecoder(bytes.NewReader(data))
	if len(bytes.TrimSpace(data)) > 0 {
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("decode filter configuration: %w", err)
		}
	}
	c := &Config{
		Version:          raw.Version,
		UnitHeader:       or(raw.UnitHeader, DefaultUnitHeader),
		HeaderPrefix:     or(raw.HeaderPrefix, DefaultHeaderPrefix),
		DictionaryHeader: or(raw.DictionaryHeader, DefaultDictionaryHeader),
		VersionHeader:    or(raw.VersionHeader, DefaultVersionHeader),
		CacheSize:        raw.CacheSize,
		ExposureState:    !raw.DisableExposure,
	}
	if c.CacheSize == 0 {
		c.CacheSize = DefaultCacheSize
	}
	var errs []error
	for _, h := range []struct{ field, value string }{
		{"unitHeader", c.UnitHeader}, {"headerPrefix", c.HeaderPrefix},
		{"dictionaryHeader", c.DictionaryHeader}, {"versionHeader", c.VersionHeader},
	} {
		if !validHeaderName(h.value) {
			errs = append(errs, fmt.Errorf("%s: %q is not a lowercase header name", h.field, h.value))
		}
	}
	for _, h := range []struct{ field, value string }{{"dictionaryHeader", c.DictionaryHeader}, {"versionHeader", c.VersionHeader}} {
		if strings.HasPrefix(h.value, c.HeaderPrefix) {
			errs = append(errs, fmt.Errorf("%s: %q must not start with headerPrefix %q", h.field, h.value, c.HeaderPrefix))
		}
	}
	set, err := engine.Compile(engine.Config{Experiments: raw.Experiments, SavedGroups: raw.SavedGroups})
	if err != nil {
		errs = append(errs, err)
	}
	mapped, err := mapAttributes(raw.Attributes)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c.set = set
	n := set.Len()
	c.headerNames, c.values, c.dictValues = make([]string, n), make([][]string, n), make([][]string, n)
	c.keys = set.Keys()
	for i, key := range c.keys {
		c.headerNames[i] = c.HeaderPrefix + key
		c.values[i] = set.Variations(i)
		c.dictValues[i] = make([]string, len(c.values[i]))
		for v, value := range c.values[i] {
			c.dictValues[i][v] = key + "=" + sfString(value)
		}
	}
	c.byKey = make([]int, n)
	for i := range c.byKey {
		c.byKey[i] = i
	}
	slices.SortFunc(c.byKey, func(a, b int) int { return strings.Compare(c.keys[a], c.keys[b]) })
	c.plan(set.Referenced(), mapped)
	return c, nil
}

// mapAttributes validates the attribute sources and indexes them by name.
func mapAttributes(list []rawAttribute) (map[string]attr, error) {
	var errs []error
	out := map[string]attr{}
	for i, a := range list {
		p := fmt.Sprintf("attributes[%d]", i)
		set := 0
		for _, s := range []string{a.Header, a.Cookie, a.Query, a.Property} {
			if s != "" {
				set++
			}
		}
		switch {
		case a.Name == "":
			errs = append(errs, fmt.Errorf("%s.name: required", p))
			continue
		case set != 1:
			errs = append(errs, fmt.Errorf("%s: exactly one of header, cookie, query or property is required", p))
			continue
		case out[a.Name].name != "":
			errs = append(errs, fmt.Errorf("%s.name: %q mapped twice", p, a.Name))
			continue
		}
		m := attr{name: a.Name}
		switch {
		case a.Header != "":
			if !validHeaderName(a.Header) && !strings.HasPrefix(a.Header, ":") {
				errs = append(errs, fmt.Errorf("%s.header: %q is not a lowercase header name", p, a.Header))
			}
			m.src, m.key = srcHeader, a.Header
		case a.Cookie != "":
			m.src, m.key = srcCookie, a.Cookie
		case a.Query != "":
			m.src, m.key = srcQuery, a.Query
		default:
			m = propertyAttr(a.Name, a.Property)
		}
		out[a.Name] = m
	}
	return out, errors.Join(errs...)
}

// propertyAttr maps an Envoy attribute path to the cheapest source: request
// attributes Envoy also exposes as pseudo-headers come from the header map
// the filter reads anyway, node attributes are constant per configuration,
// anything else costs one host call per request.
func propertyAttr(name, property string) attr {
	switch property {
	case "request.path":
		return attr{name: name, src: srcHeader, key: ":path"}
	case "request.url_path":
		return attr{name: name, src: srcURLPath}
	case "request.method":
		return attr{name: name, src: srcHeader, key: ":method"}
	case "request.host":
		return attr{name: name, src: srcHeader, key: ":authority"}
	case "request.scheme":
		return attr{name: name, src: srcHeader, key: ":scheme"}
	}
	path := strings.Split(property, ".")
	if path[0] == "node" {
		return attr{name: name, src: srcConst, path: path}
	}
	return attr{name: name, src: srcProperty, path: path}
}

// plan builds the per-request extraction plan for the referenced attributes.
func (c *Config) plan(referenced []string, mapped map[string]attr) {
	c.byHeader, c.cookies, c.queries = map[string][]int{}, map[string][]int{}, map[string][]int{}
	for i, name := range referenced {
		a, ok := mapped[name]
		if !ok {
			a = attr{name: name}
			if name == "id" {
				a.src, a.key = srcHeader, c.UnitHeader
			}
		}
		c.attrs = append(c.attrs, a)
		switch a.src {
		case srcHeader:
			c.byHeader[a.key] = append(c.byHeader[a.key], i)
		case srcCookie:
			c.cookies[a.key] = append(c.cookies[a.key], i)
		case srcQuery:
			c.queries[a.key] = append(c.queries[a.key], i)
		case srcURLPath:
			c.urlPath = append(c.urlPath, i)
		case srcProperty:
			c.props = append(c.props, i)
		case srcConst:
			c.consts = append(c.consts, i)
		}
	}
}

// Len is the number of experiments in the configuration.
func (c *Config) Len() int { return len(c.headerNames) }

// isAssignmentHeader reports whether an inbound header name is one the
// filter owns (and therefore strips): the prefix, the dictionary and the
// version header, in any casing.
func (c *Config) isAssignmentHeader(name string) bool {
	return hasPrefixFold(name, c.HeaderPrefix) || strings.EqualFold(name, c.DictionaryHeader) || strings.EqualFold(name, c.VersionHeader)
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// validHeaderName reports whether s is a non-empty lowercase HTTP token, as
// Envoy stores header names.
func validHeaderName(s string) bool {
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
