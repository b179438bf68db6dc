package engine

import (
	"unicode"
	"unicode/utf8"
)

// This file holds JavaScript's string semantics over Go's UTF-8 strings:
// JavaScript strings are sequences of UTF-16 code units, so ordering (and
// hashing, in hash.go) works on code units, not bytes or code points; and
// toLowerCase is Unicode's full case mapping, not Go's simple one.
// Invalid UTF-8 reads as U+FFFD one byte at a time throughout, the string
// jsonx.ValidString would hand JavaScript.

// compareUTF16 compares a and b as JavaScript's < does, by UTF-16 code
// units: -1, 0 or +1. It differs from byte (code point) order only when the
// first difference sets a supplementary character (a surrogate pair,
// 0xD800–0xDBFF first) against one from U+E000–U+FFFF: "😀" < "ｚ" in
// JavaScript. It does not allocate.
func compareUTF16(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	ca, cb := -1, -1 // -1: the string ends at i
	if i < len(a) {
		ca = int(a[i])
	}
	if i < len(b) {
		cb = int(b[i])
	}
	if ca < utf8.RuneSelf && cb < utf8.RuneSelf {
		// ASCII bytes and ends are boundaries in both strings, so the
		// identical prefix decodes identically: the bytes decide.
		switch {
		case ca < cb:
			return -1
		case ca > cb:
			return 1
		}
		return 0
	}
	// Back up to a position that starts a rune in both strings: i itself
	// if it does in both, else the last byte before i that is not a
	// continuation byte (a decoder always restarts there), else 0.
	p := i
	if !runeStart(a, p) || !runeStart(b, p) {
		for p--; p > 0 && a[p]&0xC0 == 0x80; p-- {
		}
		p = max(p, 0)
	}
	pa, pb := p, p
	for pa < len(a) && pb < len(b) {
		ra, wa := utf8.DecodeRuneInString(a[pa:])
		rb, wb := utf8.DecodeRuneInString(b[pb:])
		if ra != rb {
			if utf16Key(ra) < utf16Key(rb) {
				return -1
			}
			return 1
		}
		pa, pb = pa+wa, pb+wb
	}
	switch {
	case pa < len(a):
		return 1
	case pb < len(b):
		return -1
	}
	return 0
}

// runeStart reports whether a decoder reading s from the start is sure to
// begin a rune at byte i: at the end, or at a byte that is not a
// continuation byte.
func runeStart(s string, i int) bool { return i >= len(s) || s[i]&0xC0 != 0x80 }

// utf16Key maps a rune to a number ordered as the rune's UTF-16 encoding:
// U+E000–U+FFFF sort after the supplementary planes, whose first code unit
// is a surrogate (0xD800–0xDBFF). Surrogates never come out of the decoder.
func utf16Key(r rune) rune {
	if r >= 0xE000 && r <= 0xFFFF {
		return r + 0x110000
	}
	return r
}

// Lower-casing: String.prototype.toLowerCase is Unicode's full lowercase
// mapping with the language-independent special cases. Beyond the simple
// mapping (unicode.ToLower) that is exactly two: İ (U+0130) becomes "i̇"
// (i + U+0307), and Σ (U+03A3) becomes final ς (U+03C2) when a cased letter
// precedes it and none follows it, skipping case-ignorable characters
// (Final_Sigma). Go's unicode tables (Unicode 15.0 in Go 1.26) decide the
// rest; testdata/vectors.json holds Node's answer for every code point.

// lowerString is s.toLowerCase(), for values compiled once.
func lowerString(s string) string {
	if lowerEquals(s, s) {
		return s
	}
	return string(appendLower(nil, s))
}

// appendLower appends s.toLowerCase() to dst.
func appendLower(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		dst = appendLowerRune(dst, s, i, size, r)
		i += size
	}
	return dst
}

// lowerEquals reports whether s.toLowerCase() === lower without building
// the lower-cased string; lowerEquals(s, s) reports whether lower-casing
// leaves s unchanged. It does not allocate.
func lowerEquals(s, lower string) bool {
	j := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if j >= len(lower) || lower[j] != c {
				return false
			}
			i++
			j++
			continue
		}
		var buf [utf8.UTFMax * 2]byte
		r, size := utf8.DecodeRuneInString(s[i:])
		b := appendLowerRune(buf[:0], s, i, size, r)
		if len(lower)-j < len(b) || lower[j:j+len(b)] != string(b) {
			return false
		}
		i += size
		j += len(b)
	}
	return j == len(lower)
}

// appendLowerRune appends the lower case of r, which is s[i:i+size].
func appendLowerRune(dst []byte, s string, i, size int, r rune) []byte {
	switch r {
	case 0x130: // İ: SpecialCasing's one unconditional lowercase entry
		return append(dst, "i\u0307"...)
	case 0x3A3: // Σ
		if finalSigma(s, i, i+size) {
			return append(dst, "\u03C2"...)
		}
	}
	return utf8.AppendRune(dst, unicode.ToLower(r))
}

// finalSigma is Unicode's Final_Sigma condition for the Σ at s[i:end]: a
// cased letter before it and none after it, skipping case-ignorable
// characters on both sides.
func finalSigma(s string, i, end int) bool {
	before := false
	for j := i; j > 0; {
		r, w := utf8.DecodeLastRuneInString(s[:j])
		j -= w
		if !caseIgnorable(r) {
			before = cased(r)
			break
		}
	}
	if !before {
		return false
	}
	for j := end; j < len(s); {
		r, w := utf8.DecodeRuneInString(s[j:])
		j += w
		if !caseIgnorable(r) {
			return !cased(r)
		}
	}
	return true
}

// cased is Unicode's Cased property: Lowercase, Uppercase or Lt.
func cased(r rune) bool {
	return unicode.In(r, unicode.Lu, unicode.Ll, unicode.Lt, unicode.Other_Lowercase, unicode.Other_Uppercase)
}

// caseIgnorable is Unicode's Case_Ignorable property: Mn, Me, Cf, Lm, Sk,
// and the Word_Break classes MidLetter, MidNumLet and Single_Quote, which Go's
// unicode package does not have (listed here from WordBreakProperty.txt).
func caseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', 0xB7, 0x387, 0x55F, 0x5F4, 0x2018, 0x2019, 0x2024, 0x2027,
		0xFE13, 0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A:
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}
