package config

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/internal/jsonx"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

// deep nests a condition n google.protobuf.Values deep: the condition is
// at message depth 3, so its innermost Value at 3+n.
func deep(n int) string {
	return `{"experiments":[{"condition":` + strings.Repeat(`{"a":`, n) + `1` + strings.Repeat(`}`, n) + `}]}`
}

var decodeSeeds = []string{
	``, `{}`, `null`, `[]`, `"x"`, ` {}`, "\n{}", `{} {}`,
	// Every field by both names, and as null.
	`{"version":"v1","unitHeader":"x-a","headerPrefix":"x-e-","dictionaryHeader":"x-d","versionHeader":"x-v","cacheSize":5,
	  "disableExposureState":true,"assignmentHeaders":"ASSIGNMENT_HEADERS_DICTIONARY","cacheMaxBytes":"1e3",
	  "savedGroups":{"g":[1,"2"],"h":[]},"attributes":[{"name":"n","header":"h"},{"name":"c","cookie":"c"},{"name":"q","query":"q"},{"name":"p","property":"request.path"}]}`,
	`{"version":"v1","unit_header":"x-a","header_prefix":"x-e-","dictionary_header":"x-d","version_header":"x-v","cache_size":5,
	  "disable_exposure_state":false,"assignment_headers":2,"cache_max_bytes":-1,"saved_groups":{"g":[{"a":null}]}}`,
	`{"version":null,"unitHeader":null,"headerPrefix":null,"experiments":null,"savedGroups":null,"attributes":null,"dictionaryHeader":null,
	  "versionHeader":null,"cacheSize":null,"disableExposureState":null,"assignmentHeaders":null,"cacheMaxBytes":null}`,
	`{"experiments":[{"key":"k","variations":["a",1,true,null,{"x":[1]}],"weights":[0.5,"0.5"],"coverage":0.5,"hashAttribute":"h",
	  "fallbackAttribute":"f","hashVersion":2,"seed":"s","namespace":["n",0,1],"condition":{"b":1,"a":{"$in":[1]}},"force":1,
	  "filters":[{"seed":"s","ranges":[[0,1]]}],"ranges":[[0,0.5],[0.5,1]],"bucketVersion":3,"minBucketVersion":"2",
	  "disableStickyBucketing":true}]}`,
	`{"experiments":[{"key":"k","hash_attribute":"h","fallback_attribute":"f","hash_version":"2","force":null,"coverage":null,
	  "namespace":null,"condition":null,"filters":null,"ranges":null,"variations":null,"weights":null,"bucket_version":1,
	  "min_bucket_version":1e0,"disable_sticky_bucketing":false}]}`,
	`{"experiments":[{"bucketVersion":null,"minBucketVersion":null,"disableStickyBucketing":null}]}`,
	`{"experiments":[{"bucketVersion":-1,"minBucketVersion":2147483648,"disableStickyBucketing":"true"}]}`,
	// Control-plane and output-only fields: defaults, then values.
	`{"experiments":[{"status":"","description":"","owner":"","services":[],"startTime":null,"endTime":null,"revision":"0",
	  "createTime":null,"updateTime":null,"createdBy":"","updatedBy":""}]}`,
	`{"experiments":[{"start_time":null,"end_time":null,"revision":0,"create_time":null,"update_time":null,"created_by":"","updated_by":""}]}`,
	`{"experiments":[{"status":"paused","description":"d","owner":"o","services":["a"],"startTime":"2024-01-01T00:00:00Z",
	  "endTime":"2025-01-01T00:00:00Z","revision":3,"createTime":"2024-01-01T00:00:00Z","updateTime":"2024-01-01T00:00:00Z",
	  "createdBy":"a","updatedBy":"b"}]}`,
	`{"experiments":[{"startTime":"not a time"}]}`, `{"experiments":[{"revision":1.5}]}`, `{"experiments":[{"services":[null]}]}`,
	`{"experiments":[{"services":[""]}]}`, `{"experiments":[{"status":1}]}`, `{"experiments":[{"startTime":5}]}`,
	// Unknown fields, wrong case, duplicates.
	`{"cacheSizee":1}`, `{"UnitHeader":"a"}`, `{"experiments":[{},{},{},{"weigths":[1]}]}`, `{"unitHeader":"a","unit_header":"b"}`,
	`{"version":null,"version":"v"}`, `{"savedGroups":{"g":[],"g":[]}}`, `{"experiments":[{"condition":{"a":1,"a":2}}]}`,
	`{"experiments":[{"variations":[{"a":1,"a":1}]}]}`, `{"attributes":[{"name":"n","header":"h","cookie":"c"}]}`,
	`{"attributes":[{"name":"n","header":null,"cookie":"c"}]}`, `{"attributes":[{"name":"n","header":"","cookie":""}]}`,
	`{"attributes":[{"name":"n","source":"h"}]}`, `{"ſeed":1}`, `{"experiments":[{"KEY":"k"}]}`,
	// Integers.
	`{"cacheSize":1.5}`, `{"cacheSize":"1"}`, `{"cacheSize":" 1"}`, `{"cacheSize":"1 "}`, `{"cacheSize":1e2}`, `{"cacheSize":1.0}`,
	`{"cacheSize":"1e2"}`, `{"cacheSize":-0}`, `{"cacheSize":"-0"}`, `{"cacheSize":0.0e999999999999}`, `{"cacheSize":1.0000000000000000001}`,
	`{"cacheSize":2147483647}`, `{"cacheSize":2147483648}`, `{"cacheSize":-2147483648}`, `{"cacheSize":-2147483649}`,
	`{"cacheSize":9223372036854775807}`, `{"cacheSize":1e400}`, `{"cacheSize":1e-400}`, `{"cacheSize":10e-1}`, `{"cacheSize":100e-3}`,
	`{"cacheSize":0.05e2}`, `{"cacheSize":"0x10"}`, `{"cacheSize":true}`, `{"cacheSize":[]}`, `{"cacheSize":"NaN"}`,
	`{"cacheSize":1e9999999999}`, `{"cacheSize":1e-9999999999}`, `{"cacheSize":12345678901234567890e-10}`,
	`{"experiments":[{"revision":"9223372036854775807"}]}`, `{"experiments":[{"revision":9223372036854775808}]}`,
	`{"experiments":[{"revision":-0.0}]}`, `{"experiments":[{"force":"0"}]}`, `{"experiments":[{"hashVersion":1e0}]}`,
	// Doubles.
	`{"experiments":[{"weights":["NaN","Infinity","-Infinity",1e308,"1e308","-0"]}]}`, `{"experiments":[{"weights":[1e309]}]}`,
	`{"experiments":[{"weights":["nan"]}]}`, `{"experiments":[{"weights":[null]}]}`, `{"experiments":[{"weights":"x"}]}`,
	`{"experiments":[{"coverage":"0.5"}]}`, `{"experiments":[{"coverage":" 0.5"}]}`, `{"experiments":[{"coverage":true}]}`,
	`{"experiments":[{"coverage":"1e400"}]}`, `{"experiments":[{"coverage":1e-400}]}`,
	// Booleans and the enum.
	`{"disableExposureState":"true"}`, `{"disableExposureState":1}`, `{"assignmentHeaders":1}`, `{"assignmentHeaders":1.0}`,
	`{"assignmentHeaders":"1"}`, `{"assignmentHeaders":7}`, `{"assignmentHeaders":-1}`, `{"assignmentHeaders":1.5}`,
	`{"assignmentHeaders":"ASSIGNMENT_HEADERS_UNSPECIFIED"}`, `{"assignmentHeaders":"assignment_headers_all"}`,
	`{"assignmentHeaders":2147483648}`, `{"assignmentHeaders":true}`,
	// Lists, messages, Structs, ListValues.
	`{"experiments":{}}`, `{"experiments":[1]}`, `{"experiments":[null]}`, `{"attributes":[null]}`, `{"attributes":[{"name":1}]}`,
	`{"savedGroups":[]}`, `{"savedGroups":{"g":null}}`, `{"savedGroups":{"g":{}}}`, `{"savedGroups":{"":[1e400]}}`,
	`{"experiments":[{"variations":"x"}]}`, `{"experiments":[{"variations":[1e400]}]}`, `{"experiments":[{"condition":[]}]}`,
	`{"experiments":[{"condition":"x"}]}`, `{"experiments":[{"namespace":{}}]}`, `{"experiments":[{"filters":"x"}]}`,
	`{"experiments":[{"namespace":[],"condition":{},"filters":[],"ranges":[]}]}`, `{"experiments":[{"ranges":[[0,"x"]]}]}`,
	`{"experiments":[{"ranges":[null]}]}`, `{"experiments":[{"ranges":[[null]]}]}`, `{"experiments":[{"ranges":["x",[]]}]}`,
	`{"experiments":[{"ranges":[[1e400]]}]}`, `{"experiments":[{"ranges":{}}]}`,
	// Strings.
	"{\"version\":\"\xff\"}", `{"version":"\ud800"}`, `{"version":"\udc00\ud800"}`, `{"version":"\ud83d\ude00"}`, `{"version":"\u0000"}`,
	"{\"\xff\":1}", `{"experiments":[{"condition":{"\ud800":1}}]}`, `{"version":1}`,
	// Nesting around protojson's limit.
	deep(9990), deep(9997), deep(9998), deep(9999), `{"experiments":[{"variations":[` + strings.Repeat(`[`, 9997) + strings.Repeat(`]`, 9997) + `]}]}`,
	`{"experiments":[{"variations":[` + strings.Repeat(`[`, 9998) + strings.Repeat(`]`, 9998) + `]}]}`,
}

// canon is raw JSON's canonical encoding: keys sorted, numbers as
// encoding/json writes them.
func canon(t *testing.T, r []byte) engine.RawMessage {
	t.Helper()
	if r == nil {
		return nil
	}
	v, err := jsonx.Parse(r)
	if err != nil {
		t.Fatalf("raw value %q: %v", r, err)
	}
	b, err := jsonx.Append(nil, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dump prints a Filter for comparison: raw values canonical, NaN equal to
// NaN, nil distinct from empty.
func dump(t *testing.T, f *Filter) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%q %q %q %q %q %d %v %q %d\n", f.Version, f.UnitHeader, f.HeaderPrefix, f.DictionaryHeader, f.VersionHeader,
		f.CacheSize, f.DisableExposureState, f.AssignmentHeaders, f.CacheMaxBytes)
	raw := func(r engine.RawMessage) string {
		if r == nil {
			return "<nil>"
		}
		return string(canon(t, r))
	}
	for _, e := range f.Experiments {
		vars := make([]string, len(e.Variations))
		for i, v := range e.Variations {
			vars[i] = raw(v)
		}
		cov, force := "<nil>", "<nil>"
		if e.Coverage != nil {
			cov = fmt.Sprint(*e.Coverage)
		}
		if e.Force != nil {
			force = fmt.Sprint(*e.Force)
		}
		fmt.Fprintf(&b, "experiment %q %q %#v %s %q %q %d %q %s %s %s %s %#v %d %d %v %v\n", e.Key, vars, e.Weights, cov, e.HashAttribute,
			e.FallbackAttribute, e.HashVersion, e.Seed, raw(e.Namespace), raw(e.Condition), force, raw(e.Filters), e.Ranges,
			e.BucketVersion, e.MinBucketVersion, e.DisableStickyBucketing, e.Observe)
	}
	if f.SavedGroups != nil {
		keys := make([]string, 0, len(f.SavedGroups))
		for k := range f.SavedGroups {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "group %q %s\n", k, raw(f.SavedGroups[k]))
		}
	}
	for _, a := range f.Attributes {
		fmt.Fprintf(&b, "attribute %#v\n", a)
	}
	return b.String()
}

// fromProto converts protojson's result to Filter by hand: what Decode must
// return. rejected are the experiment fields Decode must reject (set, and
// not the filter's); badRanges reports ranges Filter cannot hold.
func fromProto(t *testing.T, pb *filterv1.FilterConfig) (f Filter, rejected []string, badRanges bool) {
	t.Helper()
	marshal := func(m proto.Message) engine.RawMessage {
		b, err := protojson.Marshal(m)
		if err != nil {
			t.Fatalf("protojson.Marshal(%v): %v", m, err)
		}
		return canon(t, b)
	}
	f = Filter{Version: pb.Version, UnitHeader: pb.UnitHeader, HeaderPrefix: pb.HeaderPrefix, DictionaryHeader: pb.DictionaryHeader,
		VersionHeader: pb.VersionHeader, CacheSize: int(pb.CacheSize), DisableExposureState: pb.DisableExposureState,
		CacheMaxBytes: int(pb.CacheMaxBytes)}
	switch n := pb.AssignmentHeaders; n {
	case filterv1.AssignmentHeaders_ASSIGNMENT_HEADERS_UNSPECIFIED:
	case filterv1.AssignmentHeaders_ASSIGNMENT_HEADERS_ALL, filterv1.AssignmentHeaders_ASSIGNMENT_HEADERS_DICTIONARY:
		f.AssignmentHeaders = n.String()
	default:
		f.AssignmentHeaders = fmt.Sprint(int32(n))
	}
	for _, e := range pb.Experiments {
		x := engine.Experiment{Key: e.Key, HashAttribute: e.HashAttribute, FallbackAttribute: e.FallbackAttribute,
			HashVersion: int(e.HashVersion), Seed: e.Seed, BucketVersion: int(e.BucketVersion),
			MinBucketVersion: int(e.MinBucketVersion), DisableStickyBucketing: e.DisableStickyBucketing,
			Observe: e.Observe}
		for _, v := range e.Variations {
			x.Variations = append(x.Variations, marshal(v))
		}
		if len(e.Weights) > 0 {
			x.Weights = e.Weights
		}
		if e.Coverage != nil {
			c := *e.Coverage
			x.Coverage = &c
		}
		if e.Force != nil {
			n := int(*e.Force)
			x.Force = &n
		}
		if e.Namespace != nil {
			x.Namespace = marshal(e.Namespace)
		}
		if e.Condition != nil {
			x.Condition = marshal(e.Condition)
		}
		if e.Filters != nil {
			x.Filters = marshal(e.Filters)
		}
		if e.Ranges != nil {
			x.Ranges = [][]float64{}
			for _, r := range e.Ranges.Values {
				var row []float64
				if r.GetListValue() == nil {
					badRanges = true
				}
				for _, n := range r.GetListValue().GetValues() {
					if _, ok := n.Kind.(*structpb.Value_NumberValue); !ok {
						badRanges = true
					}
					row = append(row, n.GetNumberValue())
				}
				x.Ranges = append(x.Ranges, row)
			}
		}
		m := e.ProtoReflect()
		for _, fl := range experimentFields {
			if fl.reject != "" && m.Has(m.Descriptor().Fields().ByName(protoreflect.Name(fl.proto))) {
				rejected = append(rejected, fl.json)
			}
		}
		f.Experiments = append(f.Experiments, x)
	}
	for k, g := range pb.SavedGroups {
		if f.SavedGroups == nil {
			f.SavedGroups = map[string]engine.RawMessage{}
		}
		f.SavedGroups[k] = marshal(g)
	}
	for _, a := range pb.Attributes {
		f.Attributes = append(f.Attributes, Attribute{Name: a.Name, Header: a.GetHeader(), Cookie: a.GetCookie(),
			Query: a.GetQuery(), Property: a.GetProperty()})
	}
	return f, rejected, badRanges
}

// fieldErrors are err's joined *engine.FieldErrors (nil when another
// error is among them).
func fieldErrors(err error) []*engine.FieldError {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	var out []*engine.FieldError
	for _, e := range errs {
		fe, ok := e.(*engine.FieldError)
		if !ok {
			return nil
		}
		out = append(out, fe)
	}
	return out
}

// emptyExponent reports whether data has, outside its strings, a number
// whose exponent has no digits (1e or 1e+).
func emptyExponent(data []byte) bool {
	inString := false
	for i := 0; i < len(data); i++ {
		c := data[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && c >= '0' && c <= '9' && i+1 < len(data) && (data[i+1] == 'e' || data[i+1] == 'E'):
			j := i + 2
			if j < len(data) && (data[j] == '+' || data[j] == '-') {
				j++
			}
			if j == len(data) || data[j] < '0' || data[j] > '9' {
				return true
			}
		}
	}
	return false
}

// checkProtojson compares Decode of JSON text with protojson.Unmarshal into
// FilterConfig, then Decode of the Struct encoding of the same JSON with
// Decode of the JSON the Struct holds.
func checkProtojson(t *testing.T, data []byte) {
	t.Helper()
	if _, err := decodeStruct(data); err == nil {
		return // a Struct encoding, not JSON text (protojson rejects it)
	}
	got, err := Decode(data)
	var pb filterv1.FilterConfig
	perr := protojson.Unmarshal(data, &pb)
	switch {
	case perr == nil && emptyExponent(data) && !json.Valid(data):
		// protojson's tokenizer takes an exponent without digits before a
		// delimiter ({"cacheSize":1e}, read as 1); Decode follows RFC 8259.
		if err == nil {
			t.Fatalf("Decode(%q) accepted invalid JSON", data)
		}
		return
	case perr != nil && err == nil:
		t.Fatalf("Decode(%q) accepted; protojson: %v", data, perr)
	case perr != nil:
	default:
		want, rejected, badRanges := fromProto(t, &pb)
		if len(rejected) == 0 && !badRanges {
			if err != nil {
				t.Fatalf("Decode(%q): %v; protojson accepts it", data, err)
			}
			if g, w := dump(t, got), dump(t, &want); g != w {
				t.Fatalf("Decode(%q) =\n%s\nprotojson\n%s", data, g, w)
			}
			break
		}
		// The only differences: a control-plane field with a value, and
		// ranges that are not arrays of numbers.
		fes := fieldErrors(err)
		if err == nil || fes == nil {
			t.Fatalf("Decode(%q) = %v; want field errors for %q (ranges: %v)", data, err, rejected, badRanges)
		}
		for _, fe := range fes {
			name := fe.Path[strings.LastIndexByte(fe.Path, '.')+1:]
			if !(slices.Contains(rejected, name) && strings.HasPrefix(fe.Message, "not part of the filter configuration (")) &&
				!(badRanges && strings.Contains(fe.Path, ".ranges")) {
				t.Fatalf("Decode(%q): %v; protojson accepts all but %q (ranges: %v)", data, fe, rejected, badRanges)
			}
		}
	}
	checkStructForm(t, data)
}

// checkStructForm: when protojson reads data as a google.protobuf.Struct,
// Decode of its protobuf encoding (what Envoy hands the filter) equals
// Decode of the JSON it holds — protojson's rendering of it, in which
// numbers are doubles, as in the encoding, and keys sorted, as in the
// deterministic encoding.
func checkStructForm(t *testing.T, data []byte) {
	t.Helper()
	var s structpb.Struct
	if protojson.Unmarshal(data, &s) != nil {
		return
	}
	wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	js, err := protojson.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	a, aerr := Decode(wire)
	b, berr := Decode(js)
	if fmt.Sprint(aerr) != fmt.Sprint(berr) {
		t.Fatalf("Struct of %q: Decode error\n%v\nfrom JSON %s\n%v", data, aerr, js, berr)
	}
	if aerr == nil {
		if g, w := dump(t, a), dump(t, b); g != w {
			t.Fatalf("Struct of %q: Decode =\n%s\nfrom JSON %s\n%s", data, g, js, w)
		}
	}
}

func TestDecodeMatchesProtojson(t *testing.T) {
	for _, s := range decodeSeeds {
		checkProtojson(t, []byte(s))
	}
}

// FuzzDecodeMatchesProtojson: Decode accepts exactly what protojson
// accepts, with equal results, but for the control plane's fields, and the
// Struct form decodes as the JSON it holds.
func FuzzDecodeMatchesProtojson(f *testing.F) {
	for _, s := range decodeSeeds {
		if len(s) < 4096 {
			f.Add([]byte(s))
		}
	}
	f.Fuzz(checkProtojson)
}

// TestDecodeErrors: every problem is reported, with its field path.
func TestDecodeErrors(t *testing.T) {
	cp := "not part of the filter configuration (" + controlPlaneOnly + ")"
	for in, want := range map[string]string{
		`{"cacheSize":1.5}`:                                                   "cacheSize: want an integer",
		`{"cacheSize":"5000000000"}`:                                          "cacheSize: out of the int32 range",
		`{"cacheSizee":1,"UnitHeader":"x"}`:                                   "cacheSizee: unknown field\nUnitHeader: unknown field (names are case-sensitive: \"unitHeader\")",
		`{"experiments":[{},{},{},{"weigths":[0.5]}]}`:                        "experiments[3].weigths: unknown field",
		`{"experiments":[{"weights":[0.5,"x",null]}]}`:                        "experiments[0].weights[1]: want a number\nexperiments[0].weights[2]: want a number",
		`{"experiments":[{"owner":"o","status":"paused"}]}`:                   "experiments[0].owner: " + cp + "\nexperiments[0].status: " + cp,
		`{"experiments":[{"start_time":"2024-01-01T00:00:00Z"}]}`:             "experiments[0].startTime: " + cp,
		`{"experiments":[{"revision":"7"}]}`:                                  "experiments[0].revision: not part of the filter configuration (" + outputOnly + ")",
		`{"experiments":[{"revision":"x","services":[1]}]}`:                   "experiments[0].revision: want an integer\nexperiments[0].services[0]: want a string",
		`{"experiments":[{"guardrails":[{"metric":"errorRate"}],"ramp":{}}]}`: "experiments[0].guardrails: " + cp + "\nexperiments[0].ramp: " + cp,
		`{"experiments":[{"rampState":{"step":1},"rollback":{}}]}`:            "experiments[0].rampState: not part of the filter configuration (" + outputOnly + ")\nexperiments[0].rollback: not part of the filter configuration (" + outputOnly + ")",
		`{"unitHeader":"a","unit_header":"b"}`:                                "unitHeader: given twice",
		`{"attributes":[5,{"name":"n","header":"h","query":"q"}]}`: "attributes[0]: want an object\n" +
			"attributes[1].query: only one of header, cookie, query or property may be set, and header is",
		`{"savedGroups":[1]}`:                                     "savedGroups: want an object",
		`{"savedGroups":{"a b":null}}`:                            `savedGroups."a b": want an array`,
		`{"experiments":[{"condition":{"$or":[{"a":1,"a":2}]}}]}`: "experiments[0].condition.$or[0].a: given twice",
		`{"experiments":[{"ranges":[[0,"x"],1]}]}`:                "experiments[0].ranges[0][1]: want a number\nexperiments[0].ranges[1]: want an array of numbers",
		`{"experiments":[{"variations":[1e400]}]}`:                "experiments[0].variations[0]: 1e400 is out of a double's range",
		`{"assignmentHeaders":"ALL"}`:                             `assignmentHeaders: "ALL" is not ASSIGNMENT_HEADERS_ALL, ASSIGNMENT_HEADERS_DICTIONARY or ASSIGNMENT_HEADERS_UNSPECIFIED`,
		`{"assignmentHeaders":7}`:                                 "assignmentHeaders: enum number 7 is not ASSIGNMENT_HEADERS_ALL (1) or ASSIGNMENT_HEADERS_DICTIONARY (2)",
		deep(9998):                                                "experiments[0].condition" + strings.Repeat(".a", 9998) + ": nested deeper than 10000 messages",
		`{"version":"v1"} {}`:                                     "decode filter configuration: invalid character '{' after top-level value",
		`null`:                                                    "decode filter configuration: neither a google.protobuf.Struct nor JSON",
		string(pbStruct("cacheSize", pbNumber(1e6))) + "\x00":     "decode filter configuration: neither a google.protobuf.Struct nor JSON",
	} {
		_, _, err := Parse([]byte(in))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Parse(%.80q) = %.300v, want %.300q", in, err, want)
		}
	}
	for _, in := range []string{`{"unit_header":"x-device-id"}`, deep(9997),
		`{"experiments":[{"key":"k","variations":["a","b"],"status":"","services":[],"revision":"0","startTime":null}]}`,
		`{"experiments":[{"key":"k","variations":["a","b"],"guardrails":[],"ramp":null,"rollback":null}]}`} {
		if _, err := Decode([]byte(in)); err != nil {
			t.Errorf("Decode(%.80q): %.300v", in, err)
		}
	}
	if f, _ := Decode([]byte(`{"unit_header":"x-device-id"}`)); f.UnitHeader != "x-device-id" {
		t.Errorf("unit_header decoded as %q", f.UnitHeader)
	}
	c, _, err := Parse(pbStruct("cacheSize", pbNumber(1e6)))
	if err != nil || c.CacheSize != 1e6 {
		t.Errorf("cacheSize 1e6 from a Struct: %v, %v", c, err)
	}
}

// TestDecoderCoversDescriptors walks the contract's messages: every field is
// decoded or rejected on purpose, under its proto3 JSON name and proto name,
// with its type; the decoder knows no field the messages lack.
func TestDecoderCoversDescriptors(t *testing.T) {
	type info struct {
		json, proto     string
		kind            kind
		repeated, oneof bool
		decoded         bool
	}
	infos := func(fs []field, m any) (out []info) {
		for _, f := range fs {
			var d decoder
			decoded := d.set(m, f.json, nil) // the message's setter knows the field
			if decoded == (f.reject != "") {
				t.Errorf("%T.%s: decoded and rejected, or neither", m, f.proto)
			}
			out = append(out, info{f.json, f.proto, f.kind, f.repeated, f.oneof, decoded})
		}
		return out
	}
	kindOf := func(fd protoreflect.FieldDescriptor) kind {
		if fd.IsMap() {
			fd = fd.MapValue()
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			return kindString
		case protoreflect.BoolKind:
			return kindBool
		case protoreflect.Int32Kind:
			return kindInt32
		case protoreflect.Uint32Kind:
			return kindUint32
		case protoreflect.Int64Kind:
			return kindInt64
		case protoreflect.DoubleKind:
			return kindDouble
		case protoreflect.EnumKind:
			return kindEnum
		case protoreflect.BytesKind:
			return kindBytes
		case protoreflect.MessageKind:
			switch fd.Message().FullName() {
			case "google.protobuf.Value":
				return kindValue
			case "google.protobuf.Struct":
				return kindStruct
			case "google.protobuf.ListValue":
				return kindList
			case "google.protobuf.Timestamp":
				return kindTimestamp
			case "allot.experiment.v1.Experiment", "allot.filter.v1.Attribute", "allot.filter.v1.StickyCookie", "allot.filter.v1.SigningKey", "allot.filter.v1.Ofrep",
				"allot.experiment.v1.Guardrail", "allot.experiment.v1.Ramp", "allot.experiment.v1.RampState", "allot.experiment.v1.Rollback":
				return kindMessage
			}
		}
		t.Errorf("%s: a type the decoder does not know", fd.FullName())
		return 255
	}
	for _, m := range []struct {
		md     protoreflect.MessageDescriptor
		fields []info
	}{
		{(&filterv1.FilterConfig{}).ProtoReflect().Descriptor(), infos(filterFields, &Filter{})},
		{(&filterv1.Attribute{}).ProtoReflect().Descriptor(), infos(attributeFields, &Attribute{})},
		{(&experimentv1.Experiment{}).ProtoReflect().Descriptor(), infos(experimentFields, &engine.Experiment{})},
		{(&filterv1.StickyCookie{}).ProtoReflect().Descriptor(), infos(stickyCookieFields, &StickyCookie{})},
		{(&filterv1.SigningKey{}).ProtoReflect().Descriptor(), infos(signingKeyFields, &SigningKey{})},
		{(&filterv1.Ofrep{}).ProtoReflect().Descriptor(), infos(ofrepFields, &Ofrep{})},
	} {
		fds := m.md.Fields()
		for i := range fds.Len() {
			fd := fds.Get(i)
			j := slices.IndexFunc(m.fields, func(f info) bool { return f.proto == string(fd.Name()) })
			if j < 0 {
				t.Errorf("%s: neither decoded nor rejected by filter/config", fd.FullName())
				continue
			}
			f := m.fields[j]
			oneof := fd.ContainingOneof() != nil && !fd.ContainingOneof().IsSynthetic()
			if f.json != fd.JSONName() || f.kind != kindOf(fd) || f.repeated != (fd.IsList() || fd.IsMap()) || f.oneof != oneof {
				t.Errorf("%s: decoder has %+v; descriptor: JSON name %q, kind %v, list %v, map %v, oneof %v",
					fd.FullName(), f, fd.JSONName(), fd.Kind(), fd.IsList(), fd.IsMap(), oneof)
			}
		}
		for _, f := range m.fields {
			if fds.ByName(protoreflect.Name(f.proto)) == nil {
				t.Errorf("%s: the decoder knows %q, the message lacks it", m.md.FullName(), f.proto)
			}
		}
	}
	values := filterv1.AssignmentHeaders(0).Descriptor().Values()
	if values.Len() != len(assignmentHeadersNames) {
		t.Errorf("AssignmentHeaders has %d values, the decoder %d", values.Len(), len(assignmentHeadersNames))
	}
	for i := range values.Len() {
		if v := values.Get(i); int(v.Number()) >= len(assignmentHeadersNames) || assignmentHeadersNames[v.Number()] != string(v.Name()) {
			t.Errorf("AssignmentHeaders %s = %d: not in the decoder's names %q", v.Name(), v.Number(), assignmentHeadersNames)
		}
	}
}

func TestFieldErrorsOnly(t *testing.T) {
	_, err := Decode([]byte(`{"cacheSize":"x","experiments":[{"owner":"o"}]}`))
	if fes := fieldErrors(err); len(fes) != 2 {
		t.Fatalf("Decode errors %v: want two *engine.FieldError", err)
	}
}
