package config

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/internal/jsonx"
)

// A minimal protobuf encoder for google.protobuf.Struct, for tests.
func lenField(num int, payload []byte) []byte {
	b := binary.AppendUvarint(nil, uint64(num<<3|2))
	b = binary.AppendUvarint(b, uint64(len(payload)))
	return append(b, payload...)
}

func pbStruct(kv ...any) []byte { // key, value, key, value...
	var b []byte
	for i := 0; i < len(kv); i += 2 {
		entry := append(lenField(1, []byte(kv[i].(string))), lenField(2, kv[i+1].([]byte))...)
		b = append(b, lenField(1, entry)...)
	}
	return b
}

func pbNumber(f float64) []byte {
	return binary.LittleEndian.AppendUint64([]byte{2<<3 | 1}, math.Float64bits(f))
}
func pbString(s string) []byte  { return lenField(3, []byte(s)) }
func pbBool(v bool) []byte      { return map[bool][]byte{true: {4 << 3, 1}, false: {4 << 3, 0}}[v] }
func pbNull() []byte            { return []byte{1 << 3, 0} }
func pbObject(st []byte) []byte { return lenField(5, st) }
func pbList(vals ...[]byte) []byte {
	var l []byte
	for _, v := range vals {
		l = append(l, lenField(1, v)...)
	}
	return lenField(6, l)
}

var sample = pbStruct(
	"a", pbList(pbNumber(1.5), pbString("x\"y"), pbBool(true), pbNull(), pbNumber(2)),
	"b", pbObject(pbStruct("c", pbString("Zoë"))),
)

func TestDecodeStruct(t *testing.T) {
	got, err := decodeStruct(sample)
	if err != nil {
		t.Fatal(err)
	}
	want := jsonx.Object{
		{Key: "a", Value: []any{1.5, "x\"y", true, nil, 2.0}},
		{Key: "b", Value: jsonx.Object{{Key: "c", Value: "Zoë"}}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeStruct = %#v", got)
	}
}

func TestDecodeStructRejectsMalformed(t *testing.T) {
	deep := pbNull()
	for range maxNesting + 2 {
		deep = pbList(deep)
	}
	for name, b := range map[string][]byte{
		"truncated":       sample[:10],
		"wrong field":     {0x12, 0x00},
		"group wire type": {0x0b},
		"bad length":      {0x0a, 0x7f},
		"nan":             pbStruct("n", pbNumber(math.NaN())),
		"too deep":        pbStruct("d", deep),
	} {
		if _, err := decodeStruct(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestParseConfigForms(t *testing.T) {
	exp := pbObject(pbStruct("key", pbString("k"), "variations", pbList(pbString("a"), pbString("b"))))
	tests := map[string][]byte{
		"empty":        nil,
		"struct":       pbStruct("version", pbString("v1"), "experiments", pbList(exp)),
		"json":         []byte(`{"version":"v1","experiments":[{"key":"k","variations":["a","b"]}]}`),
		"json with ws": []byte("\n  {\"version\":\"v1\",\"experiments\":[{\"key\":\"k\",\"variations\":[\"a\",\"b\"]}]}"),
		"empty object": []byte(`{}`),
		"empty struct": pbStruct(),
	}
	for name, data := range tests {
		t.Run(name, func(t *testing.T) {
			c, _, err := Parse(data)
			if err != nil {
				t.Fatal(err)
			}
			if c.UnitHeader != DefaultUnitHeader || c.HeaderPrefix != DefaultHeaderPrefix {
				t.Fatalf("defaults not applied: %+v", c)
			}
			if len(c.Experiments) > 0 && c.Version != "v1" {
				t.Fatalf("version = %q", c.Version)
			}
		})
	}
	if _, _, err := Parse([]byte("garbage")); err == nil {
		t.Fatal("garbage accepted")
	}
}

// encodeFilter is f as JSON text, built field by field from Filter (proto
// field names when protoNames).
func encodeFilter(t *testing.T, f *Filter, protoNames bool) []byte {
	t.Helper()
	name := func(json, proto string) string {
		if protoNames {
			return proto
		}
		return json
	}
	raw := func(r engine.RawMessage) any {
		v, err := jsonx.ParseOrdered(r)
		if err != nil {
			t.Fatalf("raw value %q: %v", r, err)
		}
		return v
	}
	num := func(x float64) any { // NaN and the infinities as proto3 JSON writes them
		switch {
		case math.IsNaN(x):
			return "NaN"
		case math.IsInf(x, 1):
			return "Infinity"
		case math.IsInf(x, -1):
			return "-Infinity"
		}
		return x
	}
	obj := jsonx.Object{
		{Key: "version", Value: f.Version}, {Key: name("unitHeader", "unit_header"), Value: f.UnitHeader},
		{Key: name("headerPrefix", "header_prefix"), Value: f.HeaderPrefix},
		{Key: name("dictionaryHeader", "dictionary_header"), Value: f.DictionaryHeader},
		{Key: name("versionHeader", "version_header"), Value: f.VersionHeader},
		{Key: name("cacheSize", "cache_size"), Value: float64(f.CacheSize)},
		{Key: name("disableExposureState", "disable_exposure_state"), Value: f.DisableExposureState},
		{Key: name("assignmentHeaders", "assignment_headers"), Value: f.AssignmentHeaders},
		{Key: name("cacheMaxBytes", "cache_max_bytes"), Value: strconv.Itoa(f.CacheMaxBytes)},
	}
	exps := []any{}
	for _, e := range f.Experiments {
		x := jsonx.Object{{Key: "key", Value: e.Key}, {Key: name("hashAttribute", "hash_attribute"), Value: e.HashAttribute},
			{Key: name("fallbackAttribute", "fallback_attribute"), Value: e.FallbackAttribute},
			{Key: name("hashVersion", "hash_version"), Value: float64(e.HashVersion)}, {Key: "seed", Value: e.Seed},
			{Key: name("bucketVersion", "bucket_version"), Value: float64(e.BucketVersion)},
			{Key: name("minBucketVersion", "min_bucket_version"), Value: float64(e.MinBucketVersion)},
			{Key: name("disableStickyBucketing", "disable_sticky_bucketing"), Value: e.DisableStickyBucketing},
			{Key: "observe", Value: e.Observe}}
		vars := []any{}
		for _, v := range e.Variations {
			vars = append(vars, raw(v))
		}
		x = append(x, jsonx.Member{Key: "variations", Value: vars})
		if e.Weights != nil {
			ws := []any{}
			for _, w := range e.Weights {
				ws = append(ws, num(w))
			}
			x = append(x, jsonx.Member{Key: "weights", Value: ws})
		}
		if e.Coverage != nil {
			x = append(x, jsonx.Member{Key: "coverage", Value: num(*e.Coverage)})
		}
		if e.Force != nil {
			x = append(x, jsonx.Member{Key: "force", Value: float64(*e.Force)})
		}
		for _, r := range []struct {
			name string
			raw  engine.RawMessage
		}{{"namespace", e.Namespace}, {"condition", e.Condition}, {"filters", e.Filters}} {
			if r.raw != nil {
				x = append(x, jsonx.Member{Key: r.name, Value: raw(r.raw)})
			}
		}
		if e.Ranges != nil {
			rs := []any{}
			for _, r := range e.Ranges {
				row := []any{}
				for _, n := range r {
					row = append(row, n)
				}
				rs = append(rs, row)
			}
			x = append(x, jsonx.Member{Key: "ranges", Value: rs})
		}
		exps = append(exps, x)
	}
	groups := jsonx.Object{}
	for k, g := range f.SavedGroups {
		groups = append(groups, jsonx.Member{Key: k, Value: raw(g)})
	}
	attrs := []any{}
	for _, a := range f.Attributes {
		x := jsonx.Object{{Key: "name", Value: a.Name}}
		for _, s := range []struct{ name, value string }{{"header", a.Header}, {"cookie", a.Cookie}, {"query", a.Query}, {"property", a.Property}} {
			if s.value != "" {
				x = append(x, jsonx.Member{Key: s.name, Value: s.value})
			}
		}
		attrs = append(attrs, x)
	}
	obj = append(obj, jsonx.Member{Key: "experiments", Value: exps}, jsonx.Member{Key: name("savedGroups", "saved_groups"), Value: groups},
		jsonx.Member{Key: "attributes", Value: attrs})
	b, err := jsonx.Append(nil, obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// otherForm is data in the other form Decode accepts: the deterministic
// Struct encoding of JSON text, or the JSON of a Struct encoding; nil when
// protobuf cannot hold it.
func otherForm(t *testing.T, data []byte) []byte {
	t.Helper()
	var s structpb.Struct
	if _, err := decodeStruct(data); err == nil {
		if proto.Unmarshal(data, &s) != nil {
			return nil
		}
		js, err := protojson.Marshal(&s)
		if err != nil {
			return nil // a Value without a kind, which Decode reads as null
		}
		return js
	}
	if err := protojson.Unmarshal(data, &s); err != nil {
		if strings.Contains(err.Error(), "exceeded max recursion depth") {
			return nil // a Struct nests one deeper than FilterConfig
		}
		t.Fatalf("protojson cannot read %q, which Decode accepts, as a Struct: %v", data, err)
	}
	wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	return wire
}

// FuzzParseConfig: an accepted configuration, written out again from its
// decoded Filter, parses to the same Filter and experiments; its other form
// (Struct encoding or JSON) parses to the same Filter too.
func FuzzParseConfig(f *testing.F) {
	f.Add(sample)
	f.Add([]byte(`{"experiments":[{"key":"k","variations":["a","b"]}]}`))
	f.Add([]byte(`{"version":"v","unit_header":"x-d","assignmentHeaders":2,"savedGroups":{"g":["a"]},"attributes":[{"name":"c","cookie":"c"}],` +
		`"experiments":[{"key":"k","variations":["a",1],"weights":["0.25",0.75],"coverage":0.5,"force":1,"hashVersion":2,` +
		`"condition":{"id":{"$inGroup":"g"}},"namespace":["n",0,0.5]},{"key":"r","variations":[true,false],"ranges":[[0,0.5],[0.5,1]],` +
		`"filters":[{"seed":"s","ranges":[[0,1]]}]}]}`))
	f.Add(pbStruct("experiments", pbList(pbObject(pbStruct("key", pbString("k"), "variations", pbList(pbString("a"), pbNumber(2)))))))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, set, err := Parse(b)
		if err != nil {
			return
		}
		want := dump(t, c)
		js := encodeFilter(t, c, len(b)%2 == 1)
		c2, set2, err := Parse(js)
		if err != nil {
			t.Fatalf("Parse(%q) accepted; written out again, %s: %v", b, js, err)
		}
		if got := dump(t, c2); got != want || !slices.Equal(set.Keys(), set2.Keys()) {
			t.Fatalf("Parse(%q) =\n%s%q\nwritten out again, %s:\n%s%q", b, want, set.Keys(), js, got, set2.Keys())
		}
		other := otherForm(t, b)
		if other == nil {
			return
		}
		c3, _, err := Parse(other)
		if err != nil {
			t.Fatalf("Parse(%q) accepted; its other form %q: %v", b, other, err)
		}
		if got := dump(t, c3); got != want {
			t.Fatalf("Parse(%q) =\n%s\nits other form %q:\n%s", b, want, other, got)
		}
	})
}

// checkLazy: keeping the top-level lists encoded changes nothing — the
// same encodings are rejected, and the configuration maps identically.
func checkLazy(t *testing.T, b []byte) {
	t.Helper()
	eager, eerr := decodeStruct(b)
	lazy, lerr := decodeStructLazy(b)
	if (eerr == nil) != (lerr == nil) {
		t.Fatalf("decodeStruct error %v, decodeStructLazy error %v", eerr, lerr)
	}
	if eerr != nil {
		return
	}
	want, werr := mapFilter(eager)
	got, gerr := mapFilter(lazy)
	if fmt.Sprint(werr) != fmt.Sprint(gerr) || !reflect.DeepEqual(got, want) {
		t.Fatalf("lazy decoding maps to\n%#v, %v\neager to\n%#v, %v", got, gerr, want, werr)
	}
}

func TestDecodeStructLazy(t *testing.T) {
	exp := pbObject(pbStruct("key", pbString("k"), "variations", pbList(pbString("a"), pbNumber(2)),
		"condition", pbObject(pbStruct("country", pbObject(pbStruct("$in", pbList(pbString("US"))))))))
	deep := pbNull()
	for range maxNesting - 1 {
		deep = pbList(deep)
	}
	for name, b := range map[string][]byte{
		"sample":           sample,
		"experiments":      pbStruct("experiments", pbList(exp, pbNull(), exp), "attributes", pbList()),
		"not objects":      pbStruct("experiments", pbList(pbString("x"), pbNumber(1))),
		"list elsewhere":   pbStruct("version", pbList(pbString("v")), "other", pbList(exp)),
		"nan in a list":    pbStruct("experiments", pbList(pbObject(pbStruct("weights", pbList(pbNumber(math.NaN())))))),
		"nan, unknown key": pbStruct("other", pbList(pbNumber(math.NaN()))),
		"deep in a list":   pbStruct("experiments", deep),
		"too deep":         pbStruct("experiments", pbList(deep)),
		"bad list field":   pbStruct("experiments", []byte{0x32, 0x02, 0x10, 0x01}),
	} {
		t.Run(name, func(t *testing.T) { checkLazy(t, b) })
	}
}

func FuzzDecodeStructLazy(f *testing.F) {
	f.Add(sample)
	f.Add(pbStruct("experiments", pbList(pbObject(pbStruct("key", pbString("k"))), pbNull())))
	f.Fuzz(checkLazy)
}
