package engine

import "unicode/utf8"

// This file holds JavaScript's string semantics over Go's UTF-8 strings:
// JavaScript strings are sequences of UTF-16 code units, so ordering (and
// hashing, in hash.go) works on code units, not bytes or code points.
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
