// Package istio holds the manifests that install Allot in an Istio mesh
// (README.md) and the test that decodes each of them strictly and runs
// Istio's own validation on it in-process. It is a module of its own so that
// istio.io/istio's dependencies stay out of the deploy module's and the
// product's.
package istio
