package engine

import (
	"bytes"
	"math"
	"strconv"
	"strings"
)

// This file reproduces the few JavaScript coercions GrowthBook's reference
// SDK relies on (String(x), Number(x), truthiness, ===, <), over the JSON
// value types Attributes hold: nil, string, float64, bool, []any and
// map[string]any.

// formatNumber renders f like JavaScript's Number.prototype.toString:
// 1 → "1", 1.5 → "1.5", 1e21 → "1e+21", 1e-7 → "1e-7".
func formatNumber(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case f == 0:
		return "0"
	case f == math.Trunc(f) && math.Abs(f) < 1e21:
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	var b [32]byte
	return string(appendNumber(b[:0], f))
}

// appendNumber appends the JavaScript rendering of a finite, non-zero f.
func appendNumber(dst []byte, f float64) []byte {
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d.ddde±XX
	i := bytes.IndexByte(e, 'e')
	mant, exp := e[:i], e[i+1:]
	x, _ := strconv.Atoi(string(exp))
	var digits [24]byte
	d := digits[:0]
	for _, c := range mant {
		if c != '.' {
			d = append(d, c)
		}
	}
	k, n := len(d), x+1 // value = 0.d × 10^n
	switch {
	case k <= n && n <= 21:
		dst = append(dst, d...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, d[:n]...)
		dst = append(dst, '.')
		dst = append(dst, d[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, d...)
	default:
		dst = append(dst, d[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, d[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

// jsString is JavaScript's String(v).
func jsString(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return x
	case float64:
		return formatNumber(x)
	case bool:
		if x {
			return "true"
		}
		return "false"
	case []any:
		var sb strings.Builder
		for i, e := range x {
			if i > 0 {
				sb.WriteByte(',')
			}
			if e != nil {
				sb.WriteString(jsString(e))
			}
		}
		return sb.String()
	case map[string]any, Attributes:
		return "[object Object]"
	}
	return ""
}

// jsNumber is JavaScript's Number(v).
func jsNumber(v any) float64 {
	switch x := v.(type) {
	case nil:
		return 0
	case float64:
		return x
	case bool:
		if x {
			return 1
		}
		return 0
	case string:
		return stringToNumber(x)
	case []any:
		return stringToNumber(jsString(x))
	}
	return math.NaN()
}

// stringToNumber is JavaScript's StringToNumber.
func stringToNumber(s string) float64 {
	s = strings.TrimSpace(strings.Trim(s, "\ufeff"))
	switch s {
	case "":
		return 0
	case "Infinity", "+Infinity":
		return math.Inf(1)
	case "-Infinity":
		return math.Inf(-1)
	}
	if len(s) > 2 && s[0] == '0' {
		base := 0
		switch s[1] {
		case 'x', 'X':
			base = 16
		case 'o', 'O':
			base = 8
		case 'b', 'B':
			base = 2
		}
		if base != 0 {
			if strings.IndexByte(s, '_') >= 0 {
				return math.NaN()
			}
			u, err := strconv.ParseUint(s[2:], base, 64)
			if err != nil {
				return math.NaN()
			}
			return float64(u)
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-' {
			return math.NaN()
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return f
		}
		return math.NaN()
	}
	return f
}

// truthy is JavaScript's Boolean(v).
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case float64:
		return x != 0 && !math.IsNaN(x)
	case string:
		return x != ""
	}
	return true
}

// strictEqual is JavaScript's === between an attribute value and a value
// from a definition: objects and arrays are never equal (distinct objects).
func strictEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case string:
		y, ok := b.(string)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	}
	return false
}

// toPrimitive is JavaScript's ToPrimitive for JSON values: arrays and objects
// become strings, everything else is unchanged.
func toPrimitive(v any) any {
	switch v.(type) {
	case []any, map[string]any, Attributes:
		return jsString(v)
	}
	return v
}

// compare evaluates JavaScript's a < b (or a <= b, a > b, a >= b, chosen by
// op). Strings compare by UTF-16 code units, everything else numerically; NaN
// compares false.
func compare(op byte, a, b any) bool {
	a, b = toPrimitive(a), toPrimitive(b)
	if as, ok := a.(string); ok {
		if bs, ok := b.(string); ok {
			return cmpString(op, as, bs)
		}
	}
	x, y := jsNumber(a), jsNumber(b)
	switch op {
	case opLT:
		return x < y
	case opLTE:
		return x <= y
	case opGT:
		return x > y
	default:
		return x >= y
	}
}

// Comparison kinds for compare and versionCond.
const (
	opLT byte = iota
	opLTE
	opGT
	opGTE
	opEQ
	opNE
)

// jsonEqual reports whether JSON.stringify(a) === JSON.stringify(b), except
// that object keys compare regardless of order (Go maps have none).
func jsonEqual(a, b any) bool {
	switch x := a.(type) {
	case nil:
		return b == nil
	case string, bool:
		return a == b
	case float64:
		y, ok := b.(float64)
		if !ok {
			return false
		}
		if math.IsNaN(x) || math.IsInf(x, 0) { // JSON.stringify renders them as null
			return math.IsNaN(y) || math.IsInf(y, 0)
		}
		return x == y
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !jsonEqual(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		return objectEqual(x, b)
	case Attributes:
		return objectEqual(x, b)
	}
	return false
}

func objectEqual(x map[string]any, b any) bool {
	var y map[string]any
	switch t := b.(type) {
	case map[string]any:
		y = t
	case Attributes:
		y = t
	default:
		return false
	}
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		w, ok := y[k]
		if !ok || !jsonEqual(v, w) {
			return false
		}
	}
	return true
}

// typeName is the reference's getType: "null", "array", "string", "number",
// "boolean" or "object".
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case []any:
		return "array"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case map[string]any, Attributes:
		return "object"
	}
	return "unknown"
}

// appendPaddedVersion appends the reference's paddedVersionString(v): a
// leading "v" and any "+build" suffix removed, split on "-" and ".", "~"
// appended to a plain x.y.z, numeric parts left-padded to five characters,
// joined with "-". Padded strings compare like the versions they encode.
func appendPaddedVersion(dst []byte, v any) []byte {
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case float64:
		s = formatNumber(x)
	}
	if s == "" {
		s = "0"
	}
	if s[0] == 'v' {
		s = s[1:]
	}
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	parts := 1
	for i := 0; i < len(s); i++ {
		if s[i] == '-' || s[i] == '.' {
			parts++
		}
	}
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '-' && s[i] != '.' {
			continue
		}
		dst = appendVersionPart(dst, s[start:i], start > 0)
		start = i + 1
	}
	if parts == 3 {
		dst = append(dst, '-', '~')
	}
	return dst
}

// appendVersionPart appends one '.'- or '-'-separated part of a version as
// GrowthBook's paddedVersionString writes it: after a '-' unless it is the
// first, left-padded with spaces to 5 characters when it is all digits.
func appendVersionPart(dst []byte, part string, sep bool) []byte {
	if sep {
		dst = append(dst, '-')
	}
	numeric := part != ""
	for j := 0; j < len(part); j++ {
		if part[j] < '0' || part[j] > '9' {
			numeric = false
			break
		}
	}
	if numeric {
		for j := len(part); j < 5; j++ {
			dst = append(dst, ' ')
		}
	}
	return append(dst, part...)
}
