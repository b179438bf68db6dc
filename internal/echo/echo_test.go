package echo_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/internal/echo"
)

func TestHandler(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		target  string
		body    string
		host    string
		headers [][2]string // name, value; repeated names add values
		want    echo.Response
	}{
		{
			name:   "get with query",
			method: http.MethodGet,
			target: "/a/b?x=1&y=%C3%A9",
			host:   "svc.local",
			want: echo.Response{
				Method:  "GET",
				Path:    "/a/b?x=1&y=%C3%A9",
				Host:    "svc.local",
				Headers: map[string][]string{},
			},
		},
		{
			name:   "headers are lowercased and keep every value",
			method: http.MethodGet,
			target: "/",
			host:   "example.com",
			headers: [][2]string{
				{"X-Experiment-Checkout", "treatment"},
				{"Accept", "text/plain"},
				{"accept", "application/json"},
			},
			want: echo.Response{
				Method: "GET",
				Path:   "/",
				Host:   "example.com",
				Headers: map[string][]string{
					"x-experiment-checkout": {"treatment"},
					"accept":                {"text/plain", "application/json"},
				},
			},
		},
		{
			name:    "post body is consumed, not echoed",
			method:  http.MethodPost,
			target:  "/submit",
			body:    `{"a":1}`,
			host:    "example.com",
			headers: [][2]string{{"Content-Type", "application/json"}},
			want: echo.Response{
				Method:  "POST",
				Path:    "/submit",
				Host:    "example.com",
				Headers: map[string][]string{"content-type": {"application/json"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.target, strings.NewReader(tt.body))
			req.Host = tt.host
			for _, h := range tt.headers {
				req.Header.Add(h[0], h[1])
			}
			rec := httptest.NewRecorder()
			echo.Handler().ServeHTTP(rec, req)

			if rec.Code != http.StatusOK {
				t.Fatalf("status = %d, want 200", rec.Code)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("content-type = %q, want application/json", ct)
			}
			var got echo.Response
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("decode %q: %v", rec.Body.String(), err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("response = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestResponseHeader(t *testing.T) {
	r := echo.Response{Headers: map[string][]string{"x-experiment-a": {"on"}}}
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{name: "exact", in: "x-experiment-a", want: []string{"on"}},
		{name: "mixed case", in: "X-Experiment-A", want: []string{"on"}},
		{name: "absent", in: "x-experiment-b", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.Header(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Header(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestStartShutdown(t *testing.T) {
	s, err := echo.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, s.URL()+"/ping?q=1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Test", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var got echo.Response
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if got.Path != "/ping?q=1" || got.Host != s.Addr() || got.Server != s.Addr() || !slices.Equal(got.Header("x-test"), []string{"1"}) {
		t.Errorf("got %+v", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := http.Get(s.URL()); err == nil {
		t.Error("server still answers after Shutdown")
	}
}

// TestFaultKnobs: StatusHeader sets the response's status (a value out of
// range is refused, naming the header); HangHeader holds the request
// unanswered until its client is gone.
func TestFaultKnobs(t *testing.T) {
	for _, c := range []struct {
		value string
		want  int
	}{{"503", 503}, {"200", 200}, {"404", 404}, {"99", 400}, {"600", 400}, {"5xx", 400}} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set(echo.StatusHeader, c.value)
		echo.Handler().ServeHTTP(rec, req)
		if rec.Code != c.want {
			t.Errorf("%s: %s: status %d, want %d", echo.StatusHeader, c.value, rec.Code, c.want)
		}
		if c.want == 400 && !strings.Contains(rec.Body.String(), echo.StatusHeader) {
			t.Errorf("%s: %s: body %q does not name the header", echo.StatusHeader, c.value, rec.Body)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	req := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
	req.Header.Set(echo.HangHeader, "1")
	rec := httptest.NewRecorder()
	done := make(chan struct{})
	go func() { echo.Handler().ServeHTTP(rec, req); close(done) }()
	select {
	case <-done:
		t.Fatal("a hanging request was answered before its client went")
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a hanging request was held after its client went")
	}
	if rec.Body.Len() != 0 {
		t.Errorf("a hanging request was answered: %q", rec.Body)
	}
}
