package jsonx

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

var seeds = []string{
	``, ` `, `null`, `true`, `false`, `0`, `-0`, `1.5`, `-1e-7`, `1E+21`, `1e400`, `-1e400`, `1e-400`, `01`, `1.`, `-`, `.5`,
	`"a"`, `"\u00e9\ud83d\ude00"`, `"\ud800"`, `"\udc00\ud800x"`, `"\ud800\u0041"`, `"\u12"`, `"\x"`, `"a` + "\x01" + `"`,
	"\"\xff\xfe\"", "\"\xed\xa0\x80\"", `"<>&` + "\u2028\u2029\x7f" + `"`, `"\/\b\f\n\r\t\\\""`,
	`[]`, `[1,]`, `[1 2]`, `{}`, `{"a":1,"a":2}`, `{"a":1,}`, `{a:1}`, `{"a" 1}`, `{"b":[1,{"c":null}],"a":"x"}`,
	`{} x`, `[1] ]`, "\t[ 1 , 2 ]\n", `nul`, `truex`,
}

// deep are at and past encoding/json's nesting limit.
var deep = []string{
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000),
}

// checkParse compares Parse, ParseOrdered, Append and Compact with
// encoding/json on one input.
func checkParse(t *testing.T, data []byte) {
	t.Helper()
	var want any
	werr := json.Unmarshal(data, &want)
	got, err := Parse(data)
	if (err == nil) != (werr == nil) {
		t.Fatalf("Parse(%q) error %v, encoding/json %v", data, err, werr)
	}
	ordered, oerr := ParseOrdered(data)
	if (oerr == nil) != (werr == nil) {
		t.Fatalf("ParseOrdered(%q) error %v, encoding/json %v", data, oerr, werr)
	}
	if werr != nil {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse(%q) = %#v, encoding/json %#v", data, got, want)
	}
	if tok, err := tokenOrdered(data); err != nil || !reflect.DeepEqual(ordered, tok) {
		t.Fatalf("ParseOrdered(%q) = %#v, json.Decoder tokens %#v, %v", data, ordered, tok, err)
	}
	if !reflect.DeepEqual(Plain(ordered), want) {
		t.Fatalf("ParseOrdered(%q) = %#v, encoding/json %#v", data, ordered, want)
	}
	wantEnc, werr := json.Marshal(want)
	enc, err := Append(nil, got)
	if err != nil || werr != nil || !bytes.Equal(enc, wantEnc) {
		t.Fatalf("Append(%#v) = %s, %v; json.Marshal %s, %v", got, enc, err, wantEnc, werr)
	}
	// The ordered encoding keeps members: it decodes to the same value.
	oenc, err := Append(nil, ordered)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := ParseOrdered(oenc); err != nil || !reflect.DeepEqual(again, ordered) {
		t.Fatalf("ordered round trip of %q: %s → %#v, %v", data, oenc, again, err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err != nil {
		t.Fatal(err)
	}
	if c := Compact(nil, data); !bytes.Equal(c, buf.Bytes()) {
		t.Fatalf("Compact(%q) = %q, json.Compact %q", data, c, buf.Bytes())
	}
}

// tokenOrdered decodes data with json.Decoder's Token API into Objects,
// as the engine did before jsonx.
func tokenOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var value func() (any, error)
	value = func() (any, error) {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		switch tok {
		case json.Delim('{'):
			obj := Object{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := value()
				if err != nil {
					return nil, err
				}
				obj = append(obj, Member{k.(string), v})
			}
			_, err := dec.Token()
			return obj, err
		case json.Delim('['):
			arr := []any{}
			for dec.More() {
				v, err := value()
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			_, err := dec.Token()
			return arr, err
		}
		return tok, nil
	}
	return value()
}

func TestParse(t *testing.T) {
	for _, s := range append(seeds, deep...) {
		checkParse(t, []byte(s))
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkParse)
}

// FuzzAppendString: AppendString is json.Marshal for every string.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a<b>&c", "\u2028", "\xff", "\x00\x1f\x7f", "é\"\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q) = %s, want %s", s, got, want)
		}
	})
}

// FuzzAppendFloat: numbers encode as json.Marshal encodes them.
func FuzzAppendFloat(f *testing.F) {
	for _, v := range []float64{0, 1, -1.5, 1e21, 1e-7, 123456789e-20, 5e-324} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		want, werr := json.Marshal(v)
		got, err := Append(nil, v)
		if (err == nil) != (werr == nil) || !bytes.Equal(got, want) {
			t.Fatalf("Append(%v) = %s, %v; json.Marshal %s, %v", v, got, err, want, werr)
		}
	})
}

var strictSeeds = []string{
	`1.0000000000000000001`, `1e400`, `-0`, `{"a":[1,"x",true,null,{"b":{}}]}`, `"\ud83d\ude00"`, `"\ud800"`,
	`"\udc00"`, `"\ud800\u0041"`, `[1e]`, `{"a":1E }`, `[1e+]`, `"\ud800x"`, "\"\xff\"", "\"\xed\xa0\x80\"", `"\u12"`, `{"a":1,"a":2}`,
}

// asFloats replaces Numbers by their float64 values, as Parse decodes them.
func asFloats(v any) any {
	switch x := v.(type) {
	case Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			return math.Inf(1)
		}
		return f
	case Object:
		out := Object{}
		for _, m := range x {
			out = append(out, Member{m.Key, asFloats(m.Value)})
		}
		return out
	case []any:
		out := []any{}
		for _, e := range x {
			out = append(out, asFloats(e))
		}
		return out
	}
	return v
}

// checkStrict compares ParseStrict with protojson's tokenizer (through
// structpb.Value, which also rejects what ParseStrict leaves to its caller:
// duplicate keys and numbers beyond float64) and with ParseOrdered.
func checkStrict(t *testing.T, data []byte) {
	t.Helper()
	got, err := ParseStrict(data, maxDepth)
	var pv structpb.Value
	perr := protojson.Unmarshal(data, &pv)
	if perr != nil && (strings.Contains(perr.Error(), "duplicate map key") || strings.Contains(perr.Error(), "invalid google.protobuf.Value") ||
		strings.Contains(perr.Error(), "exceeded max recursion depth")) {
		return
	}
	if perr == nil && regexp.MustCompile(`[0-9][eE][+-]?([^0-9+-]|$)`).Match(data) && !json.Valid(data) {
		perr = errors.New("not RFC 8259 JSON") // protojson takes 1e before a delimiter as 1
	}
	if (err == nil) != (perr == nil) {
		t.Fatalf("ParseStrict(%q) error %v, protojson %v", data, err, perr)
	}
	if err != nil {
		return
	}
	want, werr := ParseOrdered(data)
	if werr != nil || !reflect.DeepEqual(asFloats(got), want) {
		t.Fatalf("ParseStrict(%q) = %#v, ParseOrdered %#v, %v", data, got, want, werr)
	}
	for _, n := range numbers(got) {
		if !ValidNumber(string(n)) {
			t.Fatalf("ValidNumber(%q) = false", n)
		}
	}
}

func numbers(v any) (out []Number) {
	switch x := v.(type) {
	case Number:
		return []Number{x}
	case Object:
		for _, m := range x {
			out = append(out, numbers(m.Value)...)
		}
	case []any:
		for _, e := range x {
			out = append(out, numbers(e)...)
		}
	}
	return out
}

func TestParseStrict(t *testing.T) {
	for _, s := range append(append(seeds, strictSeeds...), deep...) {
		checkStrict(t, []byte(s))
	}
	for s, want := range map[string]bool{"1": true, "-0.5e+3": true, "01": false, "1.": false, "": false, " 1": false,
		"1 ": false, "-": false, "1e": false, "NaN": false, "0x1": false, "1_0": false, "+1": false, "[1]": false} {
		if ValidNumber(s) != want {
			t.Errorf("ValidNumber(%q) = %v", s, !want)
		}
	}
}

func FuzzParseStrict(f *testing.F) {
	for _, s := range append(seeds, strictSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(checkStrict)
}
