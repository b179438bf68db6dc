package authz

import (
	"strings"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
)

// TestNew: the service reads a FilterConfig as the filter does — its
// header prefix, unit header and header-mapped attributes — and refuses
// what the filter refuses.
func TestNew(t *testing.T) {
	s, err := New([]byte(`{"unitHeader":"x-unit","headerPrefix":"x-ab-",
		"attributes":[{"name":"country","header":"x-country"}],
		"experiments":[{"key":"e","variations":["a","b"],"weights":[0,1],"condition":{"country":"NL"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	check := func(headers map[string]string) map[string]string {
		t.Helper()
		req := &authv3.CheckRequest{Attributes: &authv3.AttributeContext{Request: &authv3.AttributeContext_Request{
			Http: &authv3.AttributeContext_HttpRequest{Headers: headers}}}}
		resp, err := s.Check(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, h := range resp.GetOkResponse().GetHeaders() {
			got[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
		}
		return got
	}
	if got := check(map[string]string{"x-unit": "u1", "x-country": "NL"}); got["x-ab-e"] != "b" || len(got) != 1 {
		t.Errorf("a unit in the experiment got %v, want x-ab-e: b", got)
	}
	if got := check(map[string]string{"x-unit": "u1", "x-country": "DE"}); len(got) != 0 {
		t.Errorf("a unit outside the condition got %v, want nothing", got)
	}

	for name, cfg := range map[string]string{
		"unknown field":       `{"experiments":[],"unitHeadr":"x"}`,
		"control-plane field": `{"experiments":[{"key":"e","variations":["a","b"],"status":"running"}]}`,
		"invalid experiment":  `{"experiments":[{"key":"e","variations":["a"]}]}`,
	} {
		if _, err := New([]byte(cfg)); err == nil || !strings.Contains(err.Error(), "parse filter config") {
			t.Errorf("%s: New = %v, want the filter's decoder's error", name, err)
		}
	}
}
