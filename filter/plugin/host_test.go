package plugin

import "testing"

// The properties the README lists as answered by the native module are
// known by meaning, each by its own PropertyID; any other path is
// PropOther, which only a proxy-wasm host answers.
func TestPropertyIDs(t *testing.T) {
	seen := map[PropertyID]string{}
	for _, name := range []string{"request.referer", "request.useragent", "request.id", "request.protocol",
		"request.query", "source.address", "source.port", "destination.address", "destination.port", "connection.id"} {
		id := propertyID(name)
		if id == PropOther || id >= NumProperties {
			t.Errorf("%s: PropertyID %d, want a known one", name, id)
		}
		if other, dup := seen[id]; dup {
			t.Errorf("%s and %s share PropertyID %d", name, other, id)
		}
		seen[id] = name
	}
	if len(seen) != int(NumProperties)-1 {
		t.Errorf("%d names known, want NumProperties-1 = %d", len(seen), NumProperties-1)
	}
	for _, name := range []string{"node.metadata.zone", "upstream.address", "source", "source.address.x"} {
		if id := propertyID(name); id != PropOther {
			t.Errorf("%s: PropertyID %d, want PropOther", name, id)
		}
	}
	a := propertyAttr("ip", "source.address")
	if a.src != srcProperty || a.prop.ID != PropSourceAddress || len(a.prop.Path) != 2 {
		t.Errorf("source.address resolves to %+v", a)
	}
}
