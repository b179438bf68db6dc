package abi

import "unsafe"

// bytesToString views b as a string without copying; b must not change
// while the string is in use.
func bytesToString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// Bytes returns s's bytes without a copy. The host only reads them; the
// slice must never be written.
func Bytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// StringView returns b's bytes as a string without a copy. The string is
// valid only while b is not written: hand it to the host at once, never keep
// it.
func StringView(b []byte) string { return bytesToString(b) }
