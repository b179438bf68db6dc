package admin

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/control-plane/translate"
)

// Code classifies an admin API error independently of the transport.
type Code string

// Error codes. HTTPStatus maps each to exactly one HTTP status and toStatus
// to exactly one gRPC code. CodeFailedPrecond is a status transition that is
// not allowed (starting a stopped experiment).
const (
	CodeInvalid          Code = "invalid_argument"
	CodeNotFound         Code = "not_found"
	CodeExists           Code = "already_exists"
	CodeConflict         Code = "aborted"
	CodeFailedPrecond    Code = "failed_precondition"
	CodeUnauthenticated  Code = "unauthenticated"
	CodePermissionDenied Code = "permission_denied"
	CodeTooLarge         Code = "payload_too_large"
	CodeUnavailable      Code = "unavailable"
	CodeInternal         Code = "internal"
)

// Error is the admin API's one error type: a code, a message for people and,
// for invalid input, every field error.
type Error struct {
	Code    Code     `json:"code"`
	Message string   `json:"message"`
	Details []string `json:"details,omitempty"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

func errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// toError turns any error into an *Error: store sentinels and
// translate.Validate's field errors keep their meaning, anything unknown becomes a generic internal error (the caller
// logs the detail; it is never sent to clients).
func toError(err error) *Error {
	var (
		e   *Error
		inv *translate.ValidationError
	)
	switch {
	case errors.As(err, &e):
		return e
	case errors.As(err, &inv):
		return &Error{Code: CodeInvalid, Message: "invalid experiment", Details: inv.Details}
	case errors.Is(err, store.ErrNotFound):
		return &Error{Code: CodeNotFound, Message: "experiment not found"}
	case errors.Is(err, store.ErrExists):
		return &Error{Code: CodeExists, Message: "experiment already exists"}
	case errors.Is(err, store.ErrConflict):
		return &Error{Code: CodeConflict, Message: "revision conflict: the experiment changed since it was read; get it again and retry"}
	case errors.Is(err, store.ErrInvalid):
		return &Error{Code: CodeInvalid, Message: err.Error()}
	case errors.Is(err, store.ErrUnavailable):
		// The store names itself and why (no quorum, unreachable); the
		// caller may retry, and a write may or may not have committed.
		return &Error{Code: CodeUnavailable, Message: err.Error()}
	}
	return &Error{Code: CodeInternal, Message: "internal error"}
}

// HTTPStatus is the one mapping from error codes to HTTP status codes.
func HTTPStatus(c Code) int {
	switch c {
	case CodeInvalid:
		return http.StatusBadRequest
	case CodeNotFound:
		return http.StatusNotFound
	case CodeExists, CodeConflict, CodeFailedPrecond:
		return http.StatusConflict
	case CodeUnauthenticated:
		return http.StatusUnauthorized
	case CodePermissionDenied:
		return http.StatusForbidden
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// toStatus is the gRPC transport's single exit for errors and the one
// mapping from error codes to gRPC codes. The status message is the Error's
// message followed by its details; invalid input also carries every field
// error as a google.rpc.BadRequest field violation. Unknown errors are
// logged here and reach the client only as "internal error".
func toStatus(log *slog.Logger, method string, err error) error {
	e := toError(err)
	var c codes.Code
	switch e.Code {
	case CodeInvalid:
		c = codes.InvalidArgument
	case CodeNotFound:
		c = codes.NotFound
	case CodeExists:
		c = codes.AlreadyExists
	case CodeConflict:
		c = codes.Aborted
	case CodeFailedPrecond:
		c = codes.FailedPrecondition
	case CodeUnauthenticated:
		c = codes.Unauthenticated
	case CodePermissionDenied:
		c = codes.PermissionDenied
	case CodeTooLarge:
		c = codes.ResourceExhausted
	case CodeUnavailable:
		c = codes.Unavailable
	default:
		c = codes.Internal
		log.Error("admin request failed", "transport", "grpc", "method", method, "error", err.Error())
	}
	msg := e.Message
	if len(e.Details) > 0 {
		msg += ": " + strings.Join(e.Details, "; ")
	}
	st := status.New(c, msg)
	if e.Code != CodeInvalid || len(e.Details) == 0 {
		return st.Err()
	}
	br := &errdetails.BadRequest{}
	for _, d := range e.Details {
		field, desc, ok := strings.Cut(d, ": ")
		if !ok {
			field, desc = "", d
		}
		br.FieldViolations = append(br.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: field, Description: desc})
	}
	if withDetails, err := st.WithDetails(br); err == nil {
		st = withDetails
	}
	return st.Err()
}
