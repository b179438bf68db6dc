package engine

import (
	"testing"
	"time"
)

// parseRFC3339 must accept exactly what time.Parse(time.RFC3339, …) accepts
// and yield the same instant.
func checkRFC3339(t *testing.T, s string) {
	t.Helper()
	want, err := time.Parse(time.RFC3339, s)
	got, ok := parseRFC3339(s)
	if ok != (err == nil) {
		t.Fatalf("parseRFC3339(%q) ok = %v, time.Parse error = %v", s, ok, err)
	}
	if ok && (got.sec != want.Unix() || got.nsec != int64(want.Nanosecond())) {
		t.Fatalf("parseRFC3339(%q) = %d.%09d, want %d.%09d", s, got.sec, got.nsec, want.Unix(), want.Nanosecond())
	}
}

var rfc3339Seeds = []string{
	"2026-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "0000-01-01T00:00:00Z", "0000-03-01T00:00:00Z",
	"9999-12-31T23:59:59.999999999Z", "2024-02-29T12:00:00+05:30", "2023-02-29T12:00:00Z",
	"2026-04-31T00:00:00Z", "2026-13-01T00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01T00:60:00Z",
	"2026-01-01T00:00:60Z", "2026-01-01T00:00:00.Z", "2026-01-01T00:00:00.1234567890Z",
	"2026-01-01T00:00:00,5Z", "2026-01-01T00:00:00z", "2026-01-01t00:00:00Z", "2026-01-01T00:00:00",
	"2026-01-01T00:00:00+24:00", "2026-01-01T00:00:00-23:59", "2026-01-01T00:00:00+01:60",
	"2026-01-01T00:00:00+0100", "2026-01-01 00:00:00Z", "2026-1-01T00:00:00Z", "yesterday", "",
	"1900-02-29T00:00:00Z", "2000-02-29T00:00:00Z", "2026-01-01T00:00:00ZZ", "+2026-01-01T00:00:00Z",
	"2026-01-01T00:00:00.5-00:00", "0000-01-01T0:00:00Z", "0000-01-01T0:00:00+00:70", "2026-01-01T00:00:00+24:60", "2026-01-01T00:00:00+25:00", "2026-01-01T00:00:00\u00a0Z",
}

func TestParseRFC3339MatchesTime(t *testing.T) {
	for _, s := range rfc3339Seeds {
		checkRFC3339(t, s)
	}
	// Every day of a leap and a common year around the epoch and far off.
	for _, y := range []int{1, 399, 400, 1969, 1970, 2000, 2100, 2400, 9999} {
		for d := time.Date(y, 1, 1, 0, 0, 0, 0, time.UTC); d.Year() == y; d = d.AddDate(0, 0, 1) {
			checkRFC3339(t, d.Format(time.RFC3339))
		}
	}
}

func FuzzParseRFC3339(f *testing.F) {
	for _, s := range rfc3339Seeds {
		f.Add(s)
	}
	f.Fuzz(checkRFC3339)
}
