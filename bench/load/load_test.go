package load

import (
	"strconv"
	"testing"
)

// TestRequest: the fixed headers, then x-user-id and each varying header
// with request i's value; a varying header without a value function is
// left out.
func TestRequest(t *testing.T) {
	id := func(dst []byte, i uint64) []byte { return strconv.AppendUint(append(dst, "u-"...), i, 10) }
	cookie := func(dst []byte, i uint64) []byte { return append(dst, "sb=v"+strconv.FormatUint(i%2, 10)...) }
	for _, c := range []struct {
		name string
		req  RequestFunc
		want string
	}{
		{"no id", Request("/", [][2]string{{"x-a", "1"}}, nil),
			"GET / HTTP/1.1\r\nhost: bench\r\nx-a: 1\r\n\r\n"},
		{"id", Request("/p", nil, id),
			"GET /p HTTP/1.1\r\nhost: bench\r\nx-user-id: u-7\r\n\r\n"},
		{"id and cookie", Request("/", [][2]string{{"x-a", "1"}}, id, Header{"cookie", cookie}, Header{"x-none", nil}),
			"GET / HTTP/1.1\r\nhost: bench\r\nx-a: 1\r\nx-user-id: u-7\r\ncookie: sb=v1\r\n\r\n"},
	} {
		if got := string(c.req(nil, 7)); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
