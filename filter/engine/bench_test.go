package engine

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// benchConfig is n experiments with typical targeting: a country list, a
// platform equality and a minimum app version.
func benchConfig(n int) string {
	var sb strings.Builder
	sb.WriteString(`{"experiments":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"key":"exp-%d","variations":["control","treatment","alt"],"weights":[0.5,0.25,0.25],
			"hashVersion":%d,"coverage":0.9,
			"condition":{"country":{"$in":["US","CA","GB","DE","FR","BR"]},"platform":{"$eq":"ios"},"version":{"$vgte":"2.1.0"}}}`,
			i, 1+i%2)
	}
	sb.WriteString(`]}`)
	return sb.String()
}

func benchAttrs(i int) Attributes {
	return Attributes{"id": fmt.Sprintf("user-%d", i), "country": "US", "platform": "ios", "version": "2.3.1"}
}

func benchmarkAssign(b *testing.B, n int) {
	s := mustCompile(b, benchConfig(n))
	attrs := make([]Attributes, 64)
	for i := range attrs {
		attrs[i] = benchAttrs(i)
	}
	dst := make([]Assignment, 0, n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		dst = s.Assign(dst[:0], attrs[i%len(attrs)])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/experiment")
}

func BenchmarkAssign1(b *testing.B)   { benchmarkAssign(b, 1) }
func BenchmarkAssign50(b *testing.B)  { benchmarkAssign(b, 50) }
func BenchmarkAssign500(b *testing.B) { benchmarkAssign(b, 500) }

func BenchmarkHash(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		Hash("checkout-v2", "user-12345678", 2)
	}
}

// benchmarkAssignStrings is the proxy's cache-miss path: the condition
// outcomes are known for the request's targeting, each unit is only hashed.
func benchmarkAssignStrings(b *testing.B, n int) {
	s := mustCompile(b, benchConfig(n))
	refs := s.Referenced()
	vals := make([][]string, 64)
	for i := range vals {
		a := benchAttrs(i)
		for _, name := range refs {
			v, _ := a[name].(string)
			vals[i] = append(vals[i], v)
		}
	}
	o := s.Outcomes(nil, benchAttrs(0))
	dst := make([]int32, 0, n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		dst = s.AssignStrings(dst[:0], vals[i%len(vals)], o)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/experiment")
}

func BenchmarkAssignStrings50(b *testing.B) { benchmarkAssignStrings(b, 50) }

func BenchmarkOutcomes50(b *testing.B) {
	s := mustCompile(b, benchConfig(50))
	attrs := benchAttrs(0)
	var o Outcomes
	b.ReportAllocs()
	for b.Loop() {
		o = s.Outcomes(o, attrs)
	}
}

// benchmarkAssignStringsSticky is the cache-miss path with sticky
// bucketing, for a unit with a document holding a third of its
// assignments, or without documents (withDocs false).
func benchmarkAssignStringsSticky(b *testing.B, n int, withDocs bool) {
	s := mustCompile(b, benchConfig(n))
	refs := s.Referenced()
	vals := make([][]string, 64)
	docs := make([]StickyDocs, 64)
	for i := range vals {
		a := benchAttrs(i)
		for _, name := range refs {
			v, _ := a[name].(string)
			vals[i] = append(vals[i], v)
		}
		if withDocs {
			m := map[string]string{}
			for j := 0; j < n; j += 3 {
				m[StickyKey("exp-"+strconv.Itoa(j), 0)] = "1"
			}
			id := a["id"].(string)
			docs[i] = StickyDocs{StickyDocKey("id", id): {AttributeName: "id", AttributeValue: id, Assignments: m}}
		}
	}
	o := s.Outcomes(nil, benchAttrs(0))
	dst := make([]int32, 0, n)
	changes := make([]StickyChange, 0, n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		dst, changes = s.AssignStringsSticky(dst[:0], vals[i%len(vals)], o, docs[i%len(docs)], changes[:0])
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/experiment")
}

func BenchmarkAssignStringsSticky50(b *testing.B)       { benchmarkAssignStringsSticky(b, 50, true) }
func BenchmarkAssignStringsStickyNoDocs50(b *testing.B) { benchmarkAssignStringsSticky(b, 50, false) }
