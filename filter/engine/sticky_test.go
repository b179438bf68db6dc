package engine

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// docs builds documents from "name||value" → assignments.
func docs(m map[string]map[string]string) StickyDocs {
	d := StickyDocs{}
	for k, a := range m {
		name, value, _ := strings.Cut(k, "||")
		d[k] = StickyDoc{AttributeName: name, AttributeValue: value, Assignments: a}
	}
	return d
}

func TestAssignSticky(t *testing.T) {
	// The unit "u1" hashes into variation 2 of "a" (hash version 2, seed a)
	// with equal weights; weights [1, 0, 0] send everyone to 0.
	const exp = `{"key":"a","variations":["x","y","z"],"hashVersion":2`
	tests := []struct {
		name    string
		exps    string // experiments, JSON array elements
		attrs   Attributes
		docs    StickyDocs
		want    int32 // variation of the first experiment, -1 when not in it
		sticky  bool  // Assignment.StickyBucketUsed
		hash    bool  // Assignment.HashUsed
		changes []StickyChange
	}{
		{"no documents: hashed and recorded", exp + `}`, Attributes{"id": "u1"}, nil,
			2, false, true, []StickyChange{{0, "id", "u1", "a__0", "2"}}},
		{"stored variation kept though the weights moved", exp + `,"weights":[1,0,0]}`, Attributes{"id": "u1"},
			docs(map[string]map[string]string{"id||u1": {"a__0": "2"}}), 2, true, true, nil},
		{"stored variation kept outside the coverage", exp + `,"coverage":0}`, Attributes{"id": "u1"},
			docs(map[string]map[string]string{"id||u1": {"a__0": "2"}}), 2, true, true, nil},
		{"stored variation kept though the condition fails", exp + `,"condition":{"country":"NL"}}`,
			Attributes{"id": "u1", "country": "DE"},
			docs(map[string]map[string]string{"id||u1": {"a__0": "0"}}), 0, true, true, nil},
		{"stored variation kept outside the namespace", exp + `,"namespace":["ns",0,0]}`, Attributes{"id": "u1"},
			docs(map[string]map[string]string{"id||u1": {"a__0": "0"}}), 0, true, true, nil},
		{"stored variation kept outside the filters", exp + `,"filters":[{"seed":"f","ranges":[[0,0]]}]}`, Attributes{"id": "u1"},
			docs(map[string]map[string]string{"id||u1": {"a__0": "0"}}), 0, true, true, nil},
		{"without a stored variation the condition applies", exp + `,"condition":{"country":"NL"}}`,
			Attributes{"id": "u1", "country": "DE"},
			docs(map[string]map[string]string{"id||u1": {"b__0": "0"}}), -1, false, false, nil},
		{"a forced variation wins and is not stored", exp + `,"force":1}`, Attributes{"id": "u1"},
			docs(map[string]map[string]string{"id||u1": {"a__0": "2"}}), 1, false, false, nil},
		{"another unit's document is not read", exp + `,"weights":[1,0,0]}`, Attributes{"id": "u1"},
			docs(map[string]map[string]string{"id||u2": {"a__0": "2"}}), 0, false, true,
			[]StickyChange{{0, "id", "u1", "a__0", "0"}}},
		{"another version is not reused", exp + `,"bucketVersion":2}`, Attributes{"id": "u1"},
			docs(map[string]map[string]string{"id||u1": {"a__0": "1", "a__1": "1", "a__3": "1"}}), 2, false, true,
			[]StickyChange{{0, "id", "u1", "a__2", "2"}}},
		{"a version below minBucketVersion excludes", exp + `,"bucketVersion":2,"minBucketVersion":2}`, Attributes{"id": "u1"},
			docs(map[string]map[string]string{"id||u1": {"a__2": "0", "a__1": "0"}}), -1, true, false, nil},
		{"blocked, but the condition excludes first", exp + `,"bucketVersion":1,"minBucketVersion":1,"condition":{"country":"NL"}}`,
			Attributes{"id": "u1"},
			docs(map[string]map[string]string{"id||u1": {"a__0": "0"}}), -1, false, false, nil},
		{"minBucketVersion reads only this experiment's keys", exp + `,"bucketVersion":2,"minBucketVersion":2}`,
			Attributes{"id": "u1"},
			docs(map[string]map[string]string{"id||u1": {"a__b__0": "0", "ab__0": "0", "a__01": "0", "a__-1": "0", "a__x": "0"}}),
			2, false, true, []StickyChange{{0, "id", "u1", "a__2", "2"}}},
		{"an unknown variation key is no assignment", exp + `}`, Attributes{"id": "u1"},
			docs(map[string]map[string]string{"id||u1": {"a__0": "01"}}), 2, false, true,
			[]StickyChange{{0, "id", "u1", "a__0", "2"}}},
		{"a variation key out of range is no assignment", exp + `}`, Attributes{"id": "u1"},
			docs(map[string]map[string]string{"id||u1": {"a__0": "3"}}), 2, false, true,
			[]StickyChange{{0, "id", "u1", "a__0", "2"}}},
		{"disabled: documents ignored, nothing recorded", exp + `,"weights":[1,0,0],"disableStickyBucketing":true}`,
			Attributes{"id": "u1"}, docs(map[string]map[string]string{"id||u1": {"a__0": "2"}}), 0, false, true, nil},
		{"the fallback attribute's document, hashed on the fallback", exp + `,"fallbackAttribute":"device","weights":[1,0,0]}`,
			Attributes{"device": "d1"}, docs(map[string]map[string]string{"device||d1": {"a__0": "2"}}), 2, true, true, nil},
		{"upgraded from the fallback document to the hash attribute's", exp + `,"fallbackAttribute":"device","weights":[1,0,0]}`,
			Attributes{"id": "u1", "device": "d1"}, docs(map[string]map[string]string{"device||d1": {"a__0": "2"}}),
			2, true, true, []StickyChange{{0, "id", "u1", "a__0", "2"}}},
		{"the hash attribute's document wins", exp + `,"fallbackAttribute":"device","weights":[1,0,0]}`,
			Attributes{"id": "u1", "device": "d1"},
			docs(map[string]map[string]string{"device||d1": {"a__0": "2"}, "id||u1": {"a__0": "1"}}), 1, true, true, nil},
		{"id's document without a fallback, when some experiment hashes id", exp + `,"hashAttribute":"device","weights":[1,0,0]},{"key":"b","variations":["x","y"]}`,
			Attributes{"id": "u1", "device": "d1"}, docs(map[string]map[string]string{"id||u1": {"a__0": "2"}}),
			2, true, true, []StickyChange{{0, "device", "d1", "a__0", "2"}, {1, "id", "u1", "b__0", "0"}}},
		{"no id document when no experiment hashes id", exp + `,"hashAttribute":"device","weights":[0,0,1]}`,
			Attributes{"id": "u1", "device": "d1"}, docs(map[string]map[string]string{"id||u1": {"a__0": "0"}}),
			2, false, true, []StickyChange{{0, "device", "d1", "a__0", "2"}}},
		{"no hash value: nothing read, nothing recorded", exp + `}`, Attributes{"device": "d1"},
			docs(map[string]map[string]string{"id||": {"a__0": "0"}}), -1, false, false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := mustCompile(t, `{"experiments":[`+tc.exps+`]}`)
			a, changes := s.AssignSticky(nil, tc.attrs, tc.docs, nil)
			got := variationOf(a[0])
			if got != tc.want || a[0].StickyBucketUsed != tc.sticky || a[0].HashUsed != tc.hash {
				t.Errorf("AssignSticky = variation %d, stickyBucketUsed %v, hashUsed %v; want %d, %v, %v",
					got, a[0].StickyBucketUsed, a[0].HashUsed, tc.want, tc.sticky, tc.hash)
			}
			if !slices.Equal(changes, tc.changes) {
				t.Errorf("changes = %+v, want %+v", changes, tc.changes)
			}
			// The proxy's path agrees.
			vals := make([]string, 0, len(s.Referenced()))
			for _, name := range s.Referenced() {
				v, _ := tc.attrs[name].(string)
				vals = append(vals, v)
			}
			gotStrs, strChanges := s.AssignStringsSticky(nil, vals, s.Outcomes(nil, tc.attrs), tc.docs, nil)
			if gotStrs[0] != got || !slices.Equal(strChanges, changes) {
				t.Errorf("AssignStringsSticky = %d, %+v; AssignSticky %d, %+v", gotStrs[0], strChanges, got, changes)
			}
		})
	}
}

// TestAssignStickyWithoutDocuments: without documents, AssignSticky assigns
// as Assign does, and reports exactly the assignments by hash of the
// experiments that do not disable sticky bucketing.
func TestAssignStickyWithoutDocuments(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 100 {
		s := randomSet(t, r, 1+r.IntN(30))
		for range 20 {
			attrs := Attributes{"id": "u-" + strconv.Itoa(r.IntN(1000)), "country": "US", "platform": "ios"}
			if r.IntN(2) == 0 {
				attrs["device"] = "d-" + strconv.Itoa(r.IntN(1000))
			}
			want := s.Assign(nil, attrs)
			got, changes := s.AssignSticky(nil, attrs, nil, nil)
			if !slices.Equal(got, want) {
				t.Fatalf("AssignSticky = %+v, Assign %+v", got, want)
			}
			var wantChanges []StickyChange
			for i, a := range want {
				if a.InExperiment && a.HashUsed {
					wantChanges = append(wantChanges, StickyChange{i, a.HashAttribute, a.HashValue, a.Key + "__0", strconv.Itoa(a.VariationID)})
				}
			}
			if !slices.Equal(changes, wantChanges) {
				t.Fatalf("changes = %+v, want %+v", changes, wantChanges)
			}
		}
	}
}

// TestAssignStringsStickyEqualsAssignSticky: with random documents, the
// proxy's path puts every unit where AssignSticky does and reports the same
// changes, and applying them makes the next evaluation report none.
func TestAssignStringsStickyEqualsAssignSticky(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	pick := map[string][]string{
		"id":       {"", "u-1", "u-2", "ünï"},
		"device":   {"", "d-1", "d-9"},
		"country":  {"", "US", "CA", "DE"},
		"platform": {"", "ios", "android"},
		"version":  {"", "2.0.0", "2.3.1"},
		"plan":     {"", "free", "pro"},
	}
	for trial := range 100 {
		s := randomSet(t, r, 1+r.IntN(20))
		for range 20 {
			vals, attrs := randomUnit(r, s.Referenced(), pick)
			d := StickyDocs{}
			for _, name := range []string{"id", "device"} {
				for _, v := range pick[name][1:] {
					if r.IntN(2) == 0 {
						continue
					}
					a := map[string]string{}
					for range r.IntN(6) {
						a["exp-"+strconv.Itoa(r.IntN(s.Len()))+"__"+strconv.Itoa(r.IntN(2))] = strconv.Itoa(r.IntN(5))
					}
					d[StickyDocKey(name, v)] = StickyDoc{AttributeName: name, AttributeValue: v, Assignments: a}
				}
			}
			want, wantChanges := s.AssignSticky(nil, attrs, d, nil)
			got, changes := s.AssignStringsSticky(nil, vals, s.Outcomes(nil, attrs), d, nil)
			for i, a := range want {
				if got[i] != variationOf(a) {
					t.Fatalf("trial %d, attrs %v, docs %v, %s: AssignStringsSticky %d, AssignSticky %+v", trial, attrs, d, a.Key, got[i], a)
				}
			}
			if !slices.Equal(changes, wantChanges) {
				t.Fatalf("trial %d: changes %+v, AssignSticky %+v", trial, changes, wantChanges)
			}
			d = d.Apply(changes)
			again, more := s.AssignSticky(nil, attrs, d, nil)
			if len(more) > 0 {
				t.Fatalf("trial %d: after applying the changes, AssignSticky reports %+v", trial, more)
			}
			for i := range want {
				if again[i].InExperiment != want[i].InExperiment || again[i].VariationID != want[i].VariationID {
					t.Fatalf("trial %d: after applying the changes %+v, was %+v", trial, again[i], want[i])
				}
			}
		}
	}
}

// TestStickyAllocations: a request without documents allocates nothing on
// any path, and one with documents nothing either (keys within 128 bytes,
// room for the changes).
func TestStickyAllocations(t *testing.T) {
	s := mustCompile(t, benchConfig(50))
	attrs := benchAttrs(7)
	var vals []string
	for _, name := range s.Referenced() {
		v, _ := attrs[name].(string)
		vals = append(vals, v)
	}
	o := s.Outcomes(nil, attrs)
	d := docs(map[string]map[string]string{"id||user-7": {"exp-3__0": "1", "exp-4__0": "2", "exp-5__0": "9"}})
	dst := make([]Assignment, 0, 50)
	idx := make([]int32, 0, 50)
	changes := make([]StickyChange, 0, 50)
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"Assign", func() { dst = s.Assign(dst[:0], attrs) }},
		{"AssignStrings", func() { idx = s.AssignStrings(idx[:0], vals, o) }},
		{"AssignSticky without documents", func() { dst, changes = s.AssignSticky(dst[:0], attrs, nil, changes[:0]) }},
		{"AssignStringsSticky without documents", func() { idx, changes = s.AssignStringsSticky(idx[:0], vals, o, nil, changes[:0]) }},
		{"AssignSticky", func() { dst, changes = s.AssignSticky(dst[:0], attrs, d, changes[:0]) }},
		{"AssignStringsSticky", func() { idx, changes = s.AssignStringsSticky(idx[:0], vals, o, d, changes[:0]) }},
	} {
		if n := testing.AllocsPerRun(100, tc.f); n != 0 {
			t.Errorf("%s allocates %v times per call", tc.name, n)
		}
	}
	if len(changes) == 0 {
		t.Fatal("no changes reported: the test does not exercise recording")
	}
}

func TestStickyDocsApply(t *testing.T) {
	var d StickyDocs
	d = d.Apply([]StickyChange{{0, "id", "u1", "a__0", "1"}, {1, "device", "d1", "b__2", "0"}, {2, "id", "u1", "c__0", "1"}})
	d = d.Apply([]StickyChange{{0, "id", "u1", "a__0", "2"}})
	want := docs(map[string]map[string]string{
		"id||u1":     {"a__0": "2", "c__0": "1"},
		"device||d1": {"b__2": "0"},
	})
	if len(d) != len(want) {
		t.Fatalf("Apply = %v, want %v", d, want)
	}
	for k, w := range want {
		g := d[k]
		if g.AttributeName != w.AttributeName || g.AttributeValue != w.AttributeValue || len(g.Assignments) != len(w.Assignments) {
			t.Fatalf("Apply[%q] = %+v, want %+v", k, g, w)
		}
		for ak, av := range w.Assignments {
			if g.Assignments[ak] != av {
				t.Errorf("Apply[%q][%q] = %q, want %q", k, ak, g.Assignments[ak], av)
			}
		}
	}
	if k := StickyKey("checkout", 3); k != "checkout__3" {
		t.Errorf("StickyKey = %q", k)
	}
	if k := StickyDocKey("id", "u||1"); k != "id||u||1" {
		t.Errorf("StickyDocKey = %q", k)
	}
}
