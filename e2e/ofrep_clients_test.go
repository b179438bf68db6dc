//go:build e2e

package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/allotmesh/allot/internal/echo"
	"github.com/allotmesh/allot/internal/harness"
)

// ofrepSettings is the mesh settings' OFREP field with OFREP on and the
// body bound the tests run with; origins, when given, are its CORS origins.
func ofrepSettings(origins ...string) string {
	o, _ := json.Marshal(origins)
	if len(origins) == 0 {
		o = []byte("[]")
	}
	return fmt.Sprintf(`"ofrep": {"enabled": true, "maxBodyBytes": 16384, "corsAllowOrigins": %s}`, o)
}

// TestOFREPServerProviders is #45's acceptance for OpenFeature's server
// providers, each its registry's published package (make ofrep-clients):
// @openfeature/ofrep-provider in Node and openfeature-provider-ofrep in
// Python, against a sidecar whose mesh settings enable OFREP. For units in
// and out of a condition on an attribute (country, from a header on
// requests, a context field in OFREP), each provider's variant and value
// are the x-experiment-<key> header a request of the same unit and
// attributes receives (reason SPLIT); a unit the header leaves out gets
// DEFAULT with the control's value. An unknown flag and an experiment of another service are the
// provider's FLAG_NOT_FOUND.
func TestOFREPServerProviders(t *testing.T) { forArtifacts(t, testOFREPServerProviders) }

func testOFREPServerProviders(t *testing.T, a artifact) {
	clients := harness.MustOFREPClients(t)
	mesh := harness.MustWriteFile(t, "mesh.json", `{"attributes": [{"name": "country", "header": "x-country"}], `+ofrepSettings()+`}`)
	s := startSystemFor(t, a, "-mesh", mesh)
	p := s.startSidecar("sidecar-ofrep", "shop")
	s.waitConnected("sidecar-ofrep")
	// Another team's experiment, which no proxy of shop runs: its write
	// waits for none, and the waited writes after it carry it.
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{
		"key": "elsewhere", "variations": []string{"a", "b"}, "weights": []float64{0.5, 0.5}, "services": []string{"other-team"}}, nil)
	for _, def := range []map[string]any{
		{"key": "button", "variations": []string{"blue", "green"}, "weights": []float64{0.5, 0.5}, "services": []string{"shop"}},
		{"key": "banner", "variations": []string{"off", "on", "bold"}, "weights": []float64{0.2, 0.4, 0.4}, "condition": map[string]any{"country": "NL"}},
	} {
		var w waitedWrite
		s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", def, &w)
		if !w.Rollout.appliedBy(1) {
			t.Fatalf("create %s: %+v", def["key"], w.Rollout)
		}
	}
	assigned := []string{"button", "banner"}
	control := map[string]string{"button": "blue", "banner": "off"}
	flags := []string{"button", "banner", "no-such-flag", "elsewhere"}

	for _, lang := range []string{harness.OFREPNode, harness.OFREPPython} {
		t.Run(lang, func(t *testing.T) {
			for i, unit := range userIDs(8) {
				country := []string{"NL", "DE"}[i%2]
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				got, err := clients.Evaluate(ctx, lang, p.URL, map[string]any{"targetingKey": unit, "country": country}, flags...)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
				r, err := p.get(map[string][]string{"x-user-id": {unit}, "x-country": {country}})
				if err != nil {
					t.Fatal(err)
				}
				for j, key := range assigned {
					if err := sameAsHeader(got[j], r.Header("x-experiment-"+key), control[key]); err != nil {
						t.Errorf("%s, %s (%s): %v", unit, key, country, err)
					}
				}
				for _, e := range got[len(assigned):] {
					if e.ErrorCode != "FLAG_NOT_FOUND" || e.Variant != "" {
						t.Errorf("%s, %s: %+v, want the provider's FLAG_NOT_FOUND", unit, e.Flag, e)
					}
				}
			}
		})
	}
}

// sameAsHeader checks that e, a flag resolved over OFREP, agrees with
// header, the flag's x-experiment-<key> values on a request of the same
// unit and attributes: one value is the variant and the value (the tests'
// variations are strings), assigned by the hash (SPLIT); none means the
// unit is not in the experiment, which OFREP answers as GrowthBook serves
// such a unit: reason DEFAULT, the value and variant of variation 0
// (control).
func sameAsHeader(e harness.OFREPEvaluation, header []string, control string) error {
	switch len(header) {
	case 1:
		if e.Variant != header[0] || e.Value != header[0] || e.Reason != "SPLIT" || e.ErrorCode != "" {
			return fmt.Errorf("OFREP gave %+v, the header %q", e, header[0])
		}
	case 0:
		if e.Variant != control || e.Value != control || e.Reason != "DEFAULT" || e.ErrorCode != "" {
			return fmt.Errorf("OFREP gave %+v, the request no header: want DEFAULT, %q", e, control)
		}
	default:
		return fmt.Errorf("header %q: want one value or none", header)
	}
	return nil
}

// TestOFREPWebProvider is #45's acceptance at the edge: OpenFeature's web
// provider (@openfeature/ofrep-web-provider in @openfeature/web-sdk, the
// npm packages as ES modules, e2e/ofrep/web) in headless Chromium, on a page
// of another origin (the test's own server, listed in the OFREP CORS
// origins), against the gateway with the sticky cookie. For each of several
// units the page's variation is the x-experiment-button header of the
// backend request it makes next, with credentials, through the same
// gateway. Then the owner moves every unit to the other variation: the
// last unit, its sticky cookie in the browser, keeps its variation in the
// page and in the header, while a new unit gets the other one in both.
func TestOFREPWebProvider(t *testing.T) { forArtifacts(t, testOFREPWebProvider) }

func testOFREPWebProvider(t *testing.T, a artifact) {
	clients := harness.MustOFREPClients(t)
	page := startOFREPPage(t, clients.Dir)
	mesh := harness.MustWriteFile(t, "mesh.json", `{"stickyCookie": {"name": "allot_sb", "maxAgeSeconds": 86400}, `+ofrepSettings(page.origin)+`}`)
	keys := harness.MustWriteFile(t, "keys.json", fmt.Sprintf(`{"keys": [{"id": "k1", "secret": %q}]}`, base64.StdEncoding.EncodeToString(stickySecret)))
	s := startSystemFor(t, a, "-mesh", mesh, "-sticky-keys", keys)
	_, pagePort, _ := splitHostPort(page.addr)
	_, searchPort, _ := splitHostPort(s.echoAddr)
	// /checkout is the page's backend: the test's server answers it as the
	// echo upstream does, with CORS for the page.
	g := startEnvoy(t, a.gateway, s.xdsPort, s.filter(), a.env(), "edge-ofrep", "gateway", map[string]string{
		"port_value: 8081": "port_value: " + pagePort,
		"port_value: 8082": "port_value: " + searchPort,
	})
	s.waitConnected("edge-ofrep")
	def := map[string]any{"key": "button", "variations": []string{"blue", "green"}, "weights": []float64{0.5, 0.5}}
	var w waitedWrite
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", def, &w)
	if !w.Rollout.appliedBy(1) {
		t.Fatalf("create: %+v", w.Rollout)
	}

	b := startOFREPBrowser(t)
	// load opens the page for unit and returns its variation of button and
	// the header its backend request carried.
	load := func(unit string) (string, string) {
		t.Helper()
		q := url.Values{"ofrep": {g.URL}, "unit": {unit}, "flags": {"button"}, "backend": {g.URL + "/checkout"}}
		r := b.load(page.origin + "/web/index.html?" + q.Encode())
		f, h := r.Flags["button"], r.Headers["button"]
		if f.Error != "" || f.Variant == "" || f.Value != f.Variant {
			t.Fatalf("%s: the page resolved button as %+v", unit, f)
		}
		if f.Variant != h {
			t.Fatalf("%s: the page's variation %q, its backend request's x-experiment-button %q", unit, f.Variant, h)
		}
		return f.Variant, h
	}
	var last, v string
	for _, unit := range userIDs(6) {
		v, _ = load(unit)
		last = unit
	}

	other, weights := "green", []float64{1, 0}
	if v == "blue" {
		weights = []float64{0, 1}
	} else {
		other = "blue"
	}
	def["weights"], def["revision"] = weights, w.Experiment["revision"]
	s.mustAPI(http.StatusOK, "PUT", "/v1/experiments/button?wait=10s", def, &w)
	if !w.Rollout.appliedBy(1) {
		t.Fatalf("update: %+v", w.Rollout)
	}
	if got, _ := load(last); got != v {
		t.Fatalf("%s with its sticky cookie after the weights moved to %s: %q, want %q", last, other, got, v)
	}
	if got, _ := load("ofrep-new-unit"); got != other {
		t.Fatalf("a new unit after the weights moved: %q, want %q", got, other)
	}
}

// ofrepPage is the test's server of the OFREP web client: e2e/ofrep's files
// (the page and node_modules) at /, and at /checkout the echo upstream
// with CORS (credentials) for the page's own origin, as a backend that
// serves a page of another origin answers.
type ofrepPage struct {
	addr   string // 127.0.0.1:PORT
	origin string // http://127.0.0.1:PORT
}

func startOFREPPage(t *testing.T, dir string) ofrepPage {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := ofrepPage{addr: ln.Addr().String(), origin: "http://" + ln.Addr().String()}
	files, backend := http.FileServer(http.Dir(dir)), echo.Handler()
	mux := http.NewServeMux()
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".js") || strings.HasSuffix(r.URL.Path, ".mjs") {
			w.Header().Set("Content-Type", "text/javascript") // module scripts need a JavaScript type
		}
		files.ServeHTTP(w, r)
	}))
	mux.Handle("/checkout", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Origin") == p.origin {
			w.Header().Set("Access-Control-Allow-Origin", p.origin)
			w.Header().Set("Access-Control-Allow-Credentials", "true")
		}
		if r.Method == http.MethodOptions {
			w.Header().Set("Access-Control-Allow-Methods", "GET")
			w.Header().Set("Access-Control-Allow-Headers", "x-user-id")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return p
}

// ofrepBrowser is headless Chromium with one tab, its cookies kept across
// page loads.
type ofrepBrowser struct {
	t   *testing.T
	ctx context.Context
}

func startOFREPBrowser(t *testing.T) *ofrepBrowser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(harness.MustChromiumBinary(t)),
		chromedp.UserDataDir(t.TempDir()),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return &ofrepBrowser{t: t, ctx: ctx}
}

// ofrepPageResult is what e2e/ofrep/web/page.mjs wrote into the DOM.
type ofrepPageResult struct {
	Done  string `json:"done"`
	Error string `json:"error"`
	Flags map[string]struct {
		Value, Variant, Reason, Error string
	} `json:"flags"`
	Headers map[string]string `json:"headers"` // x-experiment-<key> as the backend saw it
}

// readPage reads page.mjs's DOM back.
const readPage = `JSON.stringify({
	done: document.body ? (document.body.dataset.done || '') : '',
	error: (document.getElementById('error') || {}).textContent || '',
	flags: Object.fromEntries([...document.querySelectorAll('#flags li')].map(li => [li.id.slice(5),
		{Value: li.dataset.value, Variant: li.dataset.variant, Reason: li.dataset.reason, Error: li.dataset.error}])),
	headers: Object.fromEntries([...document.querySelectorAll('#headers li')].map(li => [li.id.slice(7), li.dataset.value])),
})`

// load opens u and waits (20 s) until the page is done, then returns what
// it wrote; the test fails if the page reports an error.
func (b *ofrepBrowser) load(u string) ofrepPageResult {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(u)); err != nil {
		b.t.Fatalf("open %s: %v", u, err)
	}
	var r ofrepPageResult
	harness.MustEventually(b.t, 20*time.Second, func() error {
		s, err := chromedp.Run(ctx, chromedp.Evaluate[string](readPage, func(p *runtime.EvaluateParams) { p.AwaitPromise = new(true) }))
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(s), &r); err != nil {
			return fmt.Errorf("page wrote %s: %w", s, err)
		}
		if r.Done == "" {
			return errors.New("the page is not done yet")
		}
		return nil
	})
	if r.Done != "ok" {
		b.t.Fatalf("%s: the page failed: %s", u, r.Error)
	}
	return r
}
