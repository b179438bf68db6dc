package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// TestMainXDSFlags: -xds-cluster-grace takes a positive duration and
// -xds-max-streams a positive number; each refuses anything else, naming
// the flag.
func TestMainXDSFlags(t *testing.T) {
	for _, tt := range []struct {
		flag, value, want string // want "": starts
	}{
		{"-xds-cluster-grace", "30s", ""},
		{"-xds-cluster-grace", "0s", "-xds-cluster-grace: 0s, want a positive duration"},
		{"-xds-cluster-grace", "-1m", "-xds-cluster-grace: -1m0s, want a positive duration"},
		{"-xds-max-streams", "10", ""},
		{"-xds-max-streams", "0", "-xds-max-streams: 0, want a positive number"},
		{"-xds-max-streams", "-5", "-xds-max-streams: -5, want a positive number"},
	} {
		t.Run(tt.flag+"="+tt.value, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a start that gets through returns at once
			var stderr bytes.Buffer
			err := Main(ctx, append(writeStartFiles(t, t.TempDir(), "{}"), tt.flag, tt.value), io.Discard, &stderr)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Main: %v\n%s", err, stderr.String())
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Main: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
