package abi

import (
	"errors"
	"reflect"
	"testing"
)

func TestPairsRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		pairs [][2]string
	}{
		{"empty", [][2]string{}},
		{"one", [][2]string{{":path", "/"}}},
		{"many with empty values and utf-8", [][2]string{{"a", ""}, {"", "b"}, {"x-user-id", "Zoë 用户"}, {"a", "dup"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePairs(SerializePairs(tt.pairs))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.pairs) || (len(got) > 0 && !reflect.DeepEqual(got, tt.pairs)) {
				t.Fatalf("round trip = %q, want %q", got, tt.pairs)
			}
		})
	}
}

func TestParsePairsRejectsMalformed(t *testing.T) {
	good := SerializePairs([][2]string{{"k", "v"}, {"key", "value"}})
	tests := map[string][]byte{
		"short":          {1, 0},
		"count too big":  {0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0},
		"truncated":      good[:len(good)-1],
		"trailing bytes": append(append([]byte{}, good...), 0),
		"missing NUL":    func() []byte { b := append([]byte{}, good...); b[len(b)-1] = 'x'; return b }(),
	}
	for name, buf := range tests {
		t.Run(name, func(t *testing.T) {
			if _, err := ParsePairs(buf); err == nil {
				t.Fatalf("ParsePairs(%v) succeeded, want error", buf)
			}
		})
	}
}

func FuzzParsePairs(f *testing.F) {
	f.Add(SerializePairs([][2]string{{"a", "b"}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		pairs, err := ParsePairs(b)
		if err != nil {
			return
		}
		if again, err := ParsePairs(SerializePairs(pairs)); err != nil || len(again) != len(pairs) {
			t.Fatalf("re-serialized pairs do not parse: %v", err)
		}
	})
}

func TestJoinPath(t *testing.T) {
	if got := JoinPath([]string{"request", "path"}); got != "request\x00path" {
		t.Fatalf("JoinPath = %q", got)
	}
}

func TestErrorIs(t *testing.T) {
	err := statusErr("proxy_get_property", StatusNotFound)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("errors.Is(%v, ErrNotFound) = false", err)
	}
	if errors.Is(statusErr("x", StatusBadArgument), ErrNotFound) {
		t.Fatal("bad argument matched ErrNotFound")
	}
	if statusErr("x", StatusOK) != nil {
		t.Fatal("StatusOK produced an error")
	}
}

func TestPairsEncoder(t *testing.T) {
	var e PairsEncoder
	for round := range 3 {
		e.Reset()
		want := [][2]string{{":path", "/"}, {"x-a", ""}, {"x-b", "Zoë"}}
		for _, p := range want {
			e.Add(p[0], p[1])
		}
		got, err := ParsePairs(e.Bytes())
		if err != nil || !reflect.DeepEqual(got, want) || e.Len() != 3 {
			t.Fatalf("round %d: %q, %v", round, got, err)
		}
		if !reflect.DeepEqual(e.Bytes(), SerializePairs(want)) {
			t.Fatalf("round %d: encoder and SerializePairs disagree", round)
		}
	}
	dict := `checkout="treatment"`
	allocs := testing.AllocsPerRun(100, func() {
		e.Reset()
		e.Add("x-experiment-checkout", "treatment")
		e.Add("x-experiments", dict)
		_ = e.Bytes()
	})
	if allocs != 0 {
		t.Fatalf("PairsEncoder allocates %.0f times per reuse, want 0", allocs)
	}
}
