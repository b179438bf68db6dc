package panics

import (
	"errors"
	"testing"
)

func TestMessage(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{errors.New("boom"), "boom"},
		{"text", "text"},
		{42, "non-error panic value"},
	} {
		if got := Message(tc.v); got != tc.want {
			t.Errorf("Message(%#v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
