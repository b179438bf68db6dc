package plugin

import (
	"slices"
	"strings"

	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/cookie"
	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/wire"
)

// source says where an attribute's value is read on each request.
type source uint8

const (
	srcNone     source = iota // not mapped: always missing
	srcHeader                 // a request header (pseudo-headers included)
	srcCookie                 // a cookie in the Cookie header(s)
	srcQuery                  // a query parameter of :path
	srcURLPath                // :path without its query string
	srcProperty               // Host.Property, once per request
	srcConst                  // Host.Property, once per configuration (node.*)
)

// attr is one attribute the compiled experiments reference.
type attr struct {
	name string
	src  source
	key  string   // header, cookie or query name
	prop Property // srcProperty, srcConst
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
	// CacheMaxBytes is the size of the cache's arena, which holds its
	// entries (attribute values, assignments, dictionary, 8 bytes of
	// header each); 0: no byte bound.
	CacheMaxBytes int
	// ExposureState is whether each request's assignments are recorded as
	// filter state (wire.ExposureProperty) for the access log.
	ExposureState bool
	// PerExperimentHeaders is whether each assignment is also added as its
	// own header (HeaderPrefix + key), besides the dictionary.
	PerExperimentHeaders bool

	set *engine.Set
	// headerNames[i] is the assignment header of the set's i-th experiment;
	// keys[i] its key, values[i] its variations (header values).
	headerNames []string
	keys        []string
	values      [][]string
	// revs[i] is experiment i's assignment revision, which its outcome
	// stats carry (wire.OutcomeMetric).
	revs []int64
	// dictValues[i][v] is variation v of experiment i as an RFC 9651
	// dictionary member, key and separator included: `, key="value"`.
	dictValues [][]string
	// byKey lists experiment indices sorted by key: the dictionary's order.
	byKey []int

	// attrs are the referenced attributes, in the set's Referenced order;
	// a request's values are read into a slice of the same length.
	attrs []attr
	// headers are the request headers the filter reads attributes from:
	// a short list scanned with a length check beats hashing every
	// request header name into a map.
	headers []headerAttr
	cookies map[string][]int
	queries map[string][]int
	urlPath []int
	props   []int
	consts  []int
	// condAttrs are the indices of the attributes conditions read: the
	// key of the condition-outcome cache.
	condAttrs []int

	// jar is the sticky cookie's, nil without sticky bucketing. Its value
	// is read like a cookie attribute's, into the slot after the
	// attributes' (nvals-1), so that it is part of the assignment cache's
	// key.
	jar *cookie.Jar
	// names are the attributes' names, in attrs' order: what the jar
	// matches a cookie's documents against.
	names []string
	// nvals is the number of values a request reads: len(attrs), plus
	// one for the sticky cookie.
	nvals int

	// outBase[i] is the outcome slot of variation 0 of experiment i, -1
	// when the experiment does not observe its outcomes; variation v's
	// slot is outBase[i]+v. nslots is the number of slots.
	outBase []int32
	nslots  int

	// ofrep is the OFREP endpoint's settings, nil when the configuration
	// does not answer OFREP.
	ofrep *ofrepConfig
}

// ParseConfig decodes and compiles a plugin configuration with
// config.Parse (the one decoder of FilterConfig, which the control plane
// validates with too) and lays out what the request path needs. It reports
// every problem at once, each naming its field.
func ParseConfig(data []byte) (*Config, error) {
	f, set, err := config.Parse(data)
	if err != nil {
		return nil, err
	}
	c := &Config{
		Version:              f.Version,
		UnitHeader:           f.UnitHeader,
		HeaderPrefix:         f.HeaderPrefix,
		DictionaryHeader:     f.DictionaryHeader,
		VersionHeader:        f.VersionHeader,
		CacheSize:            f.CacheSize,
		CacheMaxBytes:        max(f.CacheMaxBytes, 0),
		ExposureState:        !f.DisableExposureState,
		PerExperimentHeaders: f.AssignmentHeaders != config.AssignmentHeadersDictionary,
		set:                  set,
	}
	n := set.Len()
	c.headerNames, c.values, c.dictValues = make([]string, n), make([][]string, n), make([][]string, n)
	c.keys = set.Keys()
	for i, key := range c.keys {
		c.headerNames[i] = c.HeaderPrefix + key
		c.values[i] = set.Variations(i)
		c.dictValues[i] = make([]string, len(c.values[i]))
		for v, value := range c.values[i] {
			c.dictValues[i][v] = wire.DictionaryMember(key, value)
		}
	}
	// Keys are unique (Compile checks). Sorting the keys themselves reuses
	// the string sort the engine links; a SortFunc over indices would add
	// another instantiation of pdqsort, about 15 KB of module.
	index := make(map[string]int, n)
	for i, key := range c.keys {
		index[key] = i
	}
	c.byKey = make([]int, 0, n)
	for _, key := range slices.Sorted(slices.Values(c.keys)) {
		c.byKey = append(c.byKey, index[key])
	}
	refs := set.Referenced()
	c.plan(refs, mapAttributes(f.Attributes))
	for _, name := range set.ConditionAttributes() {
		c.condAttrs = append(c.condAttrs, slices.Index(refs, name))
	}
	c.nvals = len(c.attrs)
	observed := make([]bool, n)
	c.revs = make([]int64, n)
	for i := range f.Experiments {
		observed[i] = f.Experiments[i].Observe
		c.revs[i] = f.Experiments[i].AssignmentRevision
	}
	c.observe(observed)
	if f.StickyCookie != nil {
		c.jar, c.names = cookie.New(f.StickyCookie), refs
		c.cookies[c.jar.Name()] = append(c.cookies[c.jar.Name()], c.nvals)
		c.nvals++
	}
	if f.OfrepEnabled() {
		c.compileOfrep(f)
	}
	return c, nil
}

// mapAttributes indexes the (checked) attribute sources by name.
func mapAttributes(list []config.Attribute) map[string]attr {
	out := make(map[string]attr, len(list))
	for _, a := range list {
		m := attr{name: a.Name}
		switch {
		case a.Header != "":
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
	return out
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
	prop := Property{ID: propertyID(property), Path: strings.Split(property, ".")}
	if prop.Path[0] == "node" {
		return attr{name: name, src: srcConst, prop: prop}
	}
	return attr{name: name, src: srcProperty, prop: prop}
}

// headerAttr is one request header the filter reads and the attribute
// indices its value fills.
type headerAttr struct {
	name string
	idx  []int
}

// attrsOfHeader returns the attribute indices header name fills, if any.
func (c *Config) attrsOfHeader(name string) []int {
	for i := range c.headers {
		if h := &c.headers[i]; len(h.name) == len(name) && h.name == name {
			return h.idx
		}
	}
	return nil
}

// plan builds the per-request extraction plan for the referenced attributes.
func (c *Config) plan(referenced []string, mapped map[string]attr) {
	c.cookies, c.queries = map[string][]int{}, map[string][]int{}
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
			j := slices.IndexFunc(c.headers, func(h headerAttr) bool { return h.name == a.key })
			if j < 0 {
				j = len(c.headers)
				c.headers = append(c.headers, headerAttr{name: a.key})
			}
			c.headers[j].idx = append(c.headers[j].idx, i)
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

// Sticky reports whether the configuration has sticky bucketing on: then
// a request may leave a Set-Cookie for its response (Plugin.SetCookie).
func (c *Config) Sticky() bool { return c.jar != nil }

// Len is the number of experiments in the configuration.
func (c *Config) Len() int { return len(c.headerNames) }

// isAssignmentHeader reports whether an inbound header name is one the
// filter owns (and therefore strips): wire.OwnsHeader under c's names.
func (c *Config) isAssignmentHeader(name string) bool {
	return wire.OwnsHeader(name, c.HeaderPrefix, c.DictionaryHeader, c.VersionHeader)
}

// prune drops from a unit's sticky documents the assignments of
// experiments the configuration does not have (stopped or deleted), so
// that its cookie fits. The documents are the request's own already (the
// jar keeps no other). It runs only when a cookie would be too long, so
// it may take its time.
func (c *Config) prune(docs engine.StickyDocs) {
	for _, d := range docs {
		for k := range d.Assignments {
			if j := strings.LastIndex(k, "__"); j < 0 || !slices.Contains(c.keys, k[:j]) {
				delete(d.Assignments, k)
			}
		}
	}
}
