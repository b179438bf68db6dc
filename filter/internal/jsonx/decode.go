package jsonx

import "math"

// TypeError is a value of the wrong type for the field at Path.
type TypeError struct {
	Path string
	Want string // "a string", "an array of numbers", ...
}

// Error implements error as "path: want ...".
func (e *TypeError) Error() string { return e.Path + ": want " + e.Want }

// Decoder stores parsed values into typed Go fields by encoding/json's
// rules: null leaves a scalar unchanged and sets a pointer or slice to nil,
// null array elements decode as zero values. Every mismatch is recorded in
// Errs as a *TypeError and leaves the field unchanged.
type Decoder struct {
	Errs []error
}

func (d *Decoder) fail(path, want string) { d.Errs = append(d.Errs, &TypeError{path, want}) }

// Int reports whether v is an integral number in int64's range, and its
// value. (encoding/json also rejects integral literals like 1.0 and 1e2;
// Struct numbers are always doubles, so Decoder accepts them.)
func Int(v any) (int, bool) {
	f, ok := v.(float64)
	if !ok || f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return 0, false
	}
	return int(f), true
}

// String decodes a string.
func (d *Decoder) String(path string, v any, dst *string) {
	if v == nil {
		return
	}
	if s, ok := v.(string); ok {
		*dst = s
		return
	}
	d.fail(path, "a string")
}

// Int decodes an integer.
func (d *Decoder) Int(path string, v any, dst *int) {
	if v == nil {
		return
	}
	if n, ok := Int(v); ok {
		*dst = n
		return
	}
	d.fail(path, "an integer")
}

func floats(v any) ([]float64, bool) {
	arr, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]float64, len(arr))
	for i, e := range arr {
		if e == nil {
			continue
		}
		if out[i], ok = e.(float64); !ok {
			return nil, false
		}
	}
	return out, true
}

// FloatMatrix decodes an array of arrays of numbers.
func (d *Decoder) FloatMatrix(path string, v any, dst *[][]float64) {
	if v == nil {
		*dst = nil
		return
	}
	arr, ok := v.([]any)
	if ok {
		out := make([][]float64, len(arr))
		for i, e := range arr {
			if e == nil {
				continue
			}
			if out[i], ok = floats(e); !ok {
				break
			}
		}
		if ok {
			*dst = out
			return
		}
	}
	d.fail(path, "an array of arrays of numbers")
}
