package main

import (
	"strings"
	"testing"
)

// Fewer than 3 interleaved rounds are refused before anything starts: the
// report's medians and intervals need them.
func TestPairedRounds(t *testing.T) {
	for _, n := range []string{"1", "2", "-1"} {
		_, err := parse([]string{"-paired-rounds", n})
		if err == nil || !strings.Contains(err.Error(), "-paired-rounds "+n) {
			t.Errorf("-paired-rounds %s: err = %v, want it refused by name", n, err)
		}
	}
	for n, want := range map[string]int{"3": 3, "60": 60} {
		o, err := parse([]string{"-paired-rounds", n})
		if err != nil || o.PairedRounds != want {
			t.Errorf("-paired-rounds %s: %d, %v; want %d", n, o.PairedRounds, err, want)
		}
	}
}
