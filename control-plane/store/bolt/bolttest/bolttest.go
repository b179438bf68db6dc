// Package bolttest opens bbolt stores for tests, closed when the test ends.
//
// It is for tests only; it must not be imported by code that ships.
package bolttest

import (
	"testing"

	"github.com/allotmesh/allot/control-plane/store/bolt"
)

// Open opens the store at path with opts and closes it when the test ends
// (reporting a failed close); closing it earlier is fine.
func Open(t *testing.T, path string, opts ...bolt.Option) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, opts...)
	if err != nil {
		t.Fatalf("open bolt store %s: %v", path, err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close bolt store %s: %v", path, err)
		}
	})
	return db
}
