package plugin

import (
	"encoding/binary"
	"errors"
	"math"
	"strconv"

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

// maxDepth bounds nesting so hostile input cannot exhaust the stack.
const maxDepth = 64

var errWire = errors.New("malformed google.protobuf.Struct encoding")

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

// decodeStruct decodes an encoded Struct as a jsonx.Object, fields in wire
// order. Strings are made valid UTF-8 as a JSON round trip would make them.
func decodeStruct(b []byte) (jsonx.Object, error) {
	return structObject(b, 0)
}

func structObject(b []byte, depth int) (jsonx.Object, error) {
	if depth > maxDepth {
		return nil, &wireError{"nested deeper than " + strconv.Itoa(maxDepth)}
	}
	obj := jsonx.Object{}
	r := wireReader{b}
	for len(r.b) > 0 {
		num, typ, entry, _, err := r.field()
		if err != nil {
			return nil, err
		}
		if num != 1 || typ != 2 {
			return nil, &wireError{"unexpected Struct field " + strconv.Itoa(num)}
		}
		var key string
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
				key = string(p)
			case n == 2 && t == 2:
				value, hasValue = p, true
			default:
				return nil, &wireError{"unexpected map entry field " + strconv.Itoa(n)}
			}
		}
		var v any
		if hasValue {
			if v, err = structValue(value, depth+1); err != nil {
				return nil, err
			}
		}
		obj = append(obj, jsonx.Member{Key: jsonx.ValidString(key), Value: v})
	}
	return obj, nil
}

func structValue(b []byte, depth int) (any, error) {
	if depth > maxDepth {
		return nil, &wireError{"nested deeper than " + strconv.Itoa(maxDepth)}
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
		return f, nil
	case num == 3 && typ == 2:
		return jsonx.ValidString(string(payload)), nil
	case num == 4 && typ == 0:
		return scalar != 0, nil
	case num == 5 && typ == 2:
		return structObject(payload, depth)
	case num == 6 && typ == 2:
		list := []any{}
		lr := wireReader{payload}
		for len(lr.b) > 0 {
			n, t, item, _, err := lr.field()
			if err != nil {
				return nil, err
			}
			if n != 1 || t != 2 {
				return nil, &wireError{"unexpected ListValue field " + strconv.Itoa(n)}
			}
			v, err := structValue(item, depth+1)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		return list, nil
	}
	return nil, &wireError{"unexpected Value field " + strconv.Itoa(num)}
}
