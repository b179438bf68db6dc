package scenario

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/allotmesh/allot/bench/variant"
	"github.com/allotmesh/allot/internal/harness"
)

const (
	// responseExport is the Wasm export that carries the Set-Cookie, which
	// the allot_noresponse build leaves out.
	responseExport = "proxy_on_response_headers"
)

// buildNoResponse builds variant Y's module, Allot's filter with -tags
// allot_noresponse, into p.noRespWasm, and checks that it lacks the
// response export bin/allot.wasm has: otherwise Y would measure nothing.
// It returns the command, for the report.
func buildNoResponse(ctx context.Context, o variant.Options, p *variant.Paths) (string, error) {
	if err := harness.GoBuild(ctx, o.Root, p.NoRespWasm, "./filter", []string{"-buildmode=c-shared", "-trimpath", "-tags", "allot_noresponse"},
		"GOOS=wasip1", "GOARCH=wasm"); err != nil {
		return "", err
	}
	for _, m := range []struct {
		path string
		want bool
	}{{p.AllotWasm, true}, {p.NoRespWasm, false}} {
		b, err := os.ReadFile(m.path)
		if err != nil {
			return "", err
		}
		names, err := wasmExports(b)
		if err != nil {
			return "", fmt.Errorf("%s: %w", m.path, err)
		}
		if slices.Contains(names, responseExport) != m.want {
			return "", fmt.Errorf("%s: exports %s: %v, want %v", m.path, responseExport, !m.want, m.want)
		}
	}
	return "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -trimpath -tags allot_noresponse -o bench/raw/bin/allot-noresponse.wasm ./filter", nil
}

// wasmExports lists the names a WebAssembly module exports (its export
// section, id 7).
func wasmExports(b []byte) ([]string, error) {
	if !bytes.HasPrefix(b, []byte("\x00asm\x01\x00\x00\x00")) {
		return nil, errors.New("not a WebAssembly module (version 1)")
	}
	b = b[8:]
	errShort := errors.New("truncated WebAssembly module")
	uleb := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	for len(b) > 0 {
		id := b[0]
		b = b[1:]
		size, ok := uleb()
		if !ok || size > uint64(len(b)) {
			return nil, errShort
		}
		sec, rest := b[:size], b[size:]
		if id != 7 {
			b = rest
			continue
		}
		b = sec
		count, ok := uleb()
		if !ok {
			return nil, errShort
		}
		var names []string
		for range count {
			n, ok := uleb()
			if !ok || n > uint64(len(b)) {
				return nil, errShort
			}
			names = append(names, string(b[:n]))
			b = b[n:]
			if len(b) < 1 {
				return nil, errShort
			}
			b = b[1:]                 // the kind
			if _, ok := uleb(); !ok { // the index
				return nil, errShort
			}
		}
		return names, nil
	}
	return nil, nil
}
