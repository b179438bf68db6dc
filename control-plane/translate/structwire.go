package translate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/anypb"

	filterv1 "github.com/allotmesh/allot/proto/allot/filter/v1"
)

// structTypeURL is google.protobuf.Struct's type URL in an Any.
const structTypeURL = "type.googleapis.com/google.protobuf.Struct"

// ConfigAny is ConfigStruct packed in an Any, for WasmExtension and
// NativeExtension: the Struct's protobuf encoding is written straight from
// cfg's proto3 JSON, without building the Struct's messages and encoding
// them (a replica rebuilds every cluster after every write; that was most
// of a rebuild). Its fields are in the JSON's order, so the same cfg gives
// the same bytes.
func ConfigAny(cfg *filterv1.FilterConfig) (*anypb.Any, error) {
	js, err := ConfigJSON(cfg)
	if err != nil {
		return nil, fmt.Errorf("filter config to json: %w", err)
	}
	b, err := jsonToStruct(js)
	if err != nil {
		return nil, fmt.Errorf("filter config to struct: %w", err)
	}
	return &anypb.Any{TypeUrl: structTypeURL, Value: b}, nil
}

// jsonToStruct encodes a JSON object as a google.protobuf.Struct, as
// protojson would decode it into one and proto.Marshal encode it:
//
//	Struct    { map<string, Value> fields = 1; }   // entry: key = 1, value = 2
//	Value     { oneof kind { NullValue null_value = 1; double number_value = 2;
//	            string string_value = 3; bool bool_value = 4;
//	            Struct struct_value = 5; ListValue list_value = 6; } }
//	ListValue { repeated Value values = 1; }
func jsonToStruct(js []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("want a JSON object")
	}
	b, err := structFields(d, nil)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err != io.EOF {
		return nil, errors.New("text after the JSON object")
	}
	return b, nil
}

// structFields appends to b the Struct fields of the object whose '{' d
// just read, through its '}'.
func structFields(d *json.Decoder, b []byte) ([]byte, error) {
	for d.More() {
		t, err := d.Token()
		if err != nil {
			return nil, err
		}
		key, ok := t.(string)
		if !ok {
			return nil, fmt.Errorf("object key %v is not a string", t)
		}
		entry := protowire.AppendTag(nil, 1, protowire.BytesType)
		entry = protowire.AppendString(entry, key)
		v, err := structValue(d)
		if err != nil {
			return nil, err
		}
		entry = protowire.AppendTag(entry, 2, protowire.BytesType)
		entry = protowire.AppendBytes(entry, v)
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, entry)
	}
	if _, err := d.Token(); err != nil { // '}'
		return nil, err
	}
	return b, nil
}

// structValue reads one JSON value from d and returns its Value encoding.
func structValue(d *json.Decoder) ([]byte, error) {
	t, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch v := t.(type) {
	case nil:
		return protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 0), nil
	case json.Number:
		f, err := strconv.ParseFloat(v.String(), 64)
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", v, err)
		}
		return protowire.AppendFixed64(protowire.AppendTag(nil, 2, protowire.Fixed64Type), math.Float64bits(f)), nil
	case string:
		return protowire.AppendString(protowire.AppendTag(nil, 3, protowire.BytesType), v), nil
	case bool:
		return protowire.AppendVarint(protowire.AppendTag(nil, 4, protowire.VarintType), protowire.EncodeBool(v)), nil
	case json.Delim:
		var inner []byte
		var num protowire.Number
		switch v {
		case '{':
			num = 5
			inner, err = structFields(d, nil)
		case '[':
			num = 6
			for err == nil && d.More() {
				var item []byte
				if item, err = structValue(d); err == nil {
					inner = protowire.AppendTag(inner, 1, protowire.BytesType)
					inner = protowire.AppendBytes(inner, item)
				}
			}
			if err == nil {
				_, err = d.Token() // ']'
			}
		default:
			return nil, fmt.Errorf("unexpected %v", v)
		}
		if err != nil {
			return nil, err
		}
		return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), inner), nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", t)
}
