// Package deploy holds what installs Allot where meshes run: the Helm chart
// for allotd, the OCI images, and the manifests for Envoy Gateway and Istio,
// with the tests that render, validate and push them. It is a module of its
// own so that Helm's, Kubernetes' and Istio's dependencies stay out of the
// filter's and the control plane's module.
package deploy
