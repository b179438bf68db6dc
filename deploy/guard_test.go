package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/wire"
)

// guardPattern finds, in a manifest, the regular expression of a filter
// that strips forged assignment headers before Allot's runs: Istio's
// allot.strip_forged and Envoy Gateway's guard.
var guardPattern = regexp.MustCompile(`["']?(x-experiment\([^"'\s]*)["']?`)

// TestGuardsStripWhatTheFilterOwns holds every shipped guard's pattern to
// the filter's own rule (wire.OwnsHeader, with the default header
// names): a header the filter would strip is stripped by the guard while
// the filter is not there, and a header the filter leaves alone reaches
// the service through the guard too. Envoy matches a header name whole
// and in lower case, as the anchored pattern here does.
func TestGuardsStripWhatTheFilterOwns(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("*", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string][]string{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range guardPattern.FindAllStringSubmatch(string(data), -1) {
			seen[m[1]] = append(seen[m[1]], f)
		}
	}
	for _, dir := range []string{"istio", "envoy-gateway"} {
		found := false
		for _, where := range seen {
			for _, f := range where {
				found = found || strings.HasPrefix(f, dir+string(filepath.Separator))
			}
		}
		if !found {
			t.Errorf("no guard pattern (x-experiment(…) in deploy/%s", dir)
		}
	}
	names := []string{
		"x-experiment-a", "x-experiment-checkout-button", "x-experiment-", "x-experiments", "x-experiments-version",
		"x-experimental-flag", "x-experiment", "x-experimentsx", "x-experiments-versions", "x-user-id",
		"experiment-a", "x-experiments-", "x-xexperiment-a",
	}
	for pattern, where := range seen {
		re, err := regexp.Compile("^(?:" + pattern + ")$")
		if err != nil {
			t.Errorf("%s: pattern %q: %v", strings.Join(where, ", "), pattern, err)
			continue
		}
		for _, name := range names {
			if got, want := re.MatchString(name), wire.OwnsHeader(name, wire.DefaultHeaderPrefix, wire.DefaultDictionaryHeader, wire.DefaultVersionHeader); got != want {
				t.Errorf("%s: pattern %q matches %q: %v, but the filter owns it: %v", strings.Join(where, ", "), pattern, name, got, want)
			}
		}
	}
}
