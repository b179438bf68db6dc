package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/allotmesh/allot/filter/engine"
)

// Defaults for the FilterConfig fields a mesh admin may leave unset.
const (
	DefaultUnitHeader   = "x-user-id"
	DefaultHeaderPrefix = "x-experiment-"
)

// rawConfig is allot.filter.v1.FilterConfig in its proto3 JSON form, which is
// what Envoy hands to on_configure (the control plane sends it as a
// google.protobuf.Struct). Field names follow the proto's JSON names; the
// control plane's contract test keeps the two in step.
type rawConfig struct {
	Version      string                     `json:"version"`
	UnitHeader   string                     `json:"unitHeader"`
	HeaderPrefix string                     `json:"headerPrefix"`
	Experiments  []engine.Experiment        `json:"experiments"`
	SavedGroups  map[string]json.RawMessage `json:"savedGroups"`
}

// Config is a compiled plugin configuration: everything the request path
// needs, computed once in on_configure.
type Config struct {
	Version      string
	UnitHeader   string
	HeaderPrefix string
	set          *engine.Set
	// headerNames[i] is the assignment header of the set's i-th experiment.
	headerNames []string
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
	dec.UseNumber()
	if len(bytes.TrimSpace(data)) > 0 {
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("decode filter configuration: %w", err)
		}
	}
	c := &Config{Version: raw.Version, UnitHeader: raw.UnitHeader, HeaderPrefix: raw.HeaderPrefix}
	if c.UnitHeader == "" {
		c.UnitHeader = DefaultUnitHeader
	}
	if c.HeaderPrefix == "" {
		c.HeaderPrefix = DefaultHeaderPrefix
	}
	var errs []error
	if !validHeaderName(c.UnitHeader) {
		errs = append(errs, fmt.Errorf("unitHeader: %q is not a lowercase header name", c.UnitHeader))
	}
	if !validHeaderName(c.HeaderPrefix) {
		errs = append(errs, fmt.Errorf("headerPrefix: %q is not a lowercase header name prefix", c.HeaderPrefix))
	}
	set, err := engine.Compile(engine.Config{Experiments: raw.Experiments, SavedGroups: raw.SavedGroups})
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	c.set = set
	c.headerNames = make([]string, len(raw.Experiments))
	for i, e := range raw.Experiments {
		c.headerNames[i] = c.HeaderPrefix + e.Key
	}
	return c, nil
}

// Len is the number of experiments in the configuration.
func (c *Config) Len() int { return len(c.headerNames) }

// validHeaderName reports whether s is a non-empty lowercase HTTP token, as
// Envoy stores header names.
func validHeaderName(s string) bool {
	if s == "" || strings.HasPrefix(s, ":") {
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
