// Package e2e holds the end-to-end tests: real Envoy from the project venv,
// the control plane and the echo upstream, started and awaited through package
// internal/harness. The tests are behind the e2e build tag:
//
//	go test -tags e2e ./e2e/...
//
// See README.md. Nothing imports this package.
package e2e
