package outcomes

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/allotmesh/allot/control-plane/xds"
)

// TestBootstrapsSplitFlushes: every bootstrap in envoy-configs/ that sends
// outcomes splits a flush at BootstrapPointsPerExport data points an
// export, under MaxPointsPerExport, and a proxy's largest flush in exports
// (MaxFlushExports) fits beside its xDS stream on one connection
// (xds.MaxStreamsPerConnection): Envoy sends a flush's exports at once, and
// those over the connection's limit would go over another connection,
// where allotd refuses them.
func TestBootstrapsSplitFlushes(t *testing.T) {
	if MaxFlushExports+1 > xds.MaxStreamsPerConnection {
		t.Errorf("the largest flush is %d exports, and with the xDS stream %d, over the %d streams one connection carries",
			MaxFlushExports, MaxFlushExports+1, xds.MaxStreamsPerConnection)
	}
	if BootstrapPointsPerExport > MaxPointsPerExport {
		t.Errorf("the bootstraps' %d points an export are over allotd's %d", BootstrapPointsPerExport, MaxPointsPerExport)
	}
	files, err := filepath.Glob("../../envoy-configs/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no bootstraps: %v", err)
	}
	sinks := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "envoy.stat_sinks.open_telemetry") {
			continue
		}
		sinks++
		want := "max_data_points_per_request: " + strconv.Itoa(BootstrapPointsPerExport)
		if !strings.Contains(string(b), want) {
			t.Errorf("%s: its OpenTelemetry sink has no %q", f, want)
		}
	}
	if sinks < 6 {
		t.Errorf("%d bootstraps send outcomes, want the 6 sidecars and gateways", sinks)
	}
}
