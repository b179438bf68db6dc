package engine

import (
	"fmt"
	"testing"
)

// TestSharedConditionsEvaluateAsAlone: experiments that share a condition
// share its evaluation within one Assign; every experiment must still get
// exactly what it gets when compiled alone — with shared, distinct and more
// distinct conditions than the memo holds.
func TestSharedConditionsEvaluateAsAlone(t *testing.T) {
	conds := []string{
		`{"country":{"$in":["NL","US"]}}`,
		`{ "country" : { "$in" : [ "NL", "US" ] } }`, // the same, spaced differently
		`{"plan":"pro"}`,
		`{"version":{"$vgte":"2.1.0"}}`,
	}
	var exps []Experiment
	for i := range 300 {
		cond := conds[i%len(conds)]
		if i >= 150 { // 150 distinct conditions: more than the memo holds
			cond = fmt.Sprintf(`{"n":{"$lt":%d}}`, i-150)
		}
		exps = append(exps, Experiment{
			Key: fmt.Sprintf("e%03d", i), Variations: []RawMessage{[]byte(`"a"`), []byte(`"b"`)},
			Condition: RawMessage(cond),
		})
	}
	set, err := Compile(Config{Experiments: exps})
	if err != nil {
		t.Fatal(err)
	}
	if set.conds != 3+150 {
		t.Fatalf("%d distinct conditions, want 153", set.conds)
	}
	alone := make([]*Set, len(exps))
	for i := range exps {
		if alone[i], err = Compile(Config{Experiments: exps[i : i+1]}); err != nil {
			t.Fatal(err)
		}
	}
	for u := range 200 {
		attrs := Attributes{"id": fmt.Sprintf("u%d", u), "country": []string{"NL", "DE", "US"}[u%3],
			"plan": []string{"pro", "free"}[u%2], "version": []string{"2.0.9", "2.1.0", "10.0.0"}[u%3], "n": float64(u % 170)}
		got := set.Assign(nil, attrs)
		for i := range exps {
			want := alone[i].Assign(nil, attrs)[0]
			if got[i] != want {
				t.Fatalf("unit %d, %s: in the set %+v, alone %+v", u, exps[i].Key, got[i], want)
			}
		}
	}
}
