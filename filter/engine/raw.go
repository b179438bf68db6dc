package engine

import "errors"

var errRawNil = errors.New("engine.RawMessage: UnmarshalJSON on nil pointer")

// RawMessage is a JSON value kept as its encoded text: a condition, a
// variation's value, a namespace, a saved group. It marshals and unmarshals
// exactly like encoding/json's RawMessage. The engine has its own type
// because it must not import encoding/json: that package links fmt and os
// into the Wasm module, about 400 KB, and every megabyte of module costs
// Envoy some 16 MiB of RSS at --concurrency 2 (docs/filter-internals.md, Memory).
type RawMessage []byte

// MarshalJSON returns m as the encoding of m, or null when m is nil.
func (m RawMessage) MarshalJSON() ([]byte, error) {
	if m == nil {
		return []byte("null"), nil
	}
	return m, nil
}

// UnmarshalJSON sets *m to a copy of data.
func (m *RawMessage) UnmarshalJSON(data []byte) error {
	if m == nil {
		return errRawNil
	}
	*m = append((*m)[0:0], data...)
	return nil
}
