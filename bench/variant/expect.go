package variant

import (
	"fmt"

	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/engine"
)

// HashExpect is GrowthBook's hash v1 of id with seed "bench", split 50/50:
// what the Lua and minimal Wasm filters must add.
func HashExpect(id string) (string, error) {
	n, _ := engine.Hash(benchSeed, id, 1)
	if n < 0.5 {
		return "control", nil
	}
	return "treatment", nil
}

// engineExpect returns the "bench" experiment's variation for id under the
// n-experiment configuration, computed natively by Allot's engine.
func engineExpect(n int) (func(id string) (string, error), error) {
	_, set, err := config.Parse(FilterConfigJSON(n))
	if err != nil {
		return nil, fmt.Errorf("parse the filter config of %d experiments: %w", n, err)
	}
	return func(id string) (string, error) {
		attrs := engine.Attributes{"id": id, "country": "US", "platform": "ios", "version": "2.3.1"}
		for i, a := range set.Assign(nil, attrs) {
			if set.Keys()[i] == "bench" && a.InExperiment {
				return a.Value, nil
			}
		}
		return "", nil
	}, nil
}
