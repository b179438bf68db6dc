package floor

import (
	"slices"
	"strings"
	"testing"
)

func TestScriptRoundTrip(t *testing.T) {
	for _, sc := range []*Script{
		{Rewrite: true, Headers: []Write{{"x-experiment-bench", Var}, {"x-experiments", `bench="$v", exp-0004="alt"`}},
			Props: []Write{{"allot", `bench="$v"`}}},
		{Headers: []Write{{"x-experiments", `bench="$v"`}, {"x-experiments-version", "bench-50"}}},
	} {
		got, err := Parse(sc.String())
		if err != nil {
			t.Fatalf("Parse(%q): %v", sc.String(), err)
		}
		if got.Rewrite != sc.Rewrite || !slices.Equal(got.Headers, sc.Headers) || !slices.Equal(got.Props, sc.Props) {
			t.Errorf("round trip of %q = %+v", sc.String(), got)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"rewrite\n", "magic"},
		{Magic + "replace\n", "mode replace"},
		{Magic + "add\nheader\tx-a\n", "line header\tx-a"},
		{Magic + "add\nheader\t\tv\n", "separated by tabs"},
		{Magic + "add\ntrailer\tx-a\tv\n", "kind trailer"},
	} {
		_, err := Parse(c.text)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error naming %q", c.text, err, c.want)
		}
	}
}

func TestApply(t *testing.T) {
	sc := &Script{Rewrite: true, Headers: []Write{{"x-experiment-bench", Var}, {"x-v", "1"}}, Props: []Write{{"allot", `bench="$v"`}}}
	out, props := Apply(sc, [][2]string{{":path", "/"}}, "control")
	want := [][2]string{{":path", "/"}, {"x-experiment-bench", "control"}, {"x-v", "1"}}
	if !slices.Equal(out, want) || props["allot"] != `bench="control"` || len(props) != 1 {
		t.Errorf("Apply = %q, %q; want %q and allot=bench=\"control\"", out, props, want)
	}
}
