//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/filter/ofrep"
	"github.com/allotmesh/allot/internal/harness"
)

// ofrepAnswer is an OFREP answer: one flag's evaluation or error, or a
// bulk evaluation's flags.
type ofrepAnswer struct {
	Key, Reason, Variant, ErrorCode, ErrorDetails string
	Value                                         any
	Metadata                                      map[string]any
	Flags                                         []ofrepAnswer
}

// ofrepPost POSTs body to an OFREP path of p with extra headers and
// returns the status, the response headers and the decoded answer (zero
// for a 304).
func ofrepPost(t *testing.T, p *proxy, path, body string, extra map[string]string) (int, http.Header, ofrepAnswer) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, p.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	resp, err := ofrepClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var a ofrepAnswer
	if resp.StatusCode != http.StatusNotModified {
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("POST %s: %d %q: %v", path, resp.StatusCode, b, err)
		}
	}
	if resp.StatusCode >= 500 {
		t.Fatalf("POST %s %s: %d %s", path, body, resp.StatusCode, b)
	}
	return resp.StatusCode, resp.Header, a
}

// ofrepClient is the e2e OFREP client: a request the filter holds is
// answered in milliseconds, or never.
var ofrepClient = &http.Client{Timeout: 10 * time.Second}

// TestOFREP is #45 on a sidecar whose mesh settings enable OFREP, with
// Go's net/http as the client: single and bulk evaluations, scoped to the
// sidecar's cluster; the spec's errors for a bad JSON body, a missing
// targeting key, an unknown flag, another service's experiment and an
// oversized body, none a 5xx; ETag: an unchanged configuration answers
// 304, a write through the admin API 200 with the new assignment; and,
// over random units and countries, OFREP's variant is the header the
// echo upstream receives.
func TestOFREP(t *testing.T) { forArtifacts(t, testOFREP) }

func testOFREP(t *testing.T, a artifact) {
	mesh := harness.MustWriteFile(t, "mesh.json", `{"attributes": [{"name": "country", "header": "x-country"}],
		"ofrep": {"enabled": true, "maxBodyBytes": 1024}}`)
	s := startSystemFor(t, a, "-mesh", mesh)
	p := s.startSidecar("sidecar-ofrep", "shop")
	button := map[string]any{"key": "button", "variations": []string{"blue", "green"}, "weights": []float64{0.5, 0.5}, "services": []string{"shop"}}
	var w waitedWrite
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", button, &w)
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{"key": "discount", "variations": []any{0, 10, 25},
		"condition": map[string]any{"country": "CA"}}, nil)
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{"key": "ranking", "variations": []string{"a", "b"},
		"services": []string{"search"}}, nil)
	harness.MustEventually(t, 15*time.Second, func() error {
		r, err := p.get(map[string][]string{"x-user-id": {"probe"}, "x-country": {"CA"}})
		if err != nil {
			return err
		}
		if len(r.Header("x-experiment-button")) != 1 || len(r.Header("x-experiment-discount")) != 1 {
			return fmt.Errorf("headers %v: want button and discount", r.Headers)
		}
		return nil
	})
	// headers is what the echo upstream receives for a header request of
	// unit in country ("": none): the assignment headers and the version.
	headers := func(unit, country string) harness.EchoResponse {
		t.Helper()
		h := map[string][]string{"x-user-id": {unit}}
		if country != "" {
			h["x-country"] = []string{country}
		}
		r, err := p.get(h)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	t.Run("single", func(t *testing.T) {
		r := headers("u1", "CA")
		code, _, e := ofrepPost(t, p, "/ofrep/v1/evaluate/flags/button", `{"context": {"targetingKey": "u1", "country": "CA"}}`, nil)
		if h := r.Header("x-experiment-button"); code != 200 || len(h) != 1 || e.Variant != h[0] || e.Value != h[0] || e.Reason != ofrep.Split {
			t.Errorf("button: %d %+v, header %q", code, e, h)
		}
		if v := r.Header("x-experiments-version"); len(v) != 1 || e.Metadata["configVersion"] != v[0] {
			t.Errorf("metadata %v, version header %q", e.Metadata, v)
		}
		code, _, e = ofrepPost(t, p, "/ofrep/v1/evaluate/flags/discount", `{"context": {"targetingKey": "u1", "country": "CA"}}`, nil)
		if h := r.Header("x-experiment-discount"); code != 200 || len(h) != 1 || e.Variant != h[0] || fmt.Sprint(e.Value) != h[0] {
			t.Errorf("discount: %d %+v (value %T), header %q", code, e, e.Value, h)
		}
		code, _, e = ofrepPost(t, p, "/ofrep/v1/evaluate/flags/discount", `{"context": {"targetingKey": "u1", "country": "US"}}`, nil)
		if code != 200 || e.Reason != ofrep.Default || e.Variant != "0" {
			t.Errorf("discount outside its targeting: %d %+v, want variation 0, DEFAULT", code, e)
		}
	})

	t.Run("bulk, scoped to the cluster", func(t *testing.T) {
		code, hdr, b := ofrepPost(t, p, "/ofrep/v1/evaluate/flags", `{"context": {"targetingKey": "u2"}}`, nil)
		keys := []string{}
		for _, f := range b.Flags {
			keys = append(keys, f.Key)
		}
		if code != 200 || strings.Join(keys, ",") != "button,discount" || hdr.Get("ETag") == "" {
			t.Errorf("bulk: %d, flags %v, ETag %q; want button and discount, not search's ranking", code, keys, hdr.Get("ETag"))
		}
	})

	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			name, path, body string
			status           int
			code             string
		}{
			{"bad JSON", "/ofrep/v1/evaluate/flags/button", `{"context": `, 400, ofrep.ParseError},
			{"missing targeting key", "/ofrep/v1/evaluate/flags/button", `{"context": {"country": "CA"}}`, 400, ofrep.TargetingKeyMissing},
			{"missing targeting key, bulk", "/ofrep/v1/evaluate/flags", `{}`, 400, ofrep.TargetingKeyMissing},
			{"invalid context", "/ofrep/v1/evaluate/flags", `{"context": {"targetingKey": "u", "country": {"a": 1}}}`, 400, ofrep.InvalidContext},
			{"unknown flag", "/ofrep/v1/evaluate/flags/nosuch", `{"context": {"targetingKey": "u"}}`, 404, ofrep.FlagNotFound},
			{"another service's experiment", "/ofrep/v1/evaluate/flags/ranking", `{"context": {"targetingKey": "u"}}`, 404, ofrep.FlagNotFound},
			{"oversized body", "/ofrep/v1/evaluate/flags", `{"context": {"targetingKey": "` + strings.Repeat("u", 2000) + `"}}`, 413, ofrep.ParseError},
		} {
			code, _, e := ofrepPost(t, p, tc.path, tc.body, nil)
			if code != tc.status || e.ErrorCode != tc.code {
				t.Errorf("%s: %d %+v, want %d %s", tc.name, code, e, tc.status, tc.code)
			}
		}
	})

	t.Run("ETag", func(t *testing.T) {
		body := `{"context": {"targetingKey": "u3"}}`
		_, hdr, _ := ofrepPost(t, p, "/ofrep/v1/evaluate/flags", body, nil)
		tag := hdr.Get("ETag")
		if code, h2, _ := ofrepPost(t, p, "/ofrep/v1/evaluate/flags", body, map[string]string{"If-None-Match": tag}); code != 304 || h2.Get("ETag") != tag {
			t.Fatalf("unchanged configuration: %d, ETag %q; want 304, %q", code, h2.Get("ETag"), tag)
		}
		button["weights"] = []float64{0, 1}
		button["revision"] = w.Experiment["revision"]
		s.mustAPI(http.StatusOK, "PUT", "/v1/experiments/button?wait=10s", button, &w)
		if !w.Rollout.appliedBy(1) {
			t.Fatalf("update: %+v", w.Rollout)
		}
		code, h2, b := ofrepPost(t, p, "/ofrep/v1/evaluate/flags", body, map[string]string{"If-None-Match": tag})
		if code != 200 || h2.Get("ETag") == tag || len(b.Flags) == 0 || b.Flags[0].Key != "button" || b.Flags[0].Variant != "green" {
			t.Errorf("after a write: %d, ETag %q, flags %+v; want 200, a new tag, button green", code, h2.Get("ETag"), b.Flags)
		}
	})

	t.Run("differential", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(45, 2))
		countries := []string{"CA", "US", ""}
		for n := range 100 {
			unit := fmt.Sprintf("unit-%d-%x", n, rng.Uint32())
			country := countries[rng.IntN(len(countries))]
			ctx := map[string]any{"targetingKey": unit}
			if country != "" {
				ctx["country"] = country
			}
			body, _ := json.Marshal(map[string]any{"context": ctx})
			r := headers(unit, country)
			code, _, b := ofrepPost(t, p, "/ofrep/v1/evaluate/flags", string(bytes.TrimSpace(body)), nil)
			if code != 200 {
				t.Fatalf("%s: %d", unit, code)
			}
			for _, f := range b.Flags {
				h := r.Header("x-experiment-" + f.Key)
				switch {
				case len(h) == 1 && (h[0] != f.Variant || f.Reason == ofrep.Default):
					t.Fatalf("%s in %q: header %q, OFREP %+v", unit, country, h, f)
				case len(h) == 0 && f.Reason != ofrep.Default:
					t.Fatalf("%s in %q: no header, OFREP %+v", unit, country, f)
				}
			}
		}
	})
}
