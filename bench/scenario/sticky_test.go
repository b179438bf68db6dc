package scenario

import (
	"slices"
	"testing"
)

// TestWasmExports reads a module's export names, past the sections before
// and after the export section, and refuses what is not a module.
func TestWasmExports(t *testing.T) {
	mod := []byte("\x00asm\x01\x00\x00\x00")
	mod = append(mod, 1, 4, 1, 0x60, 0, 0) // type section: one func type
	export := []byte{2, 3, 'a', 'b', 'c', 0, 0x80, 0x01, byte(len(responseExport))}
	export = append(append(export, responseExport...), 0, 5)
	mod = append(append(mod, 7, byte(len(export))), export...)
	mod = append(mod, 0, 3, 1, 'x', 9) // a custom section
	got, err := wasmExports(mod)
	if err != nil || !slices.Equal(got, []string{"abc", responseExport}) {
		t.Errorf("exports %q (%v), want abc and %s", got, err, responseExport)
	}
	if got, err := wasmExports(mod[:14]); err != nil || got != nil {
		t.Errorf("a module without exports: %q (%v)", got, err)
	}
	if _, err := wasmExports(mod[:len(mod)-8]); err == nil {
		t.Error("a truncated module read without error")
	}
	if _, err := wasmExports([]byte("\x7fELF")); err == nil {
		t.Error("an ELF file read as a module")
	}
}
