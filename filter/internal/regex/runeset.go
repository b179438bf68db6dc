package regex

import (
	"unicode"
)

// runeSet is a set of runes as sorted, disjoint, non-adjacent ranges
// lo0, hi0, lo1, hi1, ...
type runeSet []rune

// add adds the runes lo through hi.
func (s *runeSet) add(lo, hi rune) {
	r := *s
	// i: the first range ending at or after lo-1 (adjacent ranges merge).
	i, j := 0, len(r)/2
	for i < j {
		if m := int(uint(i+j) >> 1); r[2*m+1] < lo-1 {
			i = m + 1
		} else {
			j = m
		}
	}
	k := i // ranges i through k-1 merge into [lo, hi]
	for ; k < len(r)/2 && r[2*k] <= hi+1; k++ {
		lo, hi = min(lo, r[2*k]), max(hi, r[2*k+1])
	}
	if k == i {
		r = append(r, 0, 0)
		copy(r[2*i+2:], r[2*i:])
	} else {
		r = append(r[:2*i+2], r[2*k:]...)
	}
	r[2*i], r[2*i+1] = lo, hi
	*s = r
}

// addFolded adds lo through hi and every rune that folds to one of them.
func (s *runeSet) addFolded(lo, hi rune) {
	s.add(lo, hi)
	for c := max(lo, minFold); c <= min(hi, maxFold) && (lo > minFold || hi < maxFold); c++ {
		for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
			if f < lo || f > hi {
				s.add(f, f)
			}
		}
	}
}

// addGroup adds the class with ranges g (byte pairs), folded when fold is
// set and then negated when neg is set, the order RE2 applies them in.
func (s *runeSet) addGroup(g string, neg, fold bool) {
	var t runeSet
	for i := 0; i+1 < len(g); i += 2 {
		if fold {
			t.addFolded(rune(g[i]), rune(g[i+1]))
		} else {
			t.add(rune(g[i]), rune(g[i+1]))
		}
	}
	if neg {
		t = t.negate()
	}
	for i := 0; i < len(t); i += 2 {
		s.add(t[i], t[i+1])
	}
}

// negate returns the complement of s in [0, unicode.MaxRune]. It is not
// inlined, to keep the Wasm module smaller.
//
//go:noinline
func (s runeSet) negate() runeSet {
	var out runeSet
	next := rune(0)
	for i := 0; i < len(s); i += 2 {
		if s[i] > next {
			out = append(out, next, s[i]-1)
		}
		next = s[i+1] + 1
	}
	if next <= unicode.MaxRune {
		out = append(out, next, unicode.MaxRune)
	}
	return out
}
