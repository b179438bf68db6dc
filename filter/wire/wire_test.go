package wire

import (
	"strconv"
	"testing"
)

func TestSFString(t *testing.T) {
	for in, want := range map[string]string{
		"green":   `"green"`,
		`a"b\c`:   `"a\"b\\c"`,
		"Zoë":     `%"Zo%c3%ab"`,
		"100%\"ü": `%"100%25%22%c3%bc"`,
		"":        `""`,
	} {
		if got := sfString(in); got != want {
			t.Errorf("sfString(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestOwnsHeader(t *testing.T) {
	for name, want := range map[string]bool{
		"x-experiment-checkout": true,
		"X-Experiment-A":        true,
		"x-experiment-":         true,
		"x-experiments":         true,
		"X-EXPERIMENTS":         true,
		"x-experiments-version": true,
		"x-experiments-other":   false,
		"x-experimen":           false,
		"x-user-id":             false,
		"":                      false,
		"cookie":                false,
	} {
		if got := OwnsHeader(name, DefaultHeaderPrefix, DefaultDictionaryHeader, DefaultVersionHeader); got != want {
			t.Errorf("OwnsHeader(%q) = %v, want %v", name, got, want)
		}
	}
	if !OwnsHeader("A-b", "y-", "a-b", "z") || OwnsHeader("a-bc", "y-", "a-b", "z") {
		t.Error("a custom dictionary header is owned by its exact name only")
	}
}

func TestHeaderBytes(t *testing.T) {
	if got, want := DictionaryMember("k", "v"), `, k="v"`; got != want {
		t.Errorf("DictionaryMember = %s, want %s", got, want)
	}
	a := AssignmentHeaderBytes(DefaultHeaderPrefix, "k", "v", false)
	b := AssignmentHeaderBytes(DefaultHeaderPrefix, "k", "v", true)
	if a != len(`, k="v"`) || b != a+len("x-experiment-k")+len("v") {
		t.Errorf("AssignmentHeaderBytes = %d, %d", a, b)
	}
	// x-experiments: k="v" and x-experiments-version: v1
	if got, want := HeaderBytes(a, DefaultDictionaryHeader, DefaultVersionHeader, "v1"),
		len("x-experiments")+len(`k="v"`)+len("x-experiments-version")+len("v1"); got != want {
		t.Errorf("HeaderBytes = %d, want %d", got, want)
	}
	if got := HeaderBytes(0, DefaultDictionaryHeader, DefaultVersionHeader, ""); got != 0 {
		t.Errorf("HeaderBytes of nothing = %d", got)
	}
}

// TestOutcomeMetricRoundTrip: every name OutcomeMetric builds,
// ParseOutcomeMetric reads back, keys with the separators' own words and
// dots included.
func TestOutcomeMetricRoundTrip(t *testing.T) {
	for _, key := range []string{"checkout", "a.b", "x.rev.1.variation.2", "k.response.2xx", "é"} {
		for _, rev := range []int64{0, 1, 31, 32, 33, 1 << 40} {
			for v := range 12 {
				for class := Latency; class < NumClasses; class++ {
					name := OutcomeMetric(key, rev, v, class)
					k, slot, gotV, c, ok := ParseOutcomeMetric(name)
					if !ok || k != key || slot != RevisionSlot(rev) || gotV != v || c != class {
						t.Fatalf("ParseOutcomeMetric(%q) = %q, %d, %d, %d, %v; want %q, %d, %d, %d",
							name, k, slot, gotV, c, ok, key, RevisionSlot(rev), v, class)
					}
				}
			}
		}
	}
}

func TestOutcomeMetricNames(t *testing.T) {
	if got, want := OutcomeMetric("checkout", 33, 1, Class5xx), "allot.experiment.checkout.rev.1.variation.1.response.5xx"; got != want {
		t.Errorf("OutcomeMetric = %s, want %s", got, want)
	}
	if got, want := OutcomeMetric("checkout", 2, 0, Latency), "allot.experiment.checkout.rev.2.variation.0.response_time_ms"; got != want {
		t.Errorf("OutcomeMetric(Latency) = %s, want %s", got, want)
	}
	if got, want := StatName(MetricEvaluated), "wasmcustom.allot.requests_evaluated"; got != want {
		t.Errorf("StatName = %s, want %s", got, want)
	}
	for _, name := range []string{
		"", "allot.requests_evaluated", VariationMetric("checkout", 1),
		"allot.experiment.checkout.rev.1.variation.1.response.6xx",
		"allot.experiment.checkout.rev.1.variation.01.response.2xx",
		"allot.experiment.checkout.rev.32.variation.1.response.2xx",
		"allot.experiment.checkout.rev.1.variation.-1.response.2xx",
		"allot.experiment..rev.1.variation.1.response.2xx",
		"allot.experiment.checkout.variation.1.response.2xx",
		"allot.experiment.checkout.rev.1.variation.1.response_time_ms.x",
		StatName(OutcomeMetric("checkout", 1, 1, Class2xx)),
	} {
		if _, _, _, _, ok := ParseOutcomeMetric(name); ok {
			t.Errorf("ParseOutcomeMetric(%q) ok", name)
		}
	}
}

func TestStatusClass(t *testing.T) {
	for status, want := range map[string]int{
		"200": Class2xx, "204": Class2xx, "301": Class3xx, "404": Class4xx, "503": Class5xx,
		"101": ClassOther, "": ClassOther, "2xx": ClassOther, "2000": ClassOther, "600": ClassOther,
	} {
		if got := StatusClass(status); got != want {
			t.Errorf("StatusClass(%q) = %d, want %d", status, got, want)
		}
	}
	for c := range NumClasses {
		if ClassName(c) == "" {
			t.Errorf("class %d has no name", c)
		}
	}
	if RevisionSlot(-1) >= RevisionSlots || RevisionSlot(RevisionSlots+3) != 3 {
		t.Error("RevisionSlot out of range")
	}
	if len(LatencyBounds) != 19 || strconv.FormatFloat(LatencyBounds[0], 'g', -1, 64) != "0.5" {
		t.Error("LatencyBounds are not Envoy's default buckets")
	}
}
