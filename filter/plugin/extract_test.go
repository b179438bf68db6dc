package plugin

import (
	"net/url"
	"testing"
)

var unescapeCases = []string{
	"", "a", "a+b", "%41", "%4a%4A", "%", "%4", "%4g", "%zz", "a%2", "100%", "%%41",
	"%E2%82%AC", "%FF%FE", "+++", "a%20b+c", "%2B", "x=%3D", "Zoë", "%C3%A9t%C3%A9",
	"%00", "%0d%0a", "%%", "%+1", "%1+", "é%41",
}

// TestQueryUnescape compares queryUnescape with url.QueryUnescape.
func TestQueryUnescape(t *testing.T) {
	for _, s := range unescapeCases {
		checkUnescape(t, s)
	}
}

func checkUnescape(t *testing.T, s string) {
	t.Helper()
	got, ok := queryUnescape(s)
	want, err := url.QueryUnescape(s)
	if ok != (err == nil) || got != want {
		t.Fatalf("queryUnescape(%q) = %q, %v; url.QueryUnescape = %q, %v", s, got, ok, want, err)
	}
}

// FuzzQueryUnescape: queryUnescape agrees with url.QueryUnescape on every
// input.
func FuzzQueryUnescape(f *testing.F) {
	for _, s := range unescapeCases {
		f.Add(s)
	}
	f.Fuzz(checkUnescape)
}
