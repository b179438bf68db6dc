package config

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// benchJSON is a configuration of n experiments in the shape the control
// plane sends (variations, coverage, a three-attribute condition).
func benchJSON(n int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"version":"bench","attributes":[{"name":"country","header":"x-country"},` +
		`{"name":"platform","header":"x-platform"}],"experiments":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"key":"exp-%04d","variations":["control","treatment","alt"],"weights":[0.5,0.25,0.25],`+
			`"coverage":0.9,"condition":{"country":{"$in":["US","CA","GB"]},"platform":{"$eq":"ios"}}}`, i)
	}
	sb.WriteString(`]}`)
	return []byte(sb.String())
}

// benchStruct is benchJSON(n) as the Struct encoding Envoy hands the filter.
func benchStruct(b *testing.B, n int) []byte {
	b.Helper()
	var s structpb.Struct
	if err := protojson.Unmarshal(benchJSON(n), &s); err != nil {
		b.Fatal(err)
	}
	data, err := proto.Marshal(&s)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

func benchmarkDecode(b *testing.B, data []byte) {
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeJSON1000(b *testing.B)   { benchmarkDecode(b, benchJSON(1000)) }
func BenchmarkDecodeStruct1000(b *testing.B) { benchmarkDecode(b, benchStruct(b, 1000)) }
