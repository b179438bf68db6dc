package ofrep

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		method, path string
		kind         Kind
		key          string
	}{
		{"POST", "/ofrep/v1/evaluate/flags/checkout-button", Single, "checkout-button"},
		{"POST", "/ofrep/v1/evaluate/flags/checkout-button?x=1", Single, "checkout-button"},
		{"POST", "/ofrep/v1/evaluate/flags", Bulk, ""},
		{"POST", "/ofrep/v1/evaluate/flags/", Bulk, ""},
		{"POST", "/ofrep/v1/evaluate/flags?flagConfigEtag=1", Bulk, ""},
		{"OPTIONS", "/ofrep/v1/evaluate/flags", Preflight, ""},
		{"OPTIONS", "/ofrep/v1/evaluate/flags/k", Preflight, ""},
		{"GET", "/ofrep/v1/evaluate/flags", NotAllowed, ""},
		{"PUT", "/ofrep/v1/evaluate/flags/k", NotAllowed, ""},
		{"POST", "/ofrep/v1/evaluate/flags/a/b", NotFound, ""},
		{"POST", "/ofrep/v1/other", NotFound, ""},
		{"GET", "/ofrep/v1/", NotFound, ""},
		{"POST", "/ofrep/v2/evaluate/flags", None, ""},
		{"GET", "/", None, ""},
		{"POST", "/ofrep/v1", None, ""},
	}
	for _, tc := range tests {
		kind, key := Classify(tc.method, tc.path)
		if kind != tc.kind || key != tc.key {
			t.Errorf("Classify(%s %s) = %d %q, want %d %q", tc.method, tc.path, kind, key, tc.kind, tc.key)
		}
	}
}

func TestParseBody(t *testing.T) {
	known := func(name string) bool { return name == "country" || name == "plan" }
	tests := []struct {
		name   string
		body   string
		key    string
		fields []Field
		status uint32 // 0: accepted
		code   string
	}{
		{"empty body", ``, "", nil, 400, TargetingKeyMissing},
		{"no context", `{}`, "", nil, 400, TargetingKeyMissing},
		{"empty context", `{"context":{}}`, "", nil, 400, TargetingKeyMissing},
		{"empty targeting key", `{"context":{"targetingKey":""}}`, "", nil, 400, TargetingKeyMissing},
		{"unit", `{"context":{"targetingKey":"u-1"}}`, "u-1", nil, 0, ""},
		{"scalars", `{"context":{"targetingKey":"u-1","country":"CA","age":41.50,"beta":true}}`, "u-1",
			[]Field{{"country", "CA", false}, {"age", "41.50", false}, {"beta", "true", false}}, 0, ""},
		{"unknown object ignored", `{"context":{"targetingKey":"u","extra":{"a":1},"list":[1]}}`, "u",
			[]Field{{"extra", "", true}, {"list", "", true}}, 0, ""},
		{"object attribute", `{"context":{"targetingKey":"u","country":{"a":1}}}`, "", nil, 400, InvalidContext},
		{"null attribute", `{"context":{"targetingKey":"u","plan":null}}`, "", nil, 400, InvalidContext},
		{"number targeting key", `{"context":{"targetingKey":7}}`, "", nil, 400, InvalidContext},
		{"context not an object", `{"context":[]}`, "", nil, 400, InvalidContext},
		{"not JSON", `{"context":`, "", nil, 400, ParseError},
		{"not an object", `[1]`, "", nil, 400, ParseError},
		{"invalid UTF-8", "{\"context\":{\"targetingKey\":\"\xff\"}}", "", nil, 400, ParseError},
		{"too deep", `{"context":{"targetingKey":"u","x":` + strings.Repeat("[", 20) + strings.Repeat("]", 20) + `}}`, "", nil, 400, ParseError},
		{"too large", `{"context":{"targetingKey":"` + strings.Repeat("u", 200) + `"}}`, "", nil, 413, ParseError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c Context
			e := ParseBody(&c, []byte(tc.body), 120)
			if e == nil {
				e = CheckContext(&c, known)
			}
			switch {
			case tc.status == 0 && e != nil:
				t.Fatalf("refused: %v", e)
			case tc.status != 0 && (e == nil || e.Status != tc.status || e.Code != tc.code):
				t.Fatalf("got %+v, want %d %s", e, tc.status, tc.code)
			case tc.status == 0 && (c.TargetingKey != tc.key || !slices.Equal(c.Fields, tc.fields)):
				t.Errorf("context %+v, want %q %+v", c, tc.key, tc.fields)
			}
		})
	}
}

// TestErrorNamesField: INVALID_CONTEXT names the field.
func TestErrorNamesField(t *testing.T) {
	var c Context
	if e := ParseBody(&c, []byte(`{"context":{"targetingKey":"u","country":[]}}`), 1000); e != nil {
		t.Fatal(e)
	}
	e := CheckContext(&c, func(string) bool { return true })
	if e == nil || !strings.Contains(e.Details, "context.country") {
		t.Errorf("CheckContext = %v, want an error naming context.country", e)
	}
}

// TestRender: the answers are valid JSON of the spec's shapes.
func TestRender(t *testing.T) {
	f := Flag{Key: "k", Value: `"blue"`, Variant: "blue", Reason: Split}
	single := string(AppendFlag(nil, f, `v"1`))
	if want := `{"key":"k","value":"blue","reason":"SPLIT","variant":"blue","metadata":{"configVersion":"v\"1"}}`; single != want {
		t.Errorf("AppendFlag = %s, want %s", single, want)
	}
	b := AppendBulkStart(nil)
	b = AppendFlag(b, f, "v1")
	b = append(b, ',')
	b = AppendFlag(b, Flag{Key: "n", Value: `2.5`, Variant: "2.5", Reason: Default}, "v1")
	b = AppendBulkEnd(b, "v1")
	var bulk struct {
		Flags []struct {
			Key, Reason, Variant string
			Value                any
			Metadata             map[string]any
		}
		Metadata map[string]any
	}
	if err := json.Unmarshal(b, &bulk); err != nil {
		t.Fatalf("bulk %s: %v", b, err)
	}
	if len(bulk.Flags) != 2 || bulk.Flags[1].Value != 2.5 || bulk.Metadata["configVersion"] != "v1" {
		t.Errorf("bulk = %+v", bulk)
	}
	for _, tc := range []struct {
		key  string
		e    *Error
		want string
	}{
		{"k", NotFoundError("k"), `{"key":"k","errorCode":"FLAG_NOT_FOUND","errorDetails":"flag \"k\" was not found"}`},
		{"", &Error{400, TargetingKeyMissing, "x"}, `{"errorCode":"TARGETING_KEY_MISSING","errorDetails":"x"}`},
		{"", &Error{404, "", "no such path"}, `{"errorDetails":"no such path"}`},
	} {
		if got := string(AppendError(nil, tc.key, tc.e)); got != tc.want || !json.Valid([]byte(got)) {
			t.Errorf("AppendError = %s, want %s", got, tc.want)
		}
	}
}

func TestETag(t *testing.T) {
	a, b := ETag([]byte(`{"flags":[]}`)), ETag([]byte(`{"flags":[1]}`))
	if a == b || len(a) != 18 || a[0] != '"' || a[17] != '"' || ETag([]byte(`{"flags":[]}`)) != a {
		t.Errorf("ETag: %s %s", a, b)
	}
	for inm, want := range map[string]bool{a: true, "W/" + a: true, `"x", ` + a: true, "*": true, b: false, "": false, strings.Trim(a, `"`): false} {
		if Matches(inm, a) != want {
			t.Errorf("Matches(%q, %s) = %v, want %v", inm, a, !want, want)
		}
	}
}

func TestCORS(t *testing.T) {
	allowed := []string{"http://127.0.0.1:8080"}
	get := func(h [][2]string, name string) string {
		for _, kv := range h {
			if kv[0] == name {
				return kv[1]
			}
		}
		return ""
	}
	if h := AppendCORS(nil, "http://127.0.0.1:8080", nil, false); len(h) != 0 {
		t.Errorf("no origins configured: %v", h)
	}
	h := AppendCORS(nil, "http://127.0.0.1:8080", allowed, false)
	if get(h, HeaderAllowOrigin) != "http://127.0.0.1:8080" || get(h, HeaderAllowCredentials) != "true" || get(h, HeaderVary) != "Origin" || get(h, HeaderExposeHeaders) != "ETag" {
		t.Errorf("allowed origin: %v", h)
	}
	h = AppendCORS(nil, "http://evil.example", allowed, false)
	if get(h, HeaderAllowOrigin) != "" || get(h, HeaderVary) != "Origin" {
		t.Errorf("other origin: %v", h)
	}
	h = AppendCORS(nil, "http://127.0.0.1:8080", allowed, true)
	if get(h, HeaderAllowMethods) != "POST" || get(h, HeaderAllowHeaders) != PreflightAllowHeaders || get(h, HeaderMaxAge) == "" {
		t.Errorf("preflight: %v", h)
	}
}

// FuzzParseBody: no input panics the parser, anything it accepts came
// within the bound, and every refusal is the spec's 400 or 413.
func FuzzParseBody(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"context":{"targetingKey":"u","a":1,"b":[{}]}}`, `{"context":null}`, `[`, `{"context":{"targetingKey":"\ud800"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var c Context
		e := ParseBody(&c, body, 4096)
		if e == nil {
			e = CheckContext(&c, func(string) bool { return true })
		}
		if e != nil && e.Status != 400 && e.Status != 413 {
			t.Fatalf("status %d", e.Status)
		}
		if e == nil && len(body) > 4096 {
			t.Fatalf("accepted %d bytes over the bound", len(body))
		}
		if e != nil {
			if out := AppendError(nil, "k", e); !json.Valid(out) {
				t.Fatalf("error answer not JSON: %s", out)
			}
		}
	})
}
