// Package filterv1 is the Go code generated (make generate) from
// config.proto: the filter configuration contract between allotd and both
// filter artifacts (allot.filter.v1).
package filterv1
