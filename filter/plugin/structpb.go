package plugin

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Envoy hands a google.protobuf.Struct plugin configuration to
// on_configure as its protobuf wire encoding (the Any's value bytes), not as
// JSON. structToJSON converts that encoding to the equivalent JSON with the
// standard library only, so the Wasm binary links no protobuf runtime.
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
		return 0, 0, nil, 0, fmt.Errorf("%w: wire type %d", errWire, typ)
	}
	return num, typ, payload, scalar, err
}

// structToJSON converts an encoded Struct to a JSON object.
func structToJSON(b []byte) ([]byte, error) {
	return appendStruct(nil, b, 0)
}

func appendStruct(out, b []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", errWire, maxDepth)
	}
	out = append(out, '{')
	r := wireReader{b}
	first := true
	for len(r.b) > 0 {
		num, typ, entry, _, err := r.field()
		if err != nil {
			return nil, err
		}
		if num != 1 || typ != 2 {
			return nil, fmt.Errorf("%w: unexpected Struct field %d", errWire, num)
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
				return nil, fmt.Errorf("%w: unexpected map entry field %d", errWire, n)
			}
		}
		if !first {
			out = append(out, ',')
		}
		first = false
		out = strconv.AppendQuote(out, key)
		out = append(out, ':')
		if !hasValue {
			out = append(out, "null"...)
			continue
		}
		if out, err = appendValue(out, value, depth+1); err != nil {
			return nil, err
		}
	}
	return append(out, '}'), nil
}

func appendValue(out, b []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", errWire, maxDepth)
	}
	r := wireReader{b}
	if len(r.b) == 0 {
		return append(out, "null"...), nil // a Value with no kind set
	}
	num, typ, payload, scalar, err := r.field()
	if err != nil {
		return nil, err
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: Value with more than one kind", errWire)
	}
	switch {
	case num == 1 && typ == 0:
		return append(out, "null"...), nil
	case num == 2 && typ == 1:
		f := math.Float64frombits(scalar)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: number %v has no JSON form", errWire, f)
		}
		return strconv.AppendFloat(out, f, 'g', -1, 64), nil
	case num == 3 && typ == 2:
		s, err := json.Marshal(string(payload))
		if err != nil {
			return nil, err
		}
		return append(out, s...), nil
	case num == 4 && typ == 0:
		return strconv.AppendBool(out, scalar != 0), nil
	case num == 5 && typ == 2:
		return appendStruct(out, payload, depth)
	case num == 6 && typ == 2:
		out = append(out, '[')
		lr := wireReader{payload}
		first := true
		for len(lr.b) > 0 {
			n, t, item, _, err := lr.field()
			if err != nil {
				return nil, err
			}
			if n != 1 || t != 2 {
				return nil, fmt.Errorf("%w: unexpected ListValue field %d", errWire, n)
			}
			if !first {
				out = append(out, ',')
			}
			first = false
			if out, err = appendValue(out, item, depth+1); err != nil {
				return nil, err
			}
		}
		return append(out, ']'), nil
	}
	return nil, fmt.Errorf("%w: unexpected Value field %d", errWire, num)
}
