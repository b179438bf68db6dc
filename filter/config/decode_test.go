package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/internal/jsonx"
)

// oracleConfig decodes a configuration the way ParseConfig did before it
// dropped encoding/json: the Struct converted to JSON text, then
// json.Unmarshal into Filter. (It used a json.Decoder, which ignored
// data after the object; decodeConfig rejects it, as json.Unmarshal does.)
func oracleConfig(data []byte) (Filter, error) {
	var raw Filter
	if js, err := oracleStructJSON(data, 0); err == nil {
		data = js
	} else if t := bytes.TrimSpace(data); len(t) > 0 && t[0] != '{' {
		return raw, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return raw, nil
	}
	return raw, json.Unmarshal(data, &raw)
}

// oracleStructJSON is the former structToJSON, keys quoted as JSON.
func oracleStructJSON(b []byte, depth int) ([]byte, error) {
	obj, err := structObject(b, depth, build) // the wire decoding is not under test here
	if err != nil {
		return nil, err
	}
	return oracleAppend(nil, obj), nil
}

func oracleAppend(out []byte, v any) []byte {
	switch x := v.(type) {
	case jsonx.Object:
		out = append(out, '{')
		for i, m := range x {
			if i > 0 {
				out = append(out, ',')
			}
			k, _ := json.Marshal(m.Key)
			out = append(append(out, k...), ':')
			out = oracleAppend(out, m.Value)
		}
		return append(out, '}')
	case []any:
		out = append(out, '[')
		for i, e := range x {
			if i > 0 {
				out = append(out, ',')
			}
			out = oracleAppend(out, e)
		}
		return append(out, ']')
	case float64:
		return strconv.AppendFloat(out, x, 'g', -1, 64)
	}
	s, _ := json.Marshal(v)
	return append(out, s...)
}

var decodeSeeds = []string{
	`{"":1e700}`, // found by FuzzDecodeConfig: out of range under an ignored name
	``, `{}`, `null`, `[]`, `"x"`, `{"version":"v1","cacheSize":5,"cacheMaxBytes":1e3,"disableExposureState":true}`,
	`{"experiments":[{"key":"k","variations":["a",1,true,null,{"x":[1]}],"weights":[0.5,null],"coverage":0.5,"force":1,
	  "active":false,"ranges":[[0,0.5],null,[null,1]],"namespace":["n",0,1],"condition":{"b":1,"a":{"$in":[1]}},
	  "filters":[{"seed":"s"}],"services":["a",null],"hashVersion":2,"seed":"s","status":"running","owner":"o",
	  "description":"d","startTime":"t","endTime":"u","hashAttribute":"h","fallbackAttribute":"f"},null]}`,
	`{"savedGroups":{"g":[1,"2"],"h":null,"i":{"<":"&"}},"attributes":[{"name":"n","header":"h"},null,{"NAME":"x","Cookie":"c"}]}`,
	`{"cacheSize":1.5}`, `{"cacheSize":"1"}`, `{"experiments":{}}`, `{"experiments":[1]}`, `{"experiments":[{"weights":"x"}]}`,
	`{"experiments":[{"variations":"x"}]}`, `{"experiments":[{"force":true}]}`, `{"attributes":[{"name":1}]}`,
	`{"savedGroups":[]}`, `{"UnitHeader":"a","unitheader":"b"}`, `{"ſeed":1,"experiments":[{"ſeed":"x","KEY":"k"}]}`,
	`{"cacheSize":-0}`, `{"cacheSize":1e2}`, `{"cacheSize":9223372036854775807}`,
	"{\"version\":\"\xff\"}", `{"version":"\ud800"}`,
	string(pbStruct("version", pbString("v1"), "cacheSize", pbNumber(1e6), "experiments", pbList(pbObject(pbStruct(
		"key", pbString("k"), "variations", pbList(pbString("a"), pbNumber(-0.0), pbString("\xff<")),
		"condition", pbObject(pbStruct("z", pbNumber(1e-7), "a", pbNull()))))))),
	string(pbStruct("attributes", pbList(pbObject(pbStruct("name", pbString("n"), "query", pbString("q")))))),
	string(pbStruct("cacheSize", pbNumber(0.5))),
}

// hasFoldedDuplicates reports whether some object has two names that
// encoding/json matches to the same field: it then merges the values into
// one (reusing slices and maps), which decodeConfig does not reproduce.
func hasFoldedDuplicates(v any) bool {
	switch x := v.(type) {
	case jsonx.Object:
		seen := map[string]bool{}
		for _, m := range x {
			k := jsonx.FoldName(m.Key)
			if seen[k] || hasFoldedDuplicates(m.Value) {
				return true
			}
			seen[k] = true
		}
	case []any:
		for _, e := range x {
			if hasFoldedDuplicates(e) {
				return true
			}
		}
	}
	return false
}

// integralLiteral reports whether err is encoding/json refusing an integral
// literal such as 1.0 or 1e2 for an int field, which decodeConfig accepts.
func integralLiteral(err error) bool {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Type.Kind() != reflect.Int {
		return false
	}
	lit, ok := strings.CutPrefix(te.Value, "number ")
	f, perr := strconv.ParseFloat(lit, 64)
	return ok && perr == nil && f == math.Trunc(f)
}

// canonical replaces every raw JSON value by its canonical encoding.
func canonical(t *testing.T, rc *Filter) {
	t.Helper()
	canon := func(r engine.RawMessage) engine.RawMessage {
		if r == nil {
			return nil
		}
		v, err := jsonx.ParseOrdered(r)
		if err != nil {
			t.Fatalf("raw value %q: %v", r, err)
		}
		b, err := jsonx.Append(nil, v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for i := range rc.Experiments {
		e := &rc.Experiments[i]
		for j := range e.Variations {
			e.Variations[j] = canon(e.Variations[j])
		}
		e.Namespace, e.Condition, e.Filters = canon(e.Namespace), canon(e.Condition), canon(e.Filters)
	}
	for k, g := range rc.SavedGroups {
		rc.SavedGroups[k] = canon(g)
	}
}

func checkDecode(t *testing.T, data []byte) {
	t.Helper()
	want, werr := oracleConfig(data)
	got, err := decode(data)
	if parsed, perr := decodeParsed(data); perr == nil && hasFoldedDuplicates(parsed) {
		return
	}
	if bigInteger(data) {
		return // above 2^53 a float64 cannot hold every integer literal
	}
	if werr != nil && err == nil && integralLiteral(werr) {
		return
	}
	var se *jsonx.SyntaxError
	if werr == nil && errors.As(err, &se) && strings.HasSuffix(se.Msg, "is out of range") {
		return // jsonx rejects 1e700 anywhere; encoding/json only where a float64 receives it
	}
	if (err == nil) != (werr == nil) {
		t.Fatalf("decode(%q) error %v, encoding/json %v", data, err, werr)
	}
	if err != nil {
		return
	}
	canonical(t, &want)
	canonical(t, &got)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decode(%q) =\n%#v\nencoding/json\n%#v", data, got, want)
	}
}

func decodeParsed(data []byte) (any, error) {
	if obj, err := decodeStruct(data); err == nil {
		return obj, nil
	}
	return jsonx.ParseOrdered(data)
}

func bigInteger(data []byte) bool {
	run := 0
	for _, c := range data {
		if c >= '0' && c <= '9' {
			if run++; run >= 16 {
				return true
			}
		} else {
			run = 0
		}
	}
	return false
}

// TestDecodeConfig compares decodeConfig with encoding/json on the seeds.
func TestDecodeConfig(t *testing.T) {
	for _, s := range decodeSeeds {
		checkDecode(t, []byte(s))
	}
}

// TestDecodeConfigErrors: type errors name their field.
func TestDecodeConfigErrors(t *testing.T) {
	for in, want := range map[string]string{
		`{"cacheSize":1.5}`: "cacheSize: want an integer",
		`{"experiments":[{},{},{},{"weights":[0.5,"x"]}]}`:    "experiments[3].weights: want an array of numbers",
		`{"experiments":[{"key":"k","variations":"ab"}]}`:     "experiments[0].variations: want an array",
		`{"attributes":[{"name":"n"},5]}`:                     "attributes[1]: want an object",
		`{"savedGroups":[1]}`:                                 "savedGroups: want an object",
		`{"experiments":[{"force":0.5,"active":"yes"}]}`:      "experiments[0].force: want an integer",
		`{"version":"v1"} {}`:                                 "decode filter configuration: invalid character '{' after top-level value",
		string(pbStruct("cacheSize", pbNumber(1e6))) + "\x00": "decode filter configuration: neither a google.protobuf.Struct nor JSON",
	} {
		_, _, err := Parse([]byte(in))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want %q", in, err, want)
		}
	}
	c, _, err := Parse(pbStruct("cacheSize", pbNumber(1e6)))
	if err != nil || c.CacheSize != 1e6 {
		t.Errorf("cacheSize 1e6 from a Struct: %v, %v", c, err)
	}
}

// FuzzDecodeConfig: decodeConfig agrees with encoding/json on JSON and on
// Struct encodings.
func FuzzDecodeConfig(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkDecode)
}

