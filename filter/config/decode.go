package config

import (
	"bytes"
	"errors"
	"strconv"

	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/internal/jsonx"
)

// wrapped is an error with context, as fmt.Errorf("%s: %w", msg, err) makes
// it (the filter does not link fmt).
type wrapped struct {
	msg string
	err error
}

func (e *wrapped) Error() string { return e.msg + ": " + e.err.Error() }
func (e *wrapped) Unwrap() error { return e.err }

// decode decodes FilterConfig from either form ParseConfig accepts:
// the Struct's protobuf encoding, or JSON text. Empty input is the empty
// configuration.
func decode(data []byte) (Filter, error) {
	var v any
	if obj, err := decodeStructLazy(data); err == nil {
		v = obj
	} else if t := bytes.TrimSpace(data); len(t) > 0 && t[0] != '{' {
		return Filter{}, &wrapped{"decode filter configuration: neither a google.protobuf.Struct nor JSON", err}
	} else if len(t) > 0 {
		if v, err = jsonx.ParseOrdered(data); err != nil {
			return Filter{}, &wrapped{"decode filter configuration", err}
		}
	}
	return mapConfig(v)
}

// mapConfig maps a parsed FilterConfig (objects as jsonx.Object) onto
// Filter the way encoding/json decodes into it: names match
// case-insensitively when no name matches exactly, unknown names are
// ignored, null leaves a field unset, and a later duplicate wins. A value of
// the wrong type is an error naming its field, such as
// "experiments[3].weights: want an array of numbers".
func mapConfig(v any) (Filter, error) {
	var raw Filter
	if v == nil {
		return raw, nil
	}
	obj, ok := v.(jsonx.Object)
	if !ok {
		return raw, errors.New("decode filter configuration: want an object")
	}
	var d jsonx.Decoder
	for _, m := range obj {
		switch jsonx.FoldName(m.Key) {
		case "VERSION":
			d.String("version", m.Value, &raw.Version)
		case "UNITHEADER":
			d.String("unitHeader", m.Value, &raw.UnitHeader)
		case "HEADERPREFIX":
			d.String("headerPrefix", m.Value, &raw.HeaderPrefix)
		case "DICTIONARYHEADER":
			d.String("dictionaryHeader", m.Value, &raw.DictionaryHeader)
		case "VERSIONHEADER":
			d.String("versionHeader", m.Value, &raw.VersionHeader)
		case "CACHESIZE":
			d.Int("cacheSize", m.Value, &raw.CacheSize)
		case "DISABLEEXPOSURESTATE":
			d.Bool("disableExposureState", m.Value, &raw.DisableExposureState)
		case "ASSIGNMENTHEADERS":
			d.String("assignmentHeaders", m.Value, &raw.AssignmentHeaders)
		case "CACHEMAXBYTES":
			d.Int("cacheMaxBytes", m.Value, &raw.CacheMaxBytes)
		case "EXPERIMENTS":
			raw.Experiments = mapList(&d, "experiments", m.Value, "an array of experiments", mapExperiment)
		case "SAVEDGROUPS":
			raw.SavedGroups = mapSavedGroups(&d, m.Value)
		case "ATTRIBUTES":
			raw.Attributes = mapList(&d, "attributes", m.Value, "an array of attributes", mapAttribute)
		}
	}
	return raw, errors.Join(d.Errs...)
}

// mapList maps an array of objects with one, null elements left zero. The
// array is a []any, or a lazyList whose items are decoded one at a time.
func mapList[T any](d *jsonx.Decoder, path string, v any, want string, one func(*jsonx.Decoder, string, jsonx.Object, *T)) []T {
	if v == nil {
		return nil
	}
	arr, isArr := v.([]any)
	lazy, isLazy := v.(lazyList)
	n := len(arr) + len(lazy.items)
	if !isArr && !isLazy {
		d.Errs = append(d.Errs, &jsonx.TypeError{Path: path, Want: want})
		return nil
	}
	out := make([]T, n)
	for i := range n {
		var e any
		if isArr {
			e = arr[i]
		} else {
			var err error
			if e, err = lazy.item(i); err != nil { // validated already: not expected
				d.Errs = append(d.Errs, &wrapped{path + "[" + strconv.Itoa(i) + "]", err})
				continue
			}
		}
		p := path + "[" + strconv.Itoa(i) + "]"
		switch x := e.(type) {
		case nil:
		case jsonx.Object:
			one(d, p, x, &out[i])
		default:
			d.Errs = append(d.Errs, &jsonx.TypeError{Path: p, Want: "an object"})
		}
	}
	return out
}

func mapAttribute(d *jsonx.Decoder, p string, obj jsonx.Object, a *Attribute) {
	for _, m := range obj {
		switch jsonx.FoldName(m.Key) {
		case "NAME":
			d.String(p+".name", m.Value, &a.Name)
		case "HEADER":
			d.String(p+".header", m.Value, &a.Header)
		case "COOKIE":
			d.String(p+".cookie", m.Value, &a.Cookie)
		case "QUERY":
			d.String(p+".query", m.Value, &a.Query)
		case "PROPERTY":
			d.String(p+".property", m.Value, &a.Property)
		}
	}
}

// mapExperiment maps one engine.Experiment by its JSON field names.
func mapExperiment(d *jsonx.Decoder, p string, obj jsonx.Object, e *engine.Experiment) {
	for _, m := range obj {
		switch jsonx.FoldName(m.Key) {
		case "KEY":
			d.String(p+".key", m.Value, &e.Key)
		case "VARIATIONS":
			if m.Value == nil {
				e.Variations = nil
				break
			}
			arr, ok := m.Value.([]any)
			if !ok {
				d.Errs = append(d.Errs, &jsonx.TypeError{Path: p + ".variations", Want: "an array"})
				break
			}
			e.Variations = make([]engine.RawMessage, len(arr))
			for i, x := range arr {
				e.Variations[i] = rawJSON(d, p+".variations["+strconv.Itoa(i)+"]", x)
			}
		case "WEIGHTS":
			d.Floats(p+".weights", m.Value, &e.Weights)
		case "COVERAGE":
			d.FloatPtr(p+".coverage", m.Value, &e.Coverage)
		case "HASHATTRIBUTE":
			d.String(p+".hashAttribute", m.Value, &e.HashAttribute)
		case "FALLBACKATTRIBUTE":
			d.String(p+".fallbackAttribute", m.Value, &e.FallbackAttribute)
		case "HASHVERSION":
			d.Int(p+".hashVersion", m.Value, &e.HashVersion)
		case "SEED":
			d.String(p+".seed", m.Value, &e.Seed)
		case "NAMESPACE":
			e.Namespace = rawJSON(d, p+".namespace", m.Value)
		case "CONDITION":
			e.Condition = rawJSON(d, p+".condition", m.Value)
		case "FORCE":
			d.IntPtr(p+".force", m.Value, &e.Force)
		case "FILTERS":
			e.Filters = rawJSON(d, p+".filters", m.Value)
		case "RANGES":
			d.FloatMatrix(p+".ranges", m.Value, &e.Ranges)
		}
	}
}

// mapSavedGroups maps savedGroups: group name → the group's JSON.
func mapSavedGroups(d *jsonx.Decoder, v any) map[string]engine.RawMessage {
	if v == nil {
		return nil
	}
	obj, ok := v.(jsonx.Object)
	if !ok {
		d.Errs = append(d.Errs, &jsonx.TypeError{Path: "savedGroups", Want: "an object"})
		return nil
	}
	out := make(map[string]engine.RawMessage, len(obj))
	for _, m := range obj {
		out[m.Key] = rawJSON(d, "savedGroups."+m.Key, m.Value)
	}
	return out
}

// rawJSON is v's JSON text, as engine.RawMessage holds it ("null" for null).
func rawJSON(d *jsonx.Decoder, path string, v any) engine.RawMessage {
	b, err := jsonx.Append(nil, v)
	if err != nil { // parsed values always encode
		d.Errs = append(d.Errs, &wrapped{path, err})
	}
	return b
}
