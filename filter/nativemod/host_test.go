//go:build cgo

package nativemod

import (
	"testing"

	"github.com/allotmesh/allot/filter/plugin"
)

// Every property the plugin knows by meaning is one Envoy's dynamic
// modules answer: the native host maps each to an attribute id, and a
// property without one would read as missing under the native module
// only.
func TestEveryPropertyHasAnAttribute(t *testing.T) {
	seen := map[any]plugin.PropertyID{}
	for id := plugin.PropOther + 1; id < plugin.NumProperties; id++ {
		a := attributes[id]
		if !a.ok {
			t.Errorf("PropertyID %d has no Envoy attribute", id)
			continue
		}
		if other, dup := seen[a.id]; dup {
			t.Errorf("PropertyIDs %d and %d map to the same attribute %d", other, id, a.id)
		}
		seen[a.id] = id
	}
	if attributes[plugin.PropOther].ok {
		t.Error("PropOther maps to an attribute")
	}
}
