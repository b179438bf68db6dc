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

// TestPost: the fixed headers, the content-type, then request i's body
// after its content-length; once the buffer has grown, no allocation.
func TestPost(t *testing.T) {
	body := func(dst []byte, i uint64) []byte {
		return append(strconv.AppendUint(append(dst, `{"id":"u-`...), i, 10), `"}`...)
	}
	req := Post("/p", [][2]string{{"x-a", "1"}}, "application/json", body)
	want := "POST /p HTTP/1.1\r\nhost: bench\r\nx-a: 1\r\ncontent-type: application/json\r\ncontent-length: 12\r\n\r\n" + `{"id":"u-7"}`
	if got := string(req(nil, 7)); got != want {
		t.Errorf("%q, want %q", got, want)
	}
	buf := req(nil, 1000)
	if allocs := testing.AllocsPerRun(100, func() { buf = req(buf[:0], 1000) }); allocs != 0 {
		t.Errorf("%v allocations per request, want 0", allocs)
	}
}

// TestRequestAllocates: a GET with a varying id costs no allocation once
// the buffer has grown.
func TestRequestAllocates(t *testing.T) {
	req := Request("/", [][2]string{{"x-a", "1"}}, func(dst []byte, i uint64) []byte { return strconv.AppendUint(dst, i, 10) })
	buf := req(nil, 1000)
	if allocs := testing.AllocsPerRun(100, func() { buf = req(buf[:0], 1000) }); allocs != 0 {
		t.Errorf("%v allocations per request, want 0", allocs)
	}
}
