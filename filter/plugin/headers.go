package plugin

import "github.com/allotmesh/allot/filter/wire"

// MaxHeaderBytes is the most bytes of request headers the filter adds to
// one request under c: every experiment assigned its longest variation.
func (c *Config) MaxHeaderBytes() int {
	sum := 0
	for i, key := range c.keys {
		most := 0
		for _, value := range c.values[i] {
			most = max(most, wire.AssignmentHeaderBytes(c.HeaderPrefix, key, value, c.PerExperimentHeaders))
		}
		sum += most
	}
	return wire.HeaderBytes(sum, c.DictionaryHeader, c.VersionHeader, c.Version)
}
