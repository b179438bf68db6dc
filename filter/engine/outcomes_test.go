package engine

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
)

// randomSet builds a valid set of n experiments over the attributes id,
// device, country, platform, version and plan: conditions of every common
// shape (some on the hash attribute itself, some on attributes that are
// never hashed), fallback attributes, namespaces, filters, coverage, forced
// variations, inactive experiments and both hash versions.
func randomSet(t *testing.T, r *rand.Rand, n int) *Set {
	t.Helper()
	conds := []string{
		``,
		`{"country":{"$in":["US","CA"]}}`,
		`{"country":{"$in":["US","CA"]},"platform":"ios"}`,
		`{"platform":{"$ne":"android"},"version":{"$vgte":"2.1.0"}}`,
		`{"$or":[{"plan":"pro"},{"country":"DE"}]}`,
		`{"id":{"$regex":"^u-1"}}`,
		`{"device":{"$exists":true}}`,
		`{"plan":{"$exists":false}}`,
		`{"$not":{"country":"US"}}`,
		`{"version":{"$vlt":"2.3.0"},"plan":{"$nin":["free"]}}`,
	}
	var exps []Experiment
	for i := range n {
		e := Experiment{Key: "exp-" + strconv.Itoa(i)}
		nv := 2 + r.IntN(3)
		for v := range nv {
			e.Variations = append(e.Variations, RawMessage(strconv.Quote("v"+strconv.Itoa(v))))
		}
		if c := conds[r.IntN(len(conds))]; c != "" {
			e.Condition = RawMessage(c)
		}
		if r.IntN(3) == 0 {
			cov := float64(r.IntN(11)) / 10
			e.Coverage = &cov
		}
		e.HashVersion = 1 + r.IntN(2)
		switch r.IntN(4) {
		case 0:
			e.HashAttribute = "device"
		case 1:
			e.HashAttribute, e.FallbackAttribute = "device", "id"
		}
		switch r.IntN(6) {
		case 0:
			e.Namespace = RawMessage(`["ns",0,0.5]`)
		case 1:
			e.Filters = RawMessage(`[{"seed":"f","ranges":[[0,0.6]],"attribute":"id"}]`)
		case 2:
			f := r.IntN(nv)
			e.Force = &f
		case 3:
			zero := 0.0
			e.Coverage = &zero // never assigns
		}
		exps = append(exps, e)
	}
	s, err := Compile(Config{Experiments: exps})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestAssignStringsEqualsAssign: for string attributes, assigning in two
// steps (Outcomes for the condition attributes, then AssignStrings) puts
// every unit in exactly the experiments and variations Assign does, whatever
// the experiments and values.
func TestAssignStringsEqualsAssign(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	pick := map[string][]string{
		"id":       {"", "u-1", "u-17", "u-2", "ünï", "user-42"},
		"device":   {"", "d-1", "d-9"},
		"country":  {"", "US", "CA", "DE"},
		"platform": {"", "ios", "android"},
		"version":  {"", "2.0.0", "2.1.0", "2.3.1"},
		"plan":     {"", "free", "pro"},
	}
	for trial := range 200 {
		s := randomSet(t, r, 1+r.IntN(40))
		refs := s.Referenced()
		for range 30 {
			vals, attrs := randomUnit(r, refs, pick)
			// Outcomes see only the condition attributes.
			condAttrs := Attributes{}
			for _, name := range s.ConditionAttributes() {
				if v, ok := attrs[name]; ok {
					condAttrs[name] = v
				}
			}
			want := s.Assign(nil, attrs)
			got := s.AssignStrings(nil, vals, s.Outcomes(nil, condAttrs))
			for i, a := range want {
				if got[i] != variationOf(a) {
					t.Fatalf("trial %d, attrs %v, %s: AssignStrings %d, Assign %+v",
						trial, attrs, a.Key, got[i], a)
				}
			}
		}
	}
}

// randomUnit picks a value of every attribute refs names from pick ("" for
// absent): the values as AssignStrings takes them and as Attributes.
func randomUnit(r *rand.Rand, refs []string, pick map[string][]string) ([]string, Attributes) {
	vals := make([]string, len(refs))
	attrs := Attributes{}
	for i, name := range refs {
		vals[i] = pick[name][r.IntN(len(pick[name]))]
		if vals[i] != "" {
			attrs[name] = vals[i]
		}
	}
	return vals, attrs
}

// variationOf is a's variation as AssignStrings reports it: -1 when not in
// the experiment.
func variationOf(a Assignment) int32 {
	if !a.InExperiment {
		return -1
	}
	return int32(a.VariationID)
}

func TestConditionAttributes(t *testing.T) {
	s, err := Compile(Config{Experiments: []Experiment{
		{Key: "a", Variations: []RawMessage{[]byte(`"x"`), []byte(`"y"`)},
			HashAttribute: "device", Condition: RawMessage(`{"country":"US","app.version":{"$exists":true}}`)},
		{Key: "b", Variations: []RawMessage{[]byte(`"x"`), []byte(`"y"`)},
			Condition: RawMessage(`{"$or":[{"plan":"pro"},{"country":"DE"}]}`)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := s.ConditionAttributes(), []string{"app", "country", "plan"}; !slices.Equal(got, want) {
		t.Errorf("ConditionAttributes() = %q, want %q", got, want)
	}
	if got, want := s.Referenced(), []string{"app", "country", "device", "id", "plan"}; !slices.Equal(got, want) {
		t.Errorf("Referenced() = %q, want %q", got, want)
	}
}

func TestAssignStringsRejectsForeignOutcomes(t *testing.T) {
	s := randomSet(t, rand.New(rand.NewPCG(3, 4)), 10)
	defer func() {
		if recover() == nil {
			t.Error("AssignStrings with outcomes of another length did not panic")
		}
	}()
	s.AssignStrings(nil, make([]string, len(s.Referenced())), Outcomes{condTrue})
}
