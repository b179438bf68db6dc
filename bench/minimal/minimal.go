// Package minimal is the work every minimal benchmark filter does (variant E
// on the Wasm host, bench/minwasm; variant N on the native host,
// bench/mindynmod): the wire names and the one hash, defined once so the
// variants differ only in their host.
package minimal

// Wire names shared with the benchmark's expectations (bench/variant).
const (
	UnitHeader = "x-user-id"
	Header     = "x-experiment-bench"
	Seed       = "bench"
)

// Variation is GrowthBook's hash v1 of id with seed "bench" split 50/50:
// FNV-1a 32 over id then seed, modulo 1000, below 500 is control.
func Variation(id string) string {
	h := uint32(2166136261)
	for _, s := range [2]string{id, Seed} {
		for i := 0; i < len(s); i++ {
			h ^= uint32(s[i])
			h *= 16777619
		}
	}
	if h%1000 < 500 {
		return "control"
	}
	return "treatment"
}
