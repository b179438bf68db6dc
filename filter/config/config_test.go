package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/engine"
)

// TestCheck: every settings problem is reported with its field path, all at
// once.
func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		cfg  string
		want []string // field paths, in order; none: accepted
	}{
		{"defaults", `{}`, nil},
		{"renamed headers", `{"unitHeader":"x-device-id","headerPrefix":"x-ab-","dictionaryHeader":"x-ab","versionHeader":"x-ab-version-of-config"}`,
			[]string{"versionHeader"}},
		{"uppercase", `{"unitHeader":"X-User-Id","attributes":[{"name":"c","header":"X-Country"}]}`,
			[]string{"unitHeader", "attributes[0].header"}},
		{"unit header is an assignment header", `{"unitHeader":"x-experiment-uid"}`, []string{"unitHeader"}},
		{"unit header is the dictionary", `{"unitHeader":"x-experiments"}`, []string{"unitHeader"}},
		{"attribute header the filter strips", `{"headerPrefix":"x-ab-","attributes":[{"name":"a","header":"x-ab-country"},{"name":"b","header":"x-experiments-version"},{"name":"c","header":":authority"}]}`,
			[]string{"attributes[0].header", "attributes[1].header"}},
		{"attributes", `{"attributes":[{"name":"","header":"h"},{"name":"a"},{"name":"b","cookie":"c"},{"name":"b","query":"q"}]}`,
			[]string{"attributes[0].name", "attributes[1]", "attributes[3].name"}},
		{"enum number", `{"assignmentHeaders":7}`, []string{"assignmentHeaders"}},
		{"ofrep", `{"ofrep":{"enabled":true,"maxBodyBytes":65536,"corsAllowOrigins":["http://127.0.0.1:8080","https://shop.example.com"]}}`, nil},
		{"ofrep bounds", `{"ofrep":{"enabled":true,"maxBodyBytes":65537,"corsAllowOrigins":["*","shop.example.com","http://a/b","","https://` + strings.Repeat("a", 250) + `"]}}`,
			[]string{"ofrep.maxBodyBytes", "ofrep.corsAllowOrigins[0]", "ofrep.corsAllowOrigins[1]", "ofrep.corsAllowOrigins[2]", "ofrep.corsAllowOrigins[3]", "ofrep.corsAllowOrigins[4]"}},
		{"ofrep origins", `{"ofrep":{"corsAllowOrigins":[` + strings.Repeat(`"http://a",`, 16) + `"http://b"]}}`, []string{"ofrep.corsAllowOrigins"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Decode([]byte(tc.cfg))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			f.Defaults()
			if got := fieldPaths(t, f.Check()); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("Check() paths = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestOfrepDefaults: an unset body bound is the default, a set one kept;
// a negative or too large number is refused by the decoder, naming the
// field.
func TestOfrepDefaults(t *testing.T) {
	for _, tc := range []struct {
		cfg  string
		want int
	}{
		{`{"ofrep":{"enabled":true}}`, DefaultOfrepMaxBodyBytes},
		{`{"ofrep":{"enabled":true,"maxBodyBytes":100}}`, 100},
		{`{"ofrep":{"enabled":true,"max_body_bytes":"200"}}`, 200},
	} {
		f, _, err := Parse([]byte(tc.cfg))
		if err != nil {
			t.Fatalf("Parse(%s): %v", tc.cfg, err)
		}
		if !f.OfrepEnabled() || f.Ofrep.MaxBodyBytes != tc.want {
			t.Errorf("Parse(%s): enabled %v, maxBodyBytes %d; want true, %d", tc.cfg, f.OfrepEnabled(), f.Ofrep.MaxBodyBytes, tc.want)
		}
	}
	if f, _, err := Parse([]byte(`{}`)); err != nil || f.OfrepEnabled() {
		t.Errorf("Parse({}): OfrepEnabled %v, %v; want false", f.OfrepEnabled(), err)
	}
	for _, cfg := range []string{`{"ofrep":{"maxBodyBytes":-1}}`, `{"ofrep":{"maxBodyBytes":4294967296}}`, `{"ofrep":{"corsAllowOrigins":[1]}}`} {
		_, err := Decode([]byte(cfg))
		if err == nil || !strings.Contains(err.Error(), "ofrep.") {
			t.Errorf("Decode(%s) = %v, want an error naming ofrep's field", cfg, err)
		}
	}
}

// TestParseRefusesMoreThanIndexFits: the cache's 16-bit indices bound the
// variations of an experiment, and Parse — which the control plane
// validates with — refuses more, so the API cannot accept what every proxy
// would refuse.
func TestParseRefusesMoreThanIndexFits(t *testing.T) {
	wide := func(n int) []byte {
		var sb strings.Builder
		sb.WriteString(`{"experiments":[{"key":"wide","variations":[`)
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			sb.WriteString("1")
		}
		sb.WriteString(`]}]}`)
		return []byte(sb.String())
	}
	_, _, err := Parse(wide(MaxIndex + 1))
	if got := fieldPaths(t, err); !strings.Contains(strings.Join(got, " "), "experiments[0].variations") {
		t.Errorf("%d variations: error %v, want experiments[0].variations named", MaxIndex+1, err)
	}
	if _, _, err := Parse(wide(MaxIndex)); err != nil {
		t.Errorf("%d variations refused: %v", MaxIndex, err)
	}
}

// fieldPaths returns the paths of the *engine.FieldErrors joined in err,
// failing on any other error.
func fieldPaths(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	errs := []error{err}
	if u, ok := err.(interface{ Unwrap() []error }); ok {
		errs = u.Unwrap()
	}
	var out []string
	for _, e := range errs {
		if _, ok := e.(interface{ Unwrap() []error }); ok { // a message's own checks, joined
			out = append(out, fieldPaths(t, e)...)
			continue
		}
		var fe *engine.FieldError
		if !errors.As(e, &fe) {
			t.Fatalf("%v is not a *engine.FieldError", e)
		}
		out = append(out, fe.Path)
	}
	return out
}

// TestEmptyExponent: the differential test's one waiver (protojson reads
// 1e as 1) applies to numbers only, never to text inside strings.
func TestEmptyExponent(t *testing.T) {
	for in, want := range map[string]bool{
		`{"cacheSize":1e}`: true, `{"cacheSize":1E+}`: true, `[1e`: true,
		`{"version":"1e"}`: false, `{"version":"\"1e"}`: false, `{"cacheSize":1e5}`: false, `{"a1e":2}`: false,
	} {
		if got := emptyExponent([]byte(in)); got != want {
			t.Errorf("emptyExponent(%s) = %v, want %v", in, got, want)
		}
	}
}

func TestParseBoundsObserved(t *testing.T) {
	observing := func(n int) []byte {
		var sb strings.Builder
		sb.WriteString(`{"experiments": [`)
		for i := range n {
			if i > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `{"key": "e%d", "variations": ["a", "b"], "observe": true}`, i)
		}
		sb.WriteString(`]}`)
		return []byte(sb.String())
	}
	f, _, err := Parse(observing(MaxObserved))
	if err != nil {
		t.Fatalf("%d observed experiments refused: %v", MaxObserved, err)
	}
	if !f.Experiments[0].Observe || !f.Experiments[MaxObserved-1].Observe {
		t.Errorf("observe not decoded: %+v", f.Experiments[0])
	}
	_, _, err = Parse(observing(MaxObserved + 1))
	want := "experiments[" + strconv.Itoa(MaxObserved) + "].observe"
	if got := fieldPaths(t, err); len(got) != 1 || got[0] != want {
		t.Errorf("%d observed experiments: error paths %q, want [%s]", MaxObserved+1, got, want)
	}
}
