package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// TestMainClusterGraceFlag: -xds-cluster-grace takes a positive duration
// and refuses anything else, naming the flag.
func TestMainClusterGraceFlag(t *testing.T) {
	for _, tt := range []struct {
		value, want string // want "": starts
	}{
		{"30s", ""},
		{"0s", "-xds-cluster-grace: 0s, want a positive duration"},
		{"-1m", "-xds-cluster-grace: -1m0s, want a positive duration"},
	} {
		t.Run(tt.value, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a start that gets through returns at once
			var stderr bytes.Buffer
			err := Main(ctx, append(writeStartFiles(t, t.TempDir(), "{}"), "-xds-cluster-grace", tt.value), io.Discard, &stderr)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Main: %v\n%s", err, stderr.String())
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Main: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
