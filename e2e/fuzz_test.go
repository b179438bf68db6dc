//go:build e2e && reliability

package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
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

// TestReliabilityFuzz runs every fuzz target for 15 s: no input may crash it.
func TestReliabilityFuzz(t *testing.T) {
	root := repoPath(t, ".")
	for _, f := range fuzzTargets {
		t.Run(f.name, func(t *testing.T) {
			cmd := exec.Command("go", "test", "-run", "^$", "-fuzz", "^"+f.name+"$", "-fuzztime", "15s", f.pkg)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			if err != nil {
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
