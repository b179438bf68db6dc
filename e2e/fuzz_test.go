//go:build e2e && reliability

package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// fuzzTargets are the project's fuzz targets the reliability suite runs for
// a bounded time: configuration decoders and the admin API's input paths.
var fuzzTargets = []struct{ pkg, name, what string }{
	{"./filter/config", "FuzzParseConfig", "the filter's configuration decoder (Struct wire format and JSON)"},
	{"./filter/config", "FuzzDecodeMatchesProtojson", "the configuration decoder against protojson"},
	{"./filter/abi", "FuzzParsePairs", "the proxy-wasm header-map decoder"},
	{"./filter/engine", "FuzzCompile", "experiment definitions (engine.Compile)"},
	{"./filter/engine", "FuzzCondition", "targeting conditions and attributes"},
	{"./control-plane/admin", "FuzzHTTPWrite", "the admin API's JSON writes (HTTP)"},
	{"./control-plane/admin", "FuzzGRPCWrite", "the admin API's gRPC writes (protobuf wire bytes over a real connection)"},
}

var execsRE = regexp.MustCompile(`execs: (\d+)`)

// deadlineRace reports whether a failed fuzz run's output is only Go's
// fuzzing coordinator missing its own -fuzztime deadline (go.dev/issue/75804,
// fixed in Go 1.27; this module's toolchain is 1.26): the target's only
// failure is "context deadline exceeded" and no failing input was written.
// A crash always writes one.
func deadlineRace(out []byte) bool {
	s := string(out)
	return strings.Contains(s, "\n    context deadline exceeded\n") && !strings.Contains(s, "Failing input written")
}

// TestReliabilityFuzz runs every fuzz target for 15 s: no input may crash it.
func TestReliabilityFuzz(t *testing.T) {
	root := repoPath(t, ".")
	for _, f := range fuzzTargets {
		t.Run(f.name, func(t *testing.T) {
			cmd := exec.Command("go", "test", "-run", "^$", "-fuzz", "^"+f.name+"$", "-fuzztime", "15s", f.pkg)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			if err != nil && deadlineRace(out) {
				t.Logf("%s %s: Go's fuzzing coordinator missed its own deadline (go.dev/issue/75804), no failing input written:\n%s", f.pkg, f.name, out)
			} else if err != nil {
				t.Fatalf("%s %s: %v\n%s", f.pkg, f.name, err, out)
			}
			execs := "?"
			if m := execsRE.FindAllSubmatch(out, -1); len(m) > 0 {
				execs = string(m[len(m)-1][1])
			}
			report(t, "bad_input", fmt.Sprintf("fuzzing %s (%s.%s, 15 s)", f.what, f.pkg, f.name),
				fmt.Sprintf("%s inputs, no crash", execs), 0)
		})
	}
}

// TestReliabilityFuzzDeadlineRace: only a run whose one failure is the
// coordinator's deadline, with no failing input written, is taken for the
// race; a crash is not.
func TestReliabilityFuzzDeadlineRace(t *testing.T) {
	race := "fuzz: elapsed: 16s, execs: 212037 (0/sec)\n--- FAIL: FuzzCompile (15.57s)\n    context deadline exceeded\nFAIL\n"
	crash := "--- FAIL: FuzzCompile (3.01s)\n    --- FAIL: FuzzCompile (0.00s)\n        panic: boom\n    Failing input written to testdata/fuzz/FuzzCompile/1\n    context deadline exceeded\nFAIL\n"
	if !deadlineRace([]byte(race)) {
		t.Error("the coordinator's deadline race not recognized")
	}
	if deadlineRace([]byte(crash)) {
		t.Error("a crash with a failing input written taken for the deadline race")
	}
}
