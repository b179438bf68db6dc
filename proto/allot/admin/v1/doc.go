// Package adminv1 is the Go code generated (make generate) from admin.proto:
// the admin API's gRPC service and messages (allot.admin.v1), which the
// HTTP/JSON API mirrors.
package adminv1
