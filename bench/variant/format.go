package variant

import (
	"strconv"
	"strings"
)

// Thousands formats n with commas: 10000 → 10,000.
func Thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// JoinInts formats xs with Thousands, joined by sep.
func JoinInts(xs []int, sep string) string {
	var ss []string
	for _, x := range xs {
		ss = append(ss, Thousands(x))
	}
	return strings.Join(ss, sep)
}
