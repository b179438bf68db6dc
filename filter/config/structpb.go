package config

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/allotmesh/allot/filter/internal/jsonx"
)

// Envoy hands a google.protobuf.Struct plugin configuration to
// on_configure as its protobuf wire encoding (the Any's value bytes), not as
// JSON. decodeStruct decodes that encoding straight to the values jsonx
// parses JSON to, with the standard library only, so the Wasm binary links
// no protobuf runtime and builds no intermediate JSON text.
//
// The messages (google/protobuf/struct.proto):
//
//	Struct    { map<string, Value> fields = 1; }   // entry: key = 1, value = 2
//	Value     { oneof kind { NullValue null_value = 1; double number_value = 2;
//	            string string_value = 3; bool bool_value = 4;
//	            Struct struct_value = 5; ListValue list_value = 6; } }
//	ListValue { repeated Value values = 1; }

var errWire = errors.New("malformed google.protobuf.Struct encoding")

// errUTF8 is a string that is not UTF-8, which proto3 strings must be (as
// in JSON text, the decoder rejects it rather than repair it).
var errUTF8 = &wireError{"invalid UTF-8 in a string"}

// wireError is errWire with a detail.
type wireError struct{ detail string }

func (e *wireError) Error() string { return errWire.Error() + ": " + e.detail }
func (e *wireError) Unwrap() error { return errWire }

type wireReader struct{ b []byte }

func (r *wireReader) varint() (uint64, error) {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		return 0, errWire
	}
	r.b = r.b[n:]
	return v, nil
}

// field reads a tag and returns the field number, wire type and, for
// length-delimited fields, the payload.
func (r *wireReader) field() (num int, typ int, payload []byte, scalar uint64, err error) {
	tag, err := r.varint()
	if err != nil {
		return 0, 0, nil, 0, err
	}
	num, typ = int(tag>>3), int(tag&7)
	switch typ {
	case 0:
		scalar, err = r.varint()
	case 1:
		if len(r.b) < 8 {
			return 0, 0, nil, 0, errWire
		}
		scalar = binary.LittleEndian.Uint64(r.b)
		r.b = r.b[8:]
	case 2:
		var n uint64
		if n, err = r.varint(); err == nil {
			if n > uint64(len(r.b)) {
				return 0, 0, nil, 0, errWire
			}
			payload, r.b = r.b[:n], r.b[n:]
		}
	case 5:
		if len(r.b) < 4 {
			return 0, 0, nil, 0, errWire
		}
		scalar = uint64(binary.LittleEndian.Uint32(r.b))
		r.b = r.b[4:]
	default:
		return 0, 0, nil, 0, &wireError{"wire type " + strconv.Itoa(typ)}
	}
	return num, typ, payload, scalar, err
}

// decodeMode says how much of the encoding the decoder materializes.
type decodeMode uint8

const (
	build decodeMode = iota // every value as jsonx values
	check                   // the encoding only validated: no allocation, no value to use
	// lazy is build, except that a ListValue directly under the top-level
	// Struct (experiments, attributes) is validated and kept encoded, as a
	// lazyList: on_configure then holds one experiment's values at a time,
	// not the whole configuration's (about 2 MiB of VM memory with 1,000
	// experiments, which Wasm never gives back).
	lazy
)

// lazyList is a validated ListValue whose items are still encoded Values;
// item decodes one.
type lazyList struct {
	items [][]byte
	depth int // of the items
}

func (l lazyList) item(i int) (any, error) { return structValue(l.items[i], l.depth, build) }

// decodeStruct decodes an encoded Struct as a jsonx.Object, fields in wire
// order.
func decodeStruct(b []byte) (jsonx.Object, error) {
	return structObject(b, 0, build)
}

// decodeStructLazy is decodeStruct with the top-level lists kept encoded;
// it rejects exactly the encodings decodeStruct rejects.
func decodeStructLazy(b []byte) (jsonx.Object, error) {
	return structObject(b, 0, lazy)
}

func structObject(b []byte, depth int, mode decodeMode) (jsonx.Object, error) {
	if depth > maxNesting {
		return nil, &wireError{"nested deeper than " + strconv.Itoa(maxNesting)}
	}
	var obj jsonx.Object
	if mode != check {
		obj = make(jsonx.Object, 0, fieldCount(b))
	}
	r := wireReader{b}
	for len(r.b) > 0 {
		num, typ, entry, _, err := r.field()
		if err != nil {
			return nil, err
		}
		if num != 1 || typ != 2 {
			return nil, &wireError{"unexpected Struct field " + strconv.Itoa(num)}
		}
		var key []byte
		var value []byte
		hasValue := false
		er := wireReader{entry}
		for len(er.b) > 0 {
			n, t, p, _, err := er.field()
			if err != nil {
				return nil, err
			}
			switch {
			case n == 1 && t == 2:
				if !utf8.Valid(p) {
					return nil, errUTF8
				}
				key = p
			case n == 2 && t == 2:
				value, hasValue = p, true
			default:
				return nil, &wireError{"unexpected map entry field " + strconv.Itoa(n)}
			}
		}
		var v any
		if hasValue {
			if mode == lazy && depth == 0 {
				v, err = lazyValue(value, depth+1)
			} else {
				v, err = structValue(value, depth+1, mode)
			}
			if err != nil {
				return nil, err
			}
		}
		if mode != check {
			obj = append(obj, jsonx.Member{Key: string(key), Value: v})
		}
	}
	return obj, nil
}

// lazyValue decodes a Value, except that a ListValue is only validated and
// returned as a lazyList.
func lazyValue(b []byte, depth int) (any, error) {
	r := wireReader{b}
	num, typ, payload, _, err := r.field()
	if err != nil || len(r.b) != 0 || num != 6 || typ != 2 || depth > maxNesting {
		return structValue(b, depth, build) // not a list: decoded (or rejected) as usual
	}
	l := lazyList{depth: depth + 1}
	err = listItems(payload, func(item []byte) error {
		_, err := structValue(item, l.depth, check)
		l.items = append(l.items, item)
		return err
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// fieldCount is the number of fields of an encoded message, to size the
// slice its decoding appends to (the decoding rejects a malformed one).
func fieldCount(b []byte) int {
	r := wireReader{b}
	n := 0
	for len(r.b) > 0 {
		if _, _, _, _, err := r.field(); err != nil {
			break
		}
		n++
	}
	return n
}

// listItems calls each with every encoded Value of an encoded ListValue.
func listItems(b []byte, each func(item []byte) error) error {
	r := wireReader{b}
	for len(r.b) > 0 {
		n, t, item, _, err := r.field()
		if err != nil {
			return err
		}
		if n != 1 || t != 2 {
			return &wireError{"unexpected ListValue field " + strconv.Itoa(n)}
		}
		if err := each(item); err != nil {
			return err
		}
	}
	return nil
}

func structValue(b []byte, depth int, mode decodeMode) (any, error) {
	if depth > maxNesting {
		return nil, &wireError{"nested deeper than " + strconv.Itoa(maxNesting)}
	}
	r := wireReader{b}
	if len(r.b) == 0 {
		return nil, nil // a Value with no kind set
	}
	num, typ, payload, scalar, err := r.field()
	if err != nil {
		return nil, err
	}
	if len(r.b) != 0 {
		return nil, &wireError{"Value with more than one kind"}
	}
	switch {
	case num == 1 && typ == 0:
		return nil, nil
	case num == 2 && typ == 1:
		f := math.Float64frombits(scalar)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, &wireError{"number " + strconv.FormatFloat(f, 'g', -1, 64) + " has no JSON form"}
		}
		if mode == check { // boxing f would allocate
			return nil, nil
		}
		return f, nil
	case num == 3 && typ == 2:
		if !utf8.Valid(payload) {
			return nil, errUTF8
		}
		if mode == check {
			return nil, nil
		}
		return string(payload), nil
	case num == 4 && typ == 0:
		return scalar != 0, nil
	case num == 5 && typ == 2:
		obj, err := structObject(payload, depth, mode)
		if mode == check || err != nil {
			return nil, err
		}
		return obj, nil
	case num == 6 && typ == 2:
		var list []any
		if mode != check {
			list = make([]any, 0, fieldCount(payload))
		}
		err := listItems(payload, func(item []byte) error {
			v, err := structValue(item, depth+1, mode)
			if mode != check {
				list = append(list, v)
			}
			return err
		})
		if mode == check || err != nil {
			return nil, err
		}
		return list, nil
	}
	return nil, &wireError{"unexpected Value field " + strconv.Itoa(num)}
}
