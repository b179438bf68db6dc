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

// String views b as a string without copying, for passing a reused buffer
// to a host call; b must not change while the string is in use.
func String(b []byte) string { return bytesToString(b) }

// Bytes returns s's bytes without a copy. The host only reads them; the
// slice must never be written.
func Bytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
