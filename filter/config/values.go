package config

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/internal/jsonx"
)

// Values: each reader takes one JSON value as its field's kind wants it,
// or records why it cannot.

func (d *decoder) str(v any) string {
	s, ok := v.(string)
	if !ok {
		d.fail("want a string")
	}
	return s
}

func (d *decoder) boolean(v any) bool {
	b, ok := v.(bool)
	if !ok {
		d.fail("want true or false")
	}
	return b
}

// integer decodes an int32 or int64 field (bits 32 or 64): a number, or a
// string holding exactly one JSON number, with an integral value in range.
// Numbers from a Struct are doubles; JSON numbers are read exactly, as
// protojson reads them.
func (d *decoder) integer(v any, bits int) int64 {
	var n int64
	var err error
	switch x := v.(type) {
	case float64:
		lim := math.Ldexp(1, bits-1)
		switch {
		case x != math.Trunc(x):
			err = strconv.ErrSyntax
		case x < -lim || x >= lim:
			err = strconv.ErrRange
		default:
			n = int64(x)
		}
	case jsonx.Number:
		n, err = intLiteral(string(x), bits)
	case string:
		err = strconv.ErrSyntax
		if jsonx.ValidNumber(x) {
			n, err = intLiteral(x, bits)
		}
	default:
		err = strconv.ErrSyntax
	}
	switch err {
	case nil:
		return n
	case strconv.ErrRange:
		d.fail("out of the int" + strconv.Itoa(bits) + " range")
	default:
		d.fail("want an integer")
	}
	return 0
}

// intLiteral reads a valid JSON number literal as an integer of bits bits
// the way protojson does (internal/encoding/json's normalizeToIntString):
// in decimal, exactly, so 1e2 and 1.50e1 are integers and
// 1.0000000000000000001 is not. The error is strconv.ErrSyntax for a value
// that is not integral, strconv.ErrRange for one out of range.
func intLiteral(lit string, bits int) (int64, error) {
	s, neg := strings.CutPrefix(lit, "-")
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intp, s := strings.TrimPrefix(s[:i], "0"), s[i:] // a leading 0 is the whole part
	frac := ""
	if strings.HasPrefix(s, ".") {
		i = 1
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		frac, s = strings.TrimRight(s[1:i], "0"), s[i:]
	}
	if intp == "" && frac == "" {
		return 0, nil
	}
	exp := 0
	if s != "" { // e or E, then the exponent
		e, err := strconv.ParseInt(s[1:], 10, 32)
		if err != nil {
			if s[1] == '-' {
				return 0, strconv.ErrSyntax
			}
			return 0, strconv.ErrRange
		}
		exp = int(e)
	}
	var digits string
	if exp >= 0 {
		if len(frac) > exp {
			return 0, strconv.ErrSyntax
		}
		if len(intp)+exp > 20 { // beyond any uint64
			return 0, strconv.ErrRange
		}
		digits = intp + frac + strings.Repeat("0", exp-len(frac))
	} else {
		at := len(intp) + exp
		if frac != "" || at < 0 || strings.TrimRight(intp[at:], "0") != "" {
			return 0, strconv.ErrSyntax
		}
		digits = intp[:at]
	}
	if neg {
		digits = "-" + digits
	}
	n, err := strconv.ParseInt(digits, 10, bits)
	if err != nil {
		return 0, strconv.ErrRange
	}
	return n, nil
}

// double decodes a double field: a number, a string holding exactly one
// JSON number, "NaN", "Infinity" or "-Infinity".
func (d *decoder) double(v any) float64 {
	lit := ""
	switch x := v.(type) {
	case float64:
		return x
	case jsonx.Number:
		lit = string(x)
	case string:
		switch x {
		case "NaN":
			return math.NaN()
		case "Infinity":
			return math.Inf(1)
		case "-Infinity":
			return math.Inf(-1)
		}
		if jsonx.ValidNumber(x) {
			lit = x
		}
	}
	if lit == "" {
		d.fail("want a number")
		return 0
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		d.fail(lit + " is out of a double's range")
	}
	return f
}

// enum decodes assignmentHeaders: a value name, or an int32 number. Known
// numbers become names, unknown ones their decimal form (proto3 enums are
// open), which Check rejects. The zero value is "", as when unset.
func (d *decoder) enum(v any) string {
	if s, ok := v.(string); ok {
		switch i := slices.Index(assignmentHeadersNames, s); {
		case i == 0:
			return ""
		case i > 0:
			return s
		}
		d.fail(strconv.Quote(s) + " is not " + AssignmentHeadersAll + ", " + AssignmentHeadersDictionary + " or " + AssignmentHeadersUnspecified)
		return ""
	}
	switch v.(type) {
	case float64, jsonx.Number:
	default:
		d.fail("want an enum value name or number")
		return ""
	}
	n := d.integer(v, 32)
	switch {
	case n == 0:
		return ""
	case n > 0 && n < int64(len(assignmentHeadersNames)):
		return assignmentHeadersNames[n]
	}
	return strconv.FormatInt(n, 10)
}

// savedGroups decodes the map<string, ListValue> of saved groups.
func (d *decoder) savedGroups(v any) map[string]engine.RawMessage {
	obj, ok := v.(jsonx.Object)
	if !ok {
		d.fail("want an object")
		return nil
	}
	var out map[string]engine.RawMessage
	for _, m := range obj {
		d.push(m.Key, -1)
		if _, dup := out[m.Key]; dup {
			d.fail("given twice")
		} else {
			if out == nil {
				out = make(map[string]engine.RawMessage, len(obj))
			}
			out[m.Key] = d.listValue(m.Value, 2)
		}
		d.pop()
	}
	return out
}

// ranges decodes the ListValue of ranges into the engine's type: arrays of
// numbers.
func (d *decoder) ranges(v any) [][]float64 {
	out := [][]float64{}
	d.list(v, func(_ int, x any) {
		var r []float64
		if _, ok := x.([]any); !ok {
			d.fail("want an array of numbers")
		} else {
			d.list(x, func(_ int, n any) {
				switch n.(type) {
				case float64, jsonx.Number:
					r = append(r, d.double(n))
				default:
					d.fail("want a number")
				}
			})
		}
		out = append(out, r)
	})
	return out
}

// structValue is a google.protobuf.Struct at message depth depth, as JSON.
func (d *decoder) structValue(v any, depth int) engine.RawMessage {
	if _, ok := v.(jsonx.Object); !ok {
		d.fail("want an object")
		return nil
	}
	return d.value(v, depth)
}

// listValue is a google.protobuf.ListValue at message depth depth, as JSON.
func (d *decoder) listValue(v any, depth int) engine.RawMessage {
	if _, ok := v.([]any); !ok {
		d.fail("want an array")
		return nil
	}
	return d.value(v, depth)
}

// value is a google.protobuf.Value (or the Struct or ListValue it holds)
// at message depth depth, as JSON; nil when invalid.
func (d *decoder) value(v any, depth int) engine.RawMessage {
	n := len(d.errs)
	d.buf = d.appendValue(d.buf[:0], v, depth)
	if len(d.errs) > n {
		return nil
	}
	return bytes.Clone(d.buf)
}

func (d *decoder) appendValue(b []byte, v any, depth int) []byte {
	if depth > recursionLimit {
		d.fail("nested deeper than " + strconv.Itoa(recursionLimit) + " messages")
		return b
	}
	switch x := v.(type) {
	case jsonx.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			d.fail(string(x) + " is out of a double's range")
			return b
		}
		v = f
	case jsonx.Object:
		var seen map[string]bool // for large objects; small ones are searched
		if len(x) > 16 {
			seen = make(map[string]bool, len(x))
		}
		b = append(b, '{')
		for i, m := range x {
			d.push(m.Key, -1)
			if dup := seen[m.Key] || seen == nil && slices.ContainsFunc(x[:i], func(o jsonx.Member) bool { return o.Key == m.Key }); dup {
				d.fail("given twice")
			} else if seen != nil {
				seen[m.Key] = true
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(jsonx.AppendString(b, m.Key), ':')
			b = d.appendValue(b, m.Value, depth+1)
			d.pop()
		}
		return append(b, '}')
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			d.push("", i)
			b = d.appendValue(b, e, depth+1)
			d.pop()
		}
		return append(b, ']')
	}
	b, err := jsonx.Append(b, v)
	if err != nil { // parsed values always encode
		d.errs = append(d.errs, &wrapped{d.pathString(), err})
	}
	return b
}
