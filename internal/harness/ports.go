package harness

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
)

var ports struct {
	sync.Mutex
	given map[int]bool
}

// MustFreePort is FreePort that fails the test on error.
func MustFreePort(t testing.TB) int {
	t.Helper()
	return must[int](t)(FreePort())
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for
// configuration that needs a port number before the listener exists (Envoy
// bootstraps, allotd flags). No port is handed out twice in one process.
// Prefer listening on 127.0.0.1:0 directly where the code allows it.
func FreePort() (int, error) {
	ports.Lock()
	defer ports.Unlock()
	if ports.given == nil {
		ports.given = make(map[int]bool)
	}
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("find free port: %w", err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		if err := ln.Close(); err != nil {
			return 0, fmt.Errorf("find free port: close listener: %w", err)
		}
		if !ports.given[port] {
			ports.given[port] = true
			return port, nil
		}
	}
	return 0, errors.New("find free port: 100 attempts returned ports already handed out")
}
