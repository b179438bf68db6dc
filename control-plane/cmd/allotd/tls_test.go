package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/allotmesh/allot/control-plane/mtls/mtlstest"
)

// TestMainTLSFlags: the TLS flags that only work together are refused
// apart, with the reason, before the store is opened; a complete set
// starts.
func TestMainTLSFlags(t *testing.T) {
	dir := t.TempDir()
	ca := mtlstest.NewCA(t, "allotd")
	cert, key := ca.Server(t).Write(t, dir, "server")
	clientCA, policy := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "identities.json")
	mtlstest.WriteFile(t, clientCA, ca.PEM)
	mtlstest.WriteFile(t, policy, []byte(`{"proxies":[{"identity":"spiffe://allot.test/cluster/{cluster}"}]}`))
	badPolicy := filepath.Join(dir, "bad.json")
	mtlstest.WriteFile(t, badPolicy, []byte(`{"proxies":[{"identity":"x"}]}`))
	for _, tt := range []struct {
		name string
		args []string
		want string // "" starts
	}{
		{"cert without key", []string{"-tls-cert", cert}, "-tls-cert and -tls-key go together"},
		{"client CA without TLS", []string{"-xds-client-ca", clientCA, "-xds-identities", policy}, "need -tls-cert and -tls-key"},
		{"client CA without policy", []string{"-tls-cert", cert, "-tls-key", key, "-xds-client-ca", clientCA}, "-xds-client-ca and -xds-identities go together"},
		{"policy without client CA", []string{"-tls-cert", cert, "-tls-key", key, "-xds-identities", policy}, "-xds-client-ca and -xds-identities go together"},
		{"invalid policy", []string{"-tls-cert", cert, "-tls-key", key, "-xds-client-ca", clientCA, "-xds-identities", badPolicy}, "proxies[0].clusters"},
		{"zero reload interval", []string{"-tls-cert", cert, "-tls-key", key, "-tls-reload", "0s"}, "-tls-reload"},
		{"mutual TLS", []string{"-tls-cert", cert, "-tls-key", key, "-xds-client-ca", clientCA, "-xds-identities", policy}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sub := t.TempDir()
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a start that gets through returns at once
			var stderr bytes.Buffer
			err := Main(ctx, append(writeStartFiles(t, sub, "{}"), tt.args...), io.Discard, &stderr)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Main: %v\n%s", err, stderr.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Main: %v, want an error containing %q", err, tt.want)
			}
			if _, err := os.Stat(filepath.Join(sub, "allot.db")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the store was opened: %v", err)
			}
		})
	}
}
