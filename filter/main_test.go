package main

import (
	"runtime/debug"
	"testing"
)

// init reaches the runtime's GC settings without importing runtime/debug.
func TestInitTunesTheRuntime(t *testing.T) {
	if got := debug.SetGCPercent(gcPercent); got != gcPercent {
		t.Errorf("GC percent after init = %d, want %d", got, gcPercent)
	}
	if got := debug.SetMemoryLimit(-1); got != memoryLimit {
		t.Errorf("memory limit after init = %d, want %d", got, memoryLimit)
	}
}
