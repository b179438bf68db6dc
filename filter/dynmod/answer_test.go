//go:build cgo

package dynmod

import (
	"strings"
	"testing"
)

// ofrepPrefix is the path prefix of OFREP's evaluations, which a
// configuration that answers them hands to Go.
const ofrepPrefix = "/ofrep/v1/evaluate/flags"

// TestAnswerPrefix: a configuration's C side hands Go every request whose
// :path begins with its answer prefix, the bulk path itself included, and
// no other (a shorter path, another path, none); an empty prefix, the
// default and what SetAnswerPrefix("") restores, hands nothing. A cold
// configuration keeps the prefix too.
func TestAnswerPrefix(t *testing.T) {
	warm, err := NewWarmConfig(testPlan(t, false), testRender(), 2, 16, 1<<16, 3, "wasm.allot")
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Free()
	cold, err := NewColdConfig()
	if err != nil {
		t.Fatal(err)
	}
	defer cold.Free()
	unit := [2]string{"x-user-id", "u1"}
	for _, w := range []*WarmConfig{warm, cold} {
		if w.Answers([][2]string{{":path", ofrepPrefix}, unit}) {
			t.Error("no answer prefix: a request handed to Go")
		}
		if err := w.SetAnswerPrefix(ofrepPrefix); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			pairs [][2]string
			want  bool
		}{
			{[][2]string{{":path", ofrepPrefix + "/checkout"}, unit}, true},
			{[][2]string{unit, {":method", "POST"}, {":path", ofrepPrefix}}, true},
			{[][2]string{{":path", ofrepPrefix + "?x=1"}}, true},
			{[][2]string{{":path", "/ofrep/v1/evaluate"}, unit}, false},
			{[][2]string{{":path", "/checkout"}, unit}, false},
			{[][2]string{{"path", ofrepPrefix}, unit}, false},
			{[][2]string{unit}, false},
			{nil, false},
		} {
			if got := w.Answers(tc.pairs); got != tc.want {
				t.Errorf("prefix %q, headers %q: handed to Go %v, want %v", ofrepPrefix, tc.pairs, got, tc.want)
			}
		}
		if err := w.SetAnswerPrefix(""); err != nil || w.Answers([][2]string{{":path", ofrepPrefix}}) {
			t.Errorf("the prefix removed: %v, or a request still handed to Go", err)
		}
	}
}

// FuzzAnswerPrefix holds the C prefix check to strings.HasPrefix over
// arbitrary prefixes and paths (its oracle).
func FuzzAnswerPrefix(f *testing.F) {
	f.Add(ofrepPrefix, ofrepPrefix+"/a")
	f.Add(ofrepPrefix, "/ofrep")
	f.Add("/", "")
	f.Add("/\x00a", "/\x00ab")
	w, err := NewColdConfig()
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(w.Free)
	f.Fuzz(func(t *testing.T, prefix, path string) {
		if err := w.SetAnswerPrefix(prefix); err != nil {
			t.Fatal(err)
		}
		want := prefix != "" && strings.HasPrefix(path, prefix)
		if got := w.Answers([][2]string{{":authority", "a"}, {":path", path}}); got != want {
			t.Errorf("prefix %q, path %q: handed to Go %v, want %v", prefix, path, got, want)
		}
	})
}
