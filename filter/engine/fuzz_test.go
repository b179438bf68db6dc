package engine

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/internal/jsonx"
)

// FuzzCompile: arbitrary JSON configs never panic; Compile either rejects
// them or returns a Set whose Assign does not panic and returns one
// assignment per experiment, and whose two-step assignment (Outcomes, then
// AssignStrings) places string attributes exactly as Assign does.
func FuzzCompile(f *testing.F) {
	f.Add([]byte(benchConfig(2)), []byte(`{"id":"u1","country":"US","platform":"ios","version":"2.3.1"}`))
	f.Add([]byte(`{"experiments":[{"key":"a","variations":["x","y"],"namespace":["ns",0,0.5],"filters":[{"seed":"s","ranges":[[0,0.5]]}]}]}`), []byte(`{"id":7}`))
	f.Add([]byte(`{"experiments":[{"key":"a","variations":[1,true],"ranges":[[0.5,1],[0,0.5]],"force":0,"condition":{"$not":{"t":{"$size":{"$gt":1}}}}}],"savedGroups":{"g":[1]}}`), []byte(`{"t":[1,2,3]}`))
	f.Add([]byte(`{"experiments":[{"key":"a","variations":["x","y"],"weights":[0.5,0.6],"condition":{"a":{"$regex":"(["}}}]}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, cfgJSON, attrsJSON []byte) {
		var cfg Config
		if err := json.Unmarshal(cfgJSON, &cfg); err != nil {
			return
		}
		s, err := Compile(cfg)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		var attrs Attributes
		_ = json.Unmarshal(attrsJSON, &attrs)
		got := s.Assign(nil, attrs)
		if len(got) != s.Len() {
			t.Fatalf("%d assignments for %d experiments", len(got), s.Len())
		}
		for _, a := range got {
			if a.InExperiment && a.Value == "" && a.VariationID < 0 {
				t.Fatalf("bad assignment %+v", a)
			}
		}
		// The filter's two steps agree with Assign on the string
		// attributes (the only kind a proxy has).
		refs := s.Referenced()
		vals := make([]string, len(refs))
		strAttrs, condAttrs := Attributes{}, Attributes{}
		for i, name := range refs {
			if v, ok := attrs[name].(string); ok && v != "" {
				vals[i], strAttrs[name] = v, v
			}
		}
		for _, name := range s.ConditionAttributes() {
			if v, ok := strAttrs[name]; ok {
				condAttrs[name] = v
			}
		}
		want := s.Assign(nil, strAttrs)
		for i, v := range s.AssignStrings(nil, vals, s.Outcomes(nil, condAttrs)) {
			if w := want[i]; (v >= 0) != w.InExperiment || v >= 0 && int(v) != w.VariationID {
				t.Fatalf("%s: AssignStrings %d, Assign %+v (attributes %v)", w.Key, v, w, strAttrs)
			}
		}
	})
}

// FuzzCondition: arbitrary condition and attribute JSON never panic, in
// the strict and the lenient (reference) compilation.
func FuzzCondition(f *testing.F) {
	f.Add([]byte(`{"$and":[{"father.age":{"$gt":65}},{"$or":[{"bday":{"$regex":"-12-25$"}},{"name":"santa"}]}]}`), []byte(`{"name":"santa","bday":"1980-12-25","father":{"age":70}}`))
	f.Add([]byte(`{"tags":{"$elemMatch":{"$in":["a","b"]}},"v":{"$vgte":"1.0.0-beta.2"}}`), []byte(`{"tags":["d","b"],"v":"1.0.0"}`))
	f.Add([]byte(`{"n":{"$gt":"5","$lt":10,"$exists":true},"x":[1,{"a":null}],"$nor":[{"k":{"$type":"array"}}]}`), []byte(`{"n":"8","x":[1,{"a":null}],"k":{}}`))
	f.Add([]byte(`{"id":{"$inGroup":"g"},"s":{"$size":0},"a":{"$alli":["X"]},"r":{"$regexi":"^a"}}`), []byte(`{"id":1,"s":[],"a":["x"],"r":5}`))
	f.Fuzz(func(t *testing.T, condJSON, attrsJSON []byte) {
		groups := map[string]RawMessage{"g": RawMessage(`[1,"2",null]`)}
		var attrs Attributes
		_ = json.Unmarshal(attrsJSON, &attrs)
		if c, err := CompileCondition(condJSON, groups); err == nil && c != nil {
			c.Match(attrs)
			c.Referenced()
		}
		g, _ := compileGroups(groups)
		if c, _ := compileCondition("condition", condJSON, g, newSlots()); c != nil {
			c.root.eval(map[string]any(attrs), nil)
		}
	})
}

// FuzzDecodeFilter: decodeFilter decodes a filter as encoding/json does
// with unknown fields disallowed, except that names match exactly, as
// GrowthBook's SDKs read them (encoding/json also matches other casings,
// which decodeFilter refuses as unknown), integral number literals such as
// 2.0 are accepted for hashVersion, and a name given twice is not compared.
func FuzzDecodeFilter(f *testing.F) {
	for _, s := range []string{`{"seed":"s","ranges":[[0,0.5],null,[null,1]],"attribute":"a","hashVersion":1}`,
		`null`, `{}`, `[]`, `{"SEED":"x","ſeed":"y"}`, `{"atribute":"x"}`, `{"ranges":[1]}`, `{"hashVersion":1.5}`,
		`{"hashVersion":2.0}`, `{"seed":null,"ranges":null}`, `"x"`, `{"Seed":"s","ranges":[[0,1]]}`} {
		f.Add([]byte(s))
	}
	known := []string{"attribute", "seed", "hashVersion", "ranges"}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := jsonx.ParseOrdered(data)
		if err != nil {
			return
		}
		if o, ok := v.(jsonx.Object); ok {
			seen := map[string]bool{}
			for _, m := range o {
				if !slices.Contains(known, m.Key) && slices.ContainsFunc(known, func(k string) bool { return strings.EqualFold(k, m.Key) }) {
					if _, err := decodeFilter(v); err == nil {
						t.Fatalf("decodeFilter(%s) accepted %q, another casing of a field name", data, m.Key)
					}
					return
				}
				if seen[m.Key] {
					return
				}
				seen[m.Key] = true
			}
		}
		var want Filter
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		werr := dec.Decode(&want)
		got, err := decodeFilter(v)
		var te *json.UnmarshalTypeError
		if werr != nil && err == nil && errors.As(werr, &te) && te.Field == "hashVersion" && strings.HasPrefix(te.Value, "number") {
			return
		}
		if (err == nil) != (werr == nil) {
			t.Fatalf("decodeFilter(%s) error %v, encoding/json %v", data, err, werr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeFilter(%s) = %#v, encoding/json %#v", data, got, want)
		}
	})
}
