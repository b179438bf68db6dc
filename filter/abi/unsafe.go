package abi

import "unsafe"

// StringView returns b's bytes as a string without a copy. The string is
// valid only while b is not written: hand it to the host at once, never keep
// it.
func StringView(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// Bytes returns s's bytes without a copy. The host only reads them; the
// slice must never be written.
func Bytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
