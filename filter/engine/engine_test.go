package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

func mustCompile(t testing.TB, cfgJSON string) *Set {
	t.Helper()
	var cfg Config
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		t.Fatalf("decode config: %v", err)
	}
	s, err := Compile(cfg)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return s
}

// TestBoundaryArithmetic pins the float64 subtlety the vectors rely on.
func TestBoundaryArithmetic(t *testing.T) {
	a, b := 0.1, 0.2 // variables: Go constant arithmetic would be exact
	r := BucketRanges(3, 1, []float64{a, b, 0.7})
	if r[1][1] != a+b || r[1][1] == 0.3 {
		t.Fatalf("range end %v, want 0.1+0.2 (0.30000000000000004)", r[1][1])
	}
	if got := ChooseVariation(0.3, r); got != 1 {
		t.Errorf("ChooseVariation(0.3) = %d, want 1 (0.3 < 0.1+0.2)", got)
	}
}

func TestHashNoAlloc(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() {
		Hash("seed", "some-user-id", 2)
		Hash("seed", "some-user-id", 1)
		nsHash("some-user-id", "ns")
	})
	if allocs != 0 {
		t.Errorf("Hash allocates %v times", allocs)
	}
}

func TestValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  string
		want []string // substrings of the joined error, typically paths
	}{
		{"weights sum", `{"experiments":[{"key":"a","variations":["x","y","z"],"weights":[0.2,0.3,0.4]}]}`,
			[]string{"experiments[0].weights: sum 0.9, want 1"}},
		{"weights count", `{"experiments":[{"key":"a","variations":["x","y"],"weights":[1]}]}`,
			[]string{"experiments[0].weights: got 1 weights for 2 variations"}},
		{"negative weight", `{"experiments":[{"key":"a","variations":["x","y"],"weights":[1.5,-0.5]}]}`,
			[]string{"experiments[0].weights[1]:"}},
		{"coverage", `{"experiments":[{"key":"a","variations":["x","y"],"coverage":1.5}]}`,
			[]string{"experiments[0].coverage:"}},
		{"negative coverage", `{"experiments":[{"key":"a","variations":["x","y"],"coverage":-0.1}]}`,
			[]string{"experiments[0].coverage:"}},
		{"hash version", `{"experiments":[{"key":"a","variations":["x","y"],"hashVersion":3}]}`,
			[]string{"experiments[0].hashVersion:"}},
		{"invalid regex", `{"experiments":[{"key":"a","variations":["x","y"]},{"key":"b","variations":["x","y"],"condition":{"country":{"$regex":"(["}}}]}`,
			[]string{"experiments[1].condition.country.$regex: invalid regex"}},
		{"lookahead regex", `{"experiments":[{"key":"a","variations":["x","y"],"condition":{"ua":{"$regexi":"^(?!bot)"}}}]}`,
			[]string{"experiments[0].condition.ua.$regexi: invalid regex"}},
		{"unknown operator", `{"experiments":[{"key":"a","variations":["x","y"],"condition":{"name":{"$regx":"a"}}}]}`,
			[]string{"experiments[0].condition.name.$regx: unknown operator"}},
		{"nested unknown operator", `{"experiments":[{"key":"a","variations":["x","y"],"condition":{"$or":[{"a":1},{"b":{"$foo":1}}]}}]}`,
			[]string{"experiments[0].condition.$or[1].b.$foo: unknown operator"}},
		{"operator operand", `{"experiments":[{"key":"a","variations":["x","y"],"condition":{"c":{"$in":"us"},"d":{"$exists":1},"e":{"$type":"int"},"f":{"$vgt":3}}}]}`,
			[]string{"condition.c.$in: must be an array", "condition.d.$exists:", "condition.e.$type:", "condition.f.$vgt:"}},
		{"mixed operators", `{"experiments":[{"key":"a","variations":["x","y"],"condition":{"c":{"$in":["a"],"x":1}}}]}`,
			[]string{"experiments[0].condition.c.$in: operators cannot be mixed"}},
		{"condition not object", `{"experiments":[{"key":"a","variations":["x","y"],"condition":[1]}]}`,
			[]string{"experiments[0].condition: must be an object"}},
		{"bad key", `{"experiments":[{"key":"Bad Key","variations":["x","y"]}]}`,
			[]string{"experiments[0].key:"}},
		{"key leading dash", `{"experiments":[{"key":"-a","variations":["x","y"]}]}`,
			[]string{"experiments[0].key:"}},
		{"key too long", `{"experiments":[{"key":"` + strings.Repeat("a", 64) + `","variations":["x","y"]}]}`,
			[]string{"experiments[0].key:"}},
		{"missing key", `{"experiments":[{"variations":["x","y"]}]}`,
			[]string{"experiments[0].key: is required"}},
		{"duplicate key", `{"experiments":[{"key":"a","variations":["x","y"]},{"key":"a","variations":["x","y"]}]}`,
			[]string{"experiments[1].key: duplicate key \"a\""}},
		{"one variation", `{"experiments":[{"key":"a","variations":["x"]}]}`,
			[]string{"experiments[0].variations: got 1 variations, want at least 2"}},
		{"object variation", `{"experiments":[{"key":"a","variations":["x",{"c":1}]}]}`,
			[]string{"experiments[0].variations[1]: must be a string, number or boolean, got object"}},
		{"array variation", `{"experiments":[{"key":"a","variations":[[1],"y"]}]}`,
			[]string{"experiments[0].variations[0]:"}},
		{"null variation", `{"experiments":[{"key":"a","variations":["x",null]}]}`,
			[]string{"experiments[0].variations[1]:"}},
		{"control char variation", `{"experiments":[{"key":"a","variations":["x","a\nb"]}]}`,
			[]string{"experiments[0].variations[1]: contains control characters"}},
		{"namespace shape", `{"experiments":[{"key":"a","variations":["x","y"],"namespace":["ns",0.5]}]}`,
			[]string{"experiments[0].namespace:"}},
		{"namespace range", `{"experiments":[{"key":"a","variations":["x","y"],"namespace":["ns",0.6,0.5]}]}`,
			[]string{"experiments[0].namespace:"}},
		{"namespace types", `{"experiments":[{"key":"a","variations":["x","y"],"namespace":[1,0,1]}]}`,
			[]string{"experiments[0].namespace:"}},
		{"force range", `{"experiments":[{"key":"a","variations":["x","y"],"force":2}]}`,
			[]string{"experiments[0].force: 2 is not a variation index"}},
		{"unknown saved group", `{"experiments":[{"key":"a","variations":["x","y"],"condition":{"id":{"$inGroup":"beta"}}}]}`,
			[]string{"experiments[0].condition.id.$inGroup: unknown saved group \"beta\""}},
		{"saved group not array", `{"experiments":[{"key":"a","variations":["x","y"],"condition":{"id":{"$inGroup":"beta"}}}],"savedGroups":{"beta":"x"}}`,
			[]string{"savedGroups.beta: must be an array"}},
		{"ranges count", `{"experiments":[{"key":"a","variations":["x","y"],"ranges":[[0,0.5]]}]}`,
			[]string{"experiments[0].ranges: got 1 ranges for 2 variations"}},
		{"ranges overlap", `{"experiments":[{"key":"a","variations":["x","y"],"ranges":[[0,0.6],[0.5,1]]}]}`,
			[]string{"experiments[0].ranges[1]: overlaps ranges[0]"}},
		{"ranges bounds", `{"experiments":[{"key":"a","variations":["x","y"],"ranges":[[0,0.5],[0.5,1.5]]}]}`,
			[]string{"experiments[0].ranges[1]:"}},
		{"ranges with weights", `{"experiments":[{"key":"a","variations":["x","y"],"ranges":[[0,0.5],[0.5,1]],"weights":[0.5,0.5]}]}`,
			[]string{"experiments[0].ranges: ranges replace weights"}},
		{"filter", `{"experiments":[{"key":"a","variations":["x","y"],"filters":[{"seed":"s","ranges":[[0,2]],"hashVersion":5}]}]}`,
			[]string{"experiments[0].filters[0].hashVersion:", "experiments[0].filters[0].ranges[0]:"}},
		{"filter unknown field", `{"experiments":[{"key":"a","variations":["x","y"],"filters":[{"seed":"s","ranges":[[0,1]],"atribute":"x"}]}]}`,
			[]string{"experiments[0].filters[0]: invalid filter"}},
		{"negative bucket version", `{"experiments":[{"key":"a","variations":["x","y"]},{"key":"b","variations":["x","y"]},{"key":"c","variations":["x","y"],"bucketVersion":-1}]}`,
			[]string{"experiments[2].bucketVersion: -1 is negative"}},
		{"negative min bucket version", `{"experiments":[{"key":"a","variations":["x","y"],"bucketVersion":2,"minBucketVersion":-3}]}`,
			[]string{"experiments[0].minBucketVersion: -3 is negative"}},
		{"min bucket version above bucket version", `{"experiments":[{"key":"a","variations":["x","y"],"bucketVersion":2,"minBucketVersion":3}]}`,
			[]string{"experiments[0].minBucketVersion: 3 is above bucketVersion 2"}},
		{"min bucket version without bucket version", `{"experiments":[{"key":"a","variations":["x","y"],"minBucketVersion":1,"disableStickyBucketing":true}]}`,
			[]string{"experiments[0].minBucketVersion: 1 is above bucketVersion 0"}},
		{"both bucket versions", `{"experiments":[{"key":"a","variations":["x","y"],"bucketVersion":-2,"minBucketVersion":1}]}`,
			[]string{"experiments[0].bucketVersion: -2 is negative", "experiments[0].minBucketVersion: 1 is above bucketVersion -2"}},
		{"all at once", `{"experiments":[{"key":"A","variations":["x"],"weights":[0.5],"coverage":2,"hashVersion":9,"force":4}]}`,
			[]string{"experiments[0].key:", "experiments[0].variations:", "experiments[0].weights:", "experiments[0].coverage:", "experiments[0].hashVersion:", "experiments[0].force:"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var cfg Config
			if err := json.Unmarshal([]byte(tc.cfg), &cfg); err != nil {
				t.Fatalf("decode: %v", err)
			}
			s, err := Compile(cfg)
			if err == nil {
				t.Fatalf("Compile accepted it (%d experiments)", s.Len())
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			// Every joined error is a *FieldError.
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Errorf("error is not a *FieldError: %v", err)
			}
			if u, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range u.Unwrap() {
					if !errors.As(e, &fe) {
						t.Errorf("%v is not a *FieldError", e)
					}
				}
			}
		})
	}
}

func TestCompileAccepts(t *testing.T) {
	s := mustCompile(t, `{"experiments":[
		{"key":"checkout.v2","variations":["control",2,1.5,true],"weights":[0.1,0.2,0.3,0.4],
		 "condition":{"$and":[{"country":{"$in":["US","CA"]}},{"app.version":{"$vgte":"1.2.0"}}],"tags":{"$elemMatch":{"k":"v"}}},
		 "fallbackAttribute":"deviceId"},
		{"key":"b","variations":["x","y"],"filters":[{"seed":"s","attribute":"org","ranges":[[0,0.5]]}],"namespace":null},
		{"key":"c","variations":["x","y"],"condition":{"id":{"$notInGroup":"staff"}}}
	],"savedGroups":{"staff":["1","2"]}}`)
	if got, want := s.Keys(), []string{"checkout.v2", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("Keys() = %v, want %v", got, want)
	}
	if got, want := s.Variations(0), []string{"control", "2", "1.5", "true"}; !slices.Equal(got, want) {
		t.Errorf("Variations(0) = %v, want %v", got, want)
	}
	// "k" is read from array elements ($elemMatch), not from the attributes.
	if got, want := s.Referenced(), []string{"app", "country", "deviceId", "id", "org", "tags"}; !slices.Equal(got, want) {
		t.Errorf("Referenced() = %v, want %v", got, want)
	}
	if s.Keys()[0] != "checkout.v2" || s.Len() != 3 {
		t.Errorf("Keys()[0] = %q, Len() = %d; want checkout.v2, 3", s.Keys()[0], s.Len())
	}
}

func TestAssignSemantics(t *testing.T) {
	s := mustCompile(t, `{"experiments":[
		{"key":"run","variations":["a","b"]},
		{"key":"fallback","variations":["a","b"],"hashAttribute":"userId","fallbackAttribute":"deviceId"},
		{"key":"forced","variations":["a","b"],"force":1},
		{"key":"cond","variations":["a","b"],"condition":{"country":"US"}}
	]}`)
	type want struct {
		in, hashUsed bool
		attr, value  string
	}
	tests := []struct {
		name  string
		attrs Attributes
		want  map[string]want
	}{
		{"with id", Attributes{"id": "u1", "deviceId": "d1", "country": "US"}, map[string]want{
			"run":      {true, true, "id", "u1"},
			"fallback": {true, true, "deviceId", "d1"}, "forced": {true, false, "id", "u1"}, "cond": {true, true, "id", "u1"},
		}},
		{"no ids", Attributes{"id": "", "country": "US"}, map[string]want{
			"run": {false, false, "id", ""}, "fallback": {false, false, "userId", ""}, "forced": {false, false, "id", ""},
		}},
		{"condition fails", Attributes{"id": "u1", "userId": "x", "country": "FR"}, map[string]want{
			"cond": {false, false, "id", "u1"}, "fallback": {true, true, "userId", "x"},
		}},
		{"numeric id", Attributes{"id": float64(42)}, map[string]want{"run": {true, true, "id", "42"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := s.Assign(nil, tc.attrs)
			if len(got) != s.Len() {
				t.Fatalf("got %d assignments, want %d", len(got), s.Len())
			}
			for i, a := range got {
				if a.Key != s.Keys()[i] {
					t.Errorf("assignment %d has key %q", i, a.Key)
				}
				w, ok := tc.want[a.Key]
				if !ok {
					continue
				}
				if a.InExperiment != w.in || a.HashUsed != w.hashUsed || a.HashAttribute != w.attr || a.HashValue != w.value {
					t.Errorf("%s: got %+v, want %+v", a.Key, a, w)
				}
				if !a.InExperiment && (a.VariationID != 0 || a.Value != "a") {
					t.Errorf("%s: not included but variation %d %q", a.Key, a.VariationID, a.Value)
				}
				if a.Key == "forced" && a.InExperiment && a.Value != "b" {
					t.Errorf("forced: value %q, want b", a.Value)
				}
			}
		})
	}
}

func TestAssignDeterministicAndAppends(t *testing.T) {
	s := mustCompile(t, `{"experiments":[{"key":"a","variations":["x","y"]},{"key":"b","variations":["x","y","z"],"hashVersion":2}]}`)
	dst := make([]Assignment, 0, 8)
	dst = append(dst, Assignment{Key: "existing"})
	dst = s.Assign(dst, Attributes{"id": "u"})
	if len(dst) != 3 || dst[0].Key != "existing" {
		t.Fatalf("Assign did not append: %+v", dst)
	}
	again := s.Assign(nil, Attributes{"id": "u"})
	if !slices.Equal(dst[1:], again) {
		t.Errorf("not deterministic: %+v vs %+v", dst[1:], again)
	}
}

func TestDistribution(t *testing.T) {
	s := mustCompile(t, `{"experiments":[
		{"key":"three","variations":["a","b","c"],"weights":[0.2,0.3,0.5],"hashVersion":2},
		{"key":"half","variations":["a","b"]}
	]}`)
	const n = 100_000
	counts := [2][3]int{}
	var buf []Assignment
	for i := range n {
		buf = s.Assign(buf[:0], Attributes{"id": fmt.Sprintf("user-%d", i)})
		for j, a := range buf {
			if !a.InExperiment {
				t.Fatalf("user-%d not in %s", i, a.Key)
			}
			counts[j][a.VariationID]++
		}
	}
	weights := [2][]float64{{0.2, 0.3, 0.5}, {0.5, 0.5}}
	for j, ws := range weights {
		for v, w := range ws {
			got := float64(counts[j][v]) / n
			t.Logf("%s variation %d: %.4f (want %.2f)", s.Keys()[j], v, got, w)
			if math.Abs(got-w) > 0.01 {
				t.Errorf("%s variation %d: share %.4f, want %.2f ± 0.01", s.Keys()[j], v, got, w)
			}
		}
	}
}

func TestFormatNumber(t *testing.T) {
	a, b := 0.1, 0.2
	tests := map[float64]string{
		1: "1", 1.5: "1.5", -2: "-2", 0.1: "0.1", 1e21: "1e+21", 1e20: "100000000000000000000",
		1e-7: "1e-7", 0.000001: "0.000001", 123456789012: "123456789012", 1.25e-10: "1.25e-10",
		math.Inf(1): "Infinity", math.NaN(): "NaN", a + b: "0.30000000000000004", 2.5e30: "2.5e+30",
	}
	for f, want := range tests {
		if got := formatNumber(f); got != want {
			t.Errorf("formatNumber(%v) = %q, want %q", f, got, want)
		}
	}
}

func TestConditionExtras(t *testing.T) {
	groups := map[string]RawMessage{"beta": RawMessage(`["u1","u2"]`)}
	tests := []struct {
		cond  string
		attrs Attributes
		want  bool
	}{
		{`{"country":{"$in":["a","b","c","d","e","f","g","h","i","US"]}}`, Attributes{"country": "US"}, true}, // map-indexed list
		{`{"country":{"$in":["a","b","c","d","e","f","g","h","i","US"]}}`, Attributes{"country": "FR"}, false},
		{`{"id":{"$inGroup":"beta"}}`, Attributes{"id": "u2"}, true},
		{`{"id":{"$notInGroup":"beta"}}`, Attributes{"id": "u2"}, false},
		{`{"app.version":{"$vgte":"1.10.0"}}`, Attributes{"app": map[string]any{"version": "1.9.3"}}, false},
		{`{"tags.1":"b"}`, Attributes{"tags": []any{"a", "b"}}, true},
		{`{"ua":{"$regexi":"bot"}}`, Attributes{"ua": "GoogleBot/2.1"}, true},
		{`{"version":{"$vgte":"` + strings.Repeat("1.", 40) + `1"}}`, Attributes{"version": strings.Repeat("1.", 40) + "1"}, true},
	}
	for _, tc := range tests {
		c, err := CompileCondition(RawMessage(tc.cond), groups)
		if err != nil {
			t.Fatalf("CompileCondition(%s): %v", tc.cond, err)
		}
		if got := c.Match(tc.attrs); got != tc.want {
			t.Errorf("%s on %v = %v, want %v", tc.cond, tc.attrs, got, tc.want)
		}
	}
	c, _ := CompileCondition(RawMessage(`{"$or":[{"a.b":1},{"c":{"$elemMatch":{"d":1}}}]}`), nil)
	if got := c.Referenced(); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("Referenced() = %v", got)
	}
}

func TestConcurrentAssign(t *testing.T) {
	s := mustCompile(t, benchConfig(20))
	done := make(chan []Assignment)
	for range 8 {
		go func() {
			var out []Assignment
			for i := range 200 {
				out = s.Assign(out[:0], benchAttrs(i))
			}
			done <- out
		}()
	}
	first := <-done
	for range 7 {
		if got := <-done; !slices.Equal(got, first) {
			t.Error("concurrent Assign disagreed")
		}
	}
}

func TestComparePaddedVersion(t *testing.T) {
	versions := []string{"", "0", "1", "1.2", "1.2.3", "v1.2.3", "1.2.3-rc.1", "1.2.3+build", "10.0.0", "9.9.9",
		"1.0.0-alpha", "1.0.0-alpha.10", "1-2-3", "1.2.3.4", "a.b.c", "123456.1.1", "1..2", "1.2.3-", "-1.2",
		"1.0.0-0.0.0", "99999.99999.99999", "1.2.3-5-foo", "1.0.0-é", "1.0.0-😀", "1.0.0-ｚ", "1.0.0-\ue000",
		"1.0.0-\xe4\xb8", "1.0.0-\xe4\xb8\xad", "1.0.0-\xe4", "1.0.0-\xe4.\xb8", "\xe4\xb8.1"}
	for _, a := range versions {
		for _, b := range versions {
			want := oracleCompareUTF16(string(appendPaddedVersion(nil, a)), string(appendPaddedVersion(nil, b)))
			if got := comparePaddedVersion(a, string(appendPaddedVersion(nil, b))); got != want {
				t.Errorf("compare(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
}
