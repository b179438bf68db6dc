package plugin

import "unsafe"

// stringView is b as a string without a copy: valid while b is unchanged.
func stringView(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// bytesView is s as a byte slice without a copy, which must not be written.
func bytesView(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }
