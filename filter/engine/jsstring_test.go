package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
	"unicode/utf16"
)

// oracleCompareUTF16 is compareUTF16 the slow way: []rune reads invalid
// UTF-8 as U+FFFD per byte, utf16.Encode gives JavaScript's code units.
func oracleCompareUTF16(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

func TestCompareUTF16Oracle(t *testing.T) {
	pieces := []string{"", "a", "z", "-", "é", "ÿ", "用", "\ud7ff", "\ue000", "ｚ", "\uffff", "\ufffd", "😀", "𠮷",
		"\xff", "\xe4", "\xe4\xb8", "\xb8", "\xad", "\xed\xa0\x80", "\xf0\x9f", "\xf0\x9f\x98"}
	r := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		s := ""
		for range r.IntN(5) {
			s += pieces[r.IntN(len(pieces))]
		}
		return s
	}
	for range 200000 {
		a := word()
		b := a[:r.IntN(len(a)+1)] + word() // often sharing a prefix, cut anywhere
		if got, want := compareUTF16(a, b), oracleCompareUTF16(a, b); got != want {
			t.Fatalf("compareUTF16(%q, %q) = %d, want %d", a, b, got, want)
		}
	}
}

func FuzzCompareUTF16(f *testing.F) {
	f.Add("😀", "ｚ")
	f.Add("\xe4\xb8", "\xe4\xb8\xad")
	f.Fuzz(func(t *testing.T, a, b string) {
		if got, want := compareUTF16(a, b), oracleCompareUTF16(a, b); got != want {
			t.Fatalf("compareUTF16(%q, %q) = %d, want %d", a, b, got, want)
		}
	})
}

func TestCompareUTF16NoAlloc(t *testing.T) {
	a, b := "user-😀-"+string(rune(0x1F600)), "user-😀-ｚ"
	if n := testing.AllocsPerRun(100, func() { compareUTF16(a, b); cmpString(opLT, "abc", "abd") }); n != 0 {
		t.Errorf("compareUTF16 allocates %v times", n)
	}
}

// TestFoldNoAlloc: $ini, $nini and $alli lower-case attribute values
// without allocating (the map-indexed list included), unless a value that
// lower-casing changes exceeds 64 bytes.
func TestFoldNoAlloc(t *testing.T) {
	short := newInCond([]any{"ας", "i̇stanbul"}, true, false)
	long := newInCond([]any{"a", "b", "c", "d", "e", "f", "g", "h", "i", "ας", "i̇stanbul"}, true, false)
	fold := strFoldCond(lowerString("ΟΔΥΣΣΕΥΣ"))
	n := testing.AllocsPerRun(100, func() {
		for _, c := range []*inCond{short, long} {
			if !c.has("ΑΣ") || !c.has("İSTANBUL") || !c.has("ας") || c.has("J") {
				t.Fatal("wrong $ini answer")
			}
		}
		if !fold.match("ΟΔΥΣΣΕΥΣ") || !fold.match("οδυσσευς") || fold.match("ΟΔΥΣΣΕΥ") {
			t.Fatal("wrong $alli answer")
		}
	})
	if n != 0 {
		t.Errorf("folding allocates %v times", n)
	}
}

// TestLowerEqualsAppendLower: lowerEquals agrees with appendLower on
// random strings with the special cases and invalid UTF-8.
func TestLowerEqualsAppendLower(t *testing.T) {
	pieces := []string{"Σ", "σ", "Α", "a", "A", ".", "'", " ", "\u0301", "İ", "😀", "𐐀", "\xff", "\xe4\xb8", "ǅ"}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		s := ""
		for range r.IntN(6) {
			s += pieces[r.IntN(len(pieces))]
		}
		l := string(appendLower(nil, s))
		if !lowerEquals(s, l) || lowerEquals(s, l+"x") || (len(l) > 0 && lowerEquals(s, l[:len(l)-1])) {
			t.Fatalf("lowerEquals(%q, %q) disagrees with appendLower", s, l)
		}
		if lowerString(s) != l {
			t.Fatalf("lowerString(%q) = %q, want %q", s, lowerString(s), l)
		}
	}
}
