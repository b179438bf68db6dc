package config

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"testing"

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
	for range maxDepth + 2 {
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

func FuzzParseConfig(f *testing.F) {
	f.Add(sample)
	f.Add([]byte(`{"experiments":[{"key":"k","variations":["a","b"]}]}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, set, err := Parse(b)
		if err == nil && (c == nil || set == nil) {
			t.Fatal("accepted configuration without a compiled set")
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
	want, werr := mapConfig(eager)
	got, gerr := mapConfig(lazy)
	if fmt.Sprint(werr) != fmt.Sprint(gerr) || !reflect.DeepEqual(got, want) {
		t.Fatalf("lazy decoding maps to\n%#v, %v\neager to\n%#v, %v", got, gerr, want, werr)
	}
}

func TestDecodeStructLazy(t *testing.T) {
	exp := pbObject(pbStruct("key", pbString("k"), "variations", pbList(pbString("a"), pbNumber(2)),
		"condition", pbObject(pbStruct("country", pbObject(pbStruct("$in", pbList(pbString("US"))))))))
	deep := pbNull()
	for range maxDepth - 1 {
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
