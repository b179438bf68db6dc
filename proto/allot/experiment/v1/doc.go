// Package experimentv1 is the Go code generated (make generate) from
// experiment.proto: the experiment resource owners write (allot.experiment.v1).
package experimentv1
