package config

import (
	"bytes"
	"errors"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/internal/jsonx"
)

// The decoder follows protojson (google.golang.org/protobuf/encoding/protojson,
// Unmarshal with default options) field by field, as FuzzDecodeMatchesProtojson
// checks:
//
//   - a field is named by its proto3 JSON name or its proto field name,
//     exactly; any other name is an unknown field, and a field given twice
//     (under either name) is an error;
//   - null leaves a field unset, except a field of google.protobuf.Values
//     (variations: protojson reads null as a Value, which a repeated field
//     cannot take);
//   - int32 and int64 fields take integral numbers (1, 1.0, 1e2) or strings
//     holding one, in range; double fields numbers, numeric strings, "NaN",
//     "Infinity" and "-Infinity"; bool fields true and false; the enum its
//     value names or an int32 number (unknown numbers are kept for Check);
//   - repeated fields take an array without nulls (except of Values), a map
//     an object; Struct an object, ListValue an array, Value any JSON, none
//     with duplicate keys or numbers beyond a double, nested at most
//     recursionLimit messages deep.
//
// Deliberately unlike protojson, it reads JSON text by RFC 8259 (protojson's
// tokenizer takes an exponent without digits before a delimiter, {"cacheSize":1e},
// as 1), and it rejects an experiment field the control
// plane keeps for itself (experimentFields' reject) when it carries a value,
// and ranges that are not arrays of numbers (the engine's type).

// recursionLimit is protojson's bound on nested messages
// (protowire.DefaultRecursionLimit): the FilterConfig is at depth 1, an
// experiment at 2, its condition at 3 and every google.protobuf.Value one
// deeper than the Struct or ListValue holding it.
const recursionLimit = 10000

// maxNesting bounds the parsers' nesting (JSON containers, Struct encoding
// levels) just above anything recursionLimit admits, so that the mapping,
// not a parser, reports a configuration nested too deep, with its field.
const maxNesting = recursionLimit + 2

// wrapped is an error with context, as fmt.Errorf("%s: %w", msg, err) makes
// it (the filter does not link fmt).
type wrapped struct {
	msg string
	err error
}

func (e *wrapped) Error() string { return e.msg + ": " + e.err.Error() }
func (e *wrapped) Unwrap() error { return e.err }

// decode decodes FilterConfig from either form Decode accepts:
// the Struct's protobuf encoding, or JSON text. Empty input is the empty
// configuration.
func decode(data []byte) (Filter, error) {
	var obj jsonx.Object
	if o, err := decodeStructLazy(data); err == nil {
		obj = o
	} else if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return Filter{}, &wrapped{"decode filter configuration: neither a google.protobuf.Struct nor JSON", err}
	} else {
		v, err := jsonx.ParseStrict(data, maxNesting)
		if err != nil {
			return Filter{}, &wrapped{"decode filter configuration", err}
		}
		obj = v.(jsonx.Object) // the text starts with '{'
	}
	return mapFilter(obj)
}

// mapFilter maps a parsed FilterConfig onto Filter.
func mapFilter(obj jsonx.Object) (Filter, error) {
	var d decoder
	var f Filter
	d.message(obj, filterFields, &f)
	return f, errors.Join(d.errs...)
}

// decoder collects every problem as an *engine.FieldError, with the path
// of the value being decoded, which it keeps as a stack of steps and
// renders only for an error.
type decoder struct {
	errs []error
	path []step
	buf  []byte // value's scratch: each value is then copied out at its size
}

// step is one step of a field path: an object member's name, or, at >= 0,
// an array index.
type step struct {
	name string
	at   int
}

// push enters an object member (at -1) or an array element (name ""),
// pop leaves it. Not inlined: inlined at its eight calls, the append costs
// the Wasm module 3 KB.
//
//go:noinline
func (d *decoder) push(name string, at int) { d.path = append(d.path, step{name, at}) }
func (d *decoder) pop()                     { d.path = d.path[:len(d.path)-1] }

func (d *decoder) fail(msg string) {
	d.errs = append(d.errs, &engine.FieldError{Path: d.pathString(), Message: msg})
}

// pathString renders the path, as experiments[2].condition."a b": members
// by name, quoted unless a plain identifier, indexes in brackets.
func (d *decoder) pathString() string {
	var b []byte
	for i, s := range d.path {
		if s.at >= 0 {
			b = append(strconv.AppendInt(append(b, '['), int64(s.at), 10), ']')
			continue
		}
		if i > 0 {
			b = append(b, '.')
		}
		b = appendName(b, s.name)
	}
	return string(b)
}

// appendName appends a member name, quoted unless it is a plain identifier.
func appendName(b []byte, name string) []byte {
	plain := name != ""
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			plain = false
		}
	}
	if !plain {
		return strconv.AppendQuote(b, name)
	}
	return append(b, name...)
}

// message decodes the members of an object into m (see set) by fields.
func (d *decoder) message(v any, fields []field, m any) {
	obj, ok := v.(jsonx.Object)
	if !ok {
		d.fail("want an object")
		return
	}
	var seen uint64 // by field index
	oneof := ""     // the oneof member set
	for _, mem := range obj {
		i := 0
		for i < len(fields) && mem.Key != fields[i].json && mem.Key != fields[i].proto {
			i++
		}
		if i == len(fields) {
			msg := "unknown field"
			for _, f := range fields {
				if strings.EqualFold(mem.Key, f.json) || strings.EqualFold(mem.Key, f.proto) {
					msg += " (names are case-sensitive: " + strconv.Quote(f.json) + ")"
					break
				}
			}
			d.push(mem.Key, -1)
			d.fail(msg)
			d.pop()
			continue
		}
		f := &fields[i]
		dup := seen&(1<<i) != 0
		seen |= 1 << i
		d.push(f.json, -1)
		switch {
		case dup:
			d.fail("given twice")
		case mem.Value == nil && f.kind != kindValue:
			// null: unset, except for a google.protobuf.Value (variations, where it is an error)
		case f.oneof && oneof != "":
			d.fail("only one of header, cookie, query or property may be set, and " + oneof + " is")
		default:
			if f.oneof {
				oneof = f.json
			}
			if f.reject != "" {
				d.rejectSet(f, mem.Value)
			} else {
				d.set(m, f.json, mem.Value) // known: TestDecoderCoversDescriptors
			}
		}
		d.pop()
	}
}

// arrayLen is the length of an array, as list reads it; 0 for anything
// else.
func arrayLen(v any) int {
	switch x := v.(type) {
	case []any:
		return len(x)
	case lazyList:
		return len(x.items)
	}
	return 0
}

// list calls each with every element of an array, its index on the path:
// a []any, or a lazyList whose items are decoded one at a time.
func (d *decoder) list(v any, each func(i int, x any)) {
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			d.push("", i)
			each(i, e)
			d.pop()
		}
	case lazyList:
		for i := range x.items {
			d.push("", i)
			if e, err := x.item(i); err != nil { // validated already: not expected
				d.errs = append(d.errs, &wrapped{d.pathString(), err})
			} else {
				each(i, e)
			}
			d.pop()
		}
	default:
		d.fail("want an array")
	}
}

// rejectSet checks a field the filter configuration must leave at its
// default value: it must have its type, and any other value is an error
// naming the field. A timestamp or a message is rejected without parsing
// it.
func (d *decoder) rejectSet(f *field, v any) {
	n := len(d.errs)
	set := true
	switch {
	case f.repeated: // of strings or messages: any element is a value
		set = false
		d.list(v, func(_ int, x any) {
			if f.kind == kindString {
				d.str(x)
			}
			set = true
		})
	case f.kind == kindString:
		set = d.str(v) != ""
	case f.kind == kindInt64:
		set = d.integer(v, 64) != 0
	}
	if set && len(d.errs) == n {
		d.fail("not part of the filter configuration (" + f.reject + ")")
	}
}
