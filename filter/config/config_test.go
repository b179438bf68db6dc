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
