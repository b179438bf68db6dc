//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/internal/echo"
	"github.com/allotmesh/allot/internal/harness"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

// browser is one headless Chromium (harness.ChromiumBinary) with one tab on
// allotd's web console. It records every request the page makes to
// another origin, every uncaught exception and every violation of the
// Content-Security-Policy; the test fails on any of them at cleanup.
type browser struct {
	t      *testing.T
	ctx    context.Context // the tab
	origin string          // allotd's admin listener, http://127.0.0.1:PORT

	mu       sync.Mutex
	problems []string
}

// Viewports of the screenshots: a laptop, and a phone for the narrow layout.
const (
	wideWidth, wideHeight     = 1200, 800
	narrowWidth, narrowHeight = 390, 844
)

// startBrowser starts Chromium headless and opens a tab; the test fails
// (never skips) when there is no Chromium.
func startBrowser(t *testing.T, origin string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(harness.MustChromiumBinary(t)),
		chromedp.WindowSize(wideWidth, wideHeight),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("lang", "en-US"),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	b := &browser{t: t, origin: origin}
	b.ctx = b.tab(alloc)
	t.Cleanup(func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		for _, p := range b.problems {
			t.Error(p)
		}
	})
	return b
}

// tab opens a tab in the browser of parent (a new browser if parent holds
// an allocator only) and records its problems in b. A tab has its own
// sessionStorage, hence its own sign-in.
func (b *browser) tab(parent context.Context) context.Context {
	b.t.Helper()
	ctx, cancel := chromedp.NewContext(parent)
	b.t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil { // starts the browser, opens the tab
		b.t.Fatalf("start chromium: %v", err)
	}
	exceptions := chromedp.Events(ctx, runtime.ExceptionThrown)
	logs := chromedp.Events(ctx, log.EntryAdded)
	requests := chromedp.Events(ctx, network.RequestWillBeSent)
	go func() {
		for ev, err := range exceptions {
			if err != nil {
				return
			}
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			b.problem("uncaught exception at %s:%d: %s", d.URL, d.LineNumber+1, msg)
		}
	}()
	go func() {
		for ev, err := range logs {
			if err != nil {
				return
			}
			if ev.Entry.Source == log.EntrySourceSecurity || strings.Contains(ev.Entry.Text, "Content Security Policy") {
				b.problem("security: %s", ev.Entry.Text)
			}
		}
	}()
	go func() {
		for ev, err := range requests {
			if err != nil {
				return
			}
			if u := ev.Request.URL; !strings.HasPrefix(u, b.origin+"/") && u != "about:blank" {
				b.problem("request to another origin: %s", u)
			}
		}
	}()
	return ctx
}

func (b *browser) problem(format string, args ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, fmt.Sprintf(format, args...))
}

// in returns a browser on another tab of the same Chromium.
func (b *browser) in(ctx context.Context) *browser {
	return &browser{t: b.t, ctx: ctx, origin: b.origin}
}

// do runs actions in the tab within 20 s.
func (b *browser) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %v\npage text:\n%s", err, b.pageText())
	}
}

// pageText is what the page shows, for failure messages.
func (b *browser) pageText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ''`))
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	return s
}

// eval evaluates a JavaScript expression whose value is a string.
func (b *browser) eval(js string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js, func(p *runtime.EvaluateParams) { p.AwaitPromise = new(true) }))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", js, err)
	}
	return s
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	q, _ := json.Marshal(s)
	return string(q)
}

// open shows a console page: #/experiments, #/rollout, ... It sets the hash
// as a click on a link would.
func (b *browser) open(hash string) {
	b.t.Helper()
	b.eval(`(location.hash = ` + jsString(hash) + `, '')`)
}

// text is the visible text of the first element matching sel ("" if none).
func (b *browser) text(sel string) string {
	b.t.Helper()
	return b.eval(`(() => { const e = document.querySelector(` + jsString(sel) + `); return e ? e.innerText : '' })()`)
}

// waitText waits until the element matching sel shows want.
func (b *browser) waitText(sel, want string, timeout time.Duration) string {
	b.t.Helper()
	var got string
	harness.MustEventually(b.t, timeout, func() error {
		if got = b.text(sel); !strings.Contains(got, want) {
			return fmt.Errorf("%s shows %q, want %q; the page shows:\n%s", sel, got, want, b.pageText())
		}
		return nil
	})
	return got
}

// waitFor waits until an element matches sel.
func (b *browser) waitFor(sel string, timeout time.Duration) {
	b.t.Helper()
	harness.MustEventually(b.t, timeout, func() error {
		if b.eval(`document.querySelector(`+jsString(sel)+`) ? 'yes' : ''`) == "" {
			return fmt.Errorf("nothing matches %s; the page shows:\n%s", sel, b.pageText())
		}
		return nil
	})
}

// count is how many elements match sel.
func (b *browser) count(sel string) int {
	b.t.Helper()
	var n int
	fmt.Sscan(b.eval(`String(document.querySelectorAll(`+jsString(sel)+`).length)`), &n)
	return n
}

// set gives an input, select or textarea a value as typing would (an input
// event follows).
func (b *browser) set(sel, value string) {
	b.t.Helper()
	if r := b.eval(`(() => { const e = document.querySelector(` + jsString(sel) + `); if (!e) return 'missing';
		e.value = ` + jsString(value) + `; e.dispatchEvent(new Event('input', {bubbles: true})); e.dispatchEvent(new Event('change', {bubbles: true})); return '' })()`); r != "" {
		b.t.Fatalf("set %s: %s; the page shows:\n%s", sel, r, b.pageText())
	}
}

// click clicks the element matching sel with the mouse.
func (b *browser) click(sel string) {
	b.t.Helper()
	b.do(chromedp.Click(chromedp.CSS(sel)))
}

// disabled reports whether the element matching sel is disabled, and the
// reason it shows on hover (its title).
func (b *browser) disabled(sel string) (bool, string) {
	b.t.Helper()
	r := b.eval(`(() => { const e = document.querySelector(` + jsString(sel) + `); return e ? (e.disabled ? 'disabled' : 'enabled') + '|' + (e.title || '') : 'missing|' })()`)
	state, title, _ := strings.Cut(r, "|")
	if state == "missing" {
		b.t.Fatalf("no %s; the page shows:\n%s", sel, b.pageText())
	}
	return state == "disabled", title
}

// signIn signs the tab in with token and waits for the experiments page.
func (b *browser) signIn(token, who string) {
	b.t.Helper()
	b.do(chromedp.Navigate(b.origin + "/ui/"))
	b.waitFor("#token", 10*time.Second)
	b.do(chromedp.SendKeys(chromedp.CSS("#token"), token))
	b.click("#signin")
	b.waitText("#caller", who, 10*time.Second)
}

// narrow checks the page needs no horizontal scrolling on a phone, and
// screenshots it as name unless name is empty.
func (b *browser) narrow(name string) {
	b.t.Helper()
	b.do(chromedp.EmulateViewport(narrowWidth, narrowHeight))
	harness.MustEventually(b.t, 5*time.Second, func() error {
		if w := b.eval(`String(document.documentElement.scrollWidth)`); w != fmt.Sprint(narrowWidth) {
			return fmt.Errorf("the page is %s px wide on a %d px screen", w, narrowWidth)
		}
		return nil
	})
	if name != "" {
		b.screenshot(name)
	}
	b.do(chromedp.EmulateViewport(wideWidth, wideHeight))
}

// screenshotDir is where the console's screenshots go:
// $ALLOT_CONSOLE_SCREENSHOTS (relative to the repository root; `make
// console-screenshots` sets docs/console), or nowhere.
func screenshotDir(t *testing.T) string {
	dir := os.Getenv("ALLOT_CONSOLE_SCREENSHOTS")
	if dir == "" || filepath.IsAbs(dir) {
		return dir
	}
	return repoPath(t, dir)
}

// screenshot writes the whole page as <screenshotDir>/name.png, recompressed
// to keep the committed files small.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	dir := screenshotDir(b.t)
	if dir == "" {
		return
	}
	b.eval(`(document.activeElement && document.activeElement.blur(), '')`)
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	raw, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	var out bytes.Buffer
	if err := (&png.Encoder{CompressionLevel: png.BestCompression}).Encode(&out, img); err != nil {
		b.t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), out.Bytes(), 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// pauseProxies stops the proxies' processes (SIGSTOP) so that they hold a
// pushed configuration unacknowledged — a slow proxy — until the returned
// function resumes them (also at cleanup).
func pauseProxies(t *testing.T, ps ...*proxy) (resume func()) {
	t.Helper()
	for _, p := range ps {
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			for _, p := range ps {
				p.Signal(syscall.SIGCONT)
			}
		})
	}
	t.Cleanup(resume)
	return resume
}

// TestConsole drives allotd's web console in real headless Chromium against
// real allotd and two real Envoys (clusters checkout-svc and search-svc),
// signed in as alice, owner of team-a: it creates an experiment and sees it
// go from pending to applied on every proxy, sees its header in a request
// through Envoy and in the preview, edits it with an invalid weight and sees
// the API's field error beside the weights, pauses it waiting for the
// proxies, reads both changes in the history with their diff, and sees a
// proxy that rejects the configuration in the rollout view with Envoy's
// reason. Every page works on a phone-sized screen. A reader signed in in
// another tab is shown every change as disabled, with the reason, and the
// API refuses the change the console would send. Last, alice deletes the
// experiment.
//
// With ALLOT_CONSOLE_SCREENSHOTS=docs/console, it writes the screenshots
// of docs/console/.
func TestConsole(t *testing.T) {
	s := startSystem(t)
	checkout := s.startSidecar("console-checkout-1", "checkout-svc")
	search := s.startSidecar("console-search-1", "search-svc")
	s.waitConnected("console-checkout-1", "console-search-1")
	// Another owner's experiment, for the list's filters and the denials.
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{
		"key": "search-ranking", "owner": "team-b", "status": "draft", "services": []string{"search-svc"},
		"variations": []string{"bm25", "learned"}, "description": "Does the learned ranker beat BM25?"}, nil)

	b := startBrowser(t, s.adminURL)

	// A wrong token is refused with the API's reason.
	b.do(chromedp.Navigate(s.adminURL + "/ui/"))
	b.waitFor("#token", 10*time.Second)
	b.screenshot("signin")
	b.do(chromedp.SendKeys(chromedp.CSS("#token"), "not-a-token-0123456789"))
	b.click("#signin")
	b.waitText("#signin-error", "missing or invalid bearer token", 10*time.Second)
	b.set("#token", "")
	b.do(chromedp.SendKeys(chromedp.CSS("#token"), ownerToken))
	b.click("#signin")
	b.waitText("#caller", "alice · owner of team-a", 10*time.Second)
	if got := b.eval(`sessionStorage.getItem('allot.console.token') + '|' + (localStorage.length) + '|' + document.cookie`); got != ownerToken+"|0|" {
		t.Errorf("the token is kept as %q (sessionStorage|localStorage entries|cookies), want in sessionStorage only", got)
	}

	// Create: both proxies are held (SIGSTOP) so that the form's live
	// rollout shows them pending; resumed, they apply it and the waited
	// write's outcome says so.
	b.waitFor(`tr[data-key="search-ranking"]`, 10*time.Second)
	b.click("#new-experiment")
	b.waitFor("#f-key", 10*time.Second)
	b.set("#f-key", "console-checkout")
	b.set("#f-description", "Does the one-page checkout convert better?")
	b.set("#f-variations", "classic\none-page")
	b.set("#f-weights", "0.5, 0.5")
	resume := pauseProxies(t, checkout, search)
	b.click("#submit")
	for _, node := range []string{"console-checkout-1", "console-search-1"} {
		b.waitFor(`#form-progress tr[data-node="`+node+`"][data-state="pending"]`, 15*time.Second)
	}
	b.screenshot("create-pending")
	resume()
	b.waitText("#outcome", "applied by 2 of 2 proxies", 30*time.Second)
	for _, node := range []string{"console-checkout-1", "console-search-1"} {
		b.waitFor(`.rollout-panel tr[data-node="`+node+`"][data-state="applied"]`, 10*time.Second)
	}

	// Its header reaches the service through Envoy, and the preview shows
	// the same header for the same unit.
	r, err := checkout.get(map[string][]string{"x-user-id": {"alice"}})
	if err != nil {
		t.Fatal(err)
	}
	got := r.Header("x-experiment-console-checkout")
	if len(got) != 1 {
		t.Fatalf("request through Envoy right after the waited create: x-experiment-console-checkout = %q, want one value", got)
	}
	b.open("#/preview?service=checkout-svc")
	b.waitFor("#p-attributes", 10*time.Second)
	b.set("#p-attributes", `{"id": "alice"}`)
	b.click("#evaluate")
	b.waitText("#headers", "x-experiment-console-checkout: "+got[0], 10*time.Second)
	b.screenshot("preview")
	b.narrow("")

	// An invalid weight: the API's field error shows beside the weights,
	// and nothing changes.
	b.open("#/experiments/console-checkout/edit")
	b.waitFor("#f-weights", 10*time.Second)
	b.set("#f-weights", "0.9, 0.3")
	b.click("#submit")
	b.waitText("#err-weights", "want 1", 10*time.Second)
	if msg := b.text("#form-errors"); !strings.Contains(msg, "invalid experiment") {
		t.Errorf("form errors: %q, want the API's message", msg)
	}
	b.screenshot("edit-error")
	b.narrow("")
	var e map[string]any
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/console-checkout", nil, &e)
	if e["updateTime"] != e["createTime"] {
		t.Fatalf("a refused edit changed the experiment: %v", e)
	}

	// Pause, waiting for the proxies: the outcome, and no header any more.
	b.open("#/experiments/console-checkout")
	b.waitFor("#action-pause:enabled", 10*time.Second)
	b.click("#action-pause")
	b.waitText("#outcome", "now paused at revision", 30*time.Second)
	b.waitText("#outcome", "applied by 2 of 2 proxies", 5*time.Second)
	if r, err := checkout.get(map[string][]string{"x-user-id": {"alice"}}); err != nil || r.Header("x-experiment-console-checkout") != nil {
		t.Fatalf("request through Envoy right after the waited pause: %v, %v; want no assignment", r.Headers, err)
	}
	if off, why := b.disabled("#action-start"); off {
		t.Errorf("start of alice's paused experiment is disabled: %s", why)
	}
	b.screenshot("experiment")
	b.narrow("experiment-narrow")
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/console-checkout", nil, &e)
	paused := e["revision"]
	// Another owner's experiment is read-only for alice, with the reason.
	b.open("#/experiments/search-ranking")
	b.waitText("#reasons", `alice may not change experiments of owner "team-b"`, 10*time.Second)
	for _, sel := range []string{"#edit", "#action-start", "#action-stop", "#action-delete"} {
		if off, why := b.disabled(sel); !off || !strings.Contains(why, "team-b") {
			t.Errorf("%s on another owner's experiment: disabled %v (%q), want disabled with the reason", sel, off, why)
		}
	}

	// The list: filters by owner, status and service, search by key.
	b.open("#/experiments")
	b.waitFor(`tr[data-key="console-checkout"]`, 10*time.Second)
	b.screenshot("experiments")
	b.narrow("experiments-narrow")
	for _, f := range []struct {
		sel, value string
		want       []string
	}{
		{"#filter-status", "paused", []string{"console-checkout"}},
		{"#filter-status", "", []string{"console-checkout", "search-ranking"}},
		{"#filter-owner", "team-b", []string{"search-ranking"}},
		{"#filter-owner", "", []string{"console-checkout", "search-ranking"}},
		{"#filter-service", "checkout-svc", []string{"console-checkout"}},
		{"#filter-service", "", []string{"console-checkout", "search-ranking"}},
		{"#filter-q", "rank", []string{"search-ranking"}},
	} {
		b.set(f.sel, f.value)
		harness.MustEventually(t, 10*time.Second, func() error {
			keys := b.eval(`[...document.querySelectorAll('#results tr[data-key]')].map((r) => r.dataset.key).join(',')`)
			if keys != strings.Join(f.want, ",") {
				return fmt.Errorf("%s = %q lists %q, want %q", f.sel, f.value, keys, strings.Join(f.want, ","))
			}
			return nil
		})
	}

	// The history: the create and the pause, each with its diff.
	b.open("#/history/console-checkout")
	b.waitFor(`article[data-op="update"] tr[data-path="status"]`, 10*time.Second)
	if n := b.count("article.change"); n != 2 {
		t.Errorf("history lists %d changes, want 2 (the refused edit is none)", n)
	}
	if got := b.text(`article[data-op="update"] tr[data-path="status"]`); !strings.Contains(got, `"running"`) || !strings.Contains(got, `"paused"`) {
		t.Errorf("the pause's diff: %q, want status running → paused", got)
	}
	if got := b.text(`article[data-op="update"] h2`); !strings.Contains(got, "running → paused") {
		t.Errorf("the pause's title: %q", got)
	}
	if got := b.text(`article[data-op="create"] tr[data-path="weights"]`); !strings.Contains(got, "[0.5, 0.5]") {
		t.Errorf("the create's diff of weights: %q", got)
	}
	if got := b.text(`article[data-op="create"]`); !strings.Contains(got, "by alice") {
		t.Errorf("the create: %q, want its actor", got)
	}
	b.screenshot("history")
	b.narrow("")

	// The rollout view: every proxy with its cluster and version; one that
	// rejects the configuration is shown with Envoy's reason.
	s.startRejectingSidecar("console-checkout-rejecting", "checkout-svc")
	b.click(`#nav a[data-section="rollout"]`)
	b.waitFor(`tr[data-node="console-checkout-rejecting"][data-state="rejected"]`, 20*time.Second)
	if msg := b.text(`tr[data-node="console-checkout-rejecting"] td[data-label="message"]`); !strings.Contains(msg, "rejected") || len(msg) < 20 {
		t.Errorf("the rejecting proxy's message: %q, want Envoy's reason", msg)
	}
	for _, node := range []string{"console-checkout-1", "console-search-1"} {
		b.waitFor(`tr[data-node="`+node+`"][data-state="applied"]`, 5*time.Second)
	}
	b.waitFor(`table.targets tr[data-cluster="search-svc"]`, 5*time.Second)
	b.screenshot("rollout")
	b.narrow("")

	t.Run("reader", func(t *testing.T) {
		rb := b.in(b.tab(b.ctx))
		rb.t = t
		rb.signIn(readerToken, "dash · reader")
		rb.waitText("#create-reason", "a reader token reads everything and changes nothing", 10*time.Second)
		if off, _ := rb.disabled("#new-experiment"); !off {
			t.Error("a reader may click New experiment")
		}
		rb.open("#/experiments/console-checkout")
		rb.waitText("#reasons", "dash may not change experiments", 10*time.Second)
		for _, sel := range []string{"#edit", "#action-start", "#action-pause", "#action-stop", "#action-delete"} {
			if off, why := rb.disabled(sel); !off || !strings.Contains(why, "reader") {
				t.Errorf("%s for a reader: disabled %v (%q), want disabled with the reason", sel, off, why)
			}
		}
		rb.screenshot("reader")
		rb.open("#/experiments/new")
		rb.waitText("#form-reason", "reader", 10*time.Second)
		if off, _ := rb.disabled("#submit"); !off {
			t.Error("a reader may submit the new experiment form")
		}
		// The API refuses what the console would send with the reader's
		// token, with its own reason; nothing changed.
		got := rb.eval(`fetch('/v1/experiments/console-checkout:start', {method: 'POST',
			headers: {Authorization: 'Bearer ' + sessionStorage.getItem('allot.console.token'), 'Content-Type': 'application/json'}, body: '{}'})
			.then(async (r) => r.status + ' ' + (await r.json()).error.message)`)
		if !strings.HasPrefix(got, "403 ") || !strings.Contains(got, "dash may not start") {
			t.Errorf("the API answered the reader's start with %q, want 403 and its reason", got)
		}
		s.mustAPI(http.StatusOK, "GET", "/v1/experiments/console-checkout", nil, &e)
		if e["revision"] != paused || e["status"] != "paused" {
			t.Errorf("after the reader's attempts: %v, want revision %v, paused", e, paused)
		}
	})

	// Delete asks to confirm, then waits for the proxies: none had to
	// change, since a paused experiment is in no configuration.
	b.open("#/experiments/console-checkout")
	b.waitFor("#action-delete:enabled", 10*time.Second)
	b.click("#action-delete")
	b.click("#confirm-delete")
	b.waitText("main", "Deleted.", 30*time.Second)
	b.waitText(".outcome", "no connected proxy's configuration had to change", 5*time.Second)
	if code := s.api("GET", "/v1/experiments/console-checkout", nil, nil); code != http.StatusNotFound {
		t.Errorf("after the console's delete: GET %d, want 404", code)
	}
}

// TestConsoleOutcomes: the experiment page of an observed experiment shows
// its outcomes per variation live — a table whose requests and error rates
// are GET /outcomes' figures for the requests the test sent through two
// real Envoys (the echo upstream answers 503 to every request of variation
// b: its error rate is 100%, a's 0%) and charts with one line per
// variation drawn from the API's per-minute series: a point per minute
// (requests), per minute with requests (error rate) and per minute with
// a timed response (p95), each with the API's value, the same after a
// reload; an experiment that does not observe says how to turn it on.
// Both on a phone-sized screen too.
func TestConsoleOutcomes(t *testing.T) {
	s := startSystem(t)
	proxies := []*proxy{s.startSinkSidecar("console-sink-1", "shop"), s.startSinkSidecar("console-sink-2", "shop")}
	s.waitConnected("console-sink-1", "console-sink-2")
	var w waitedWrite
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", map[string]any{"key": "sunk", "services": []string{"shop"},
		"variations": []string{"one-page", "classic"}, "observe": true, "description": "Does the one-page checkout fail less?"}, &w)
	if !w.Rollout.appliedBy(2) {
		t.Fatalf("create: %+v", w.Rollout)
	}
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments", map[string]any{"key": "unobserved", "services": []string{"elsewhere"}, "variations": []string{"a", "b"}}, nil)

	b := startBrowser(t, s.adminURL)
	b.signIn(adminToken, "e2e · admin")
	b.open("#/experiments/unobserved")
	b.waitText("#outcomes-off", `"observe": true`, 10*time.Second)

	b.open("#/experiments/sunk")
	b.waitFor(`#outcomes[data-reads]`, 10*time.Second)
	// Each unit's variation, from the preview; units of the second
	// variation ask the echo upstream for a 503.
	sent, failed := map[string]int64{}, map[string]int64{}
	units := map[string]string{}
	for i := range 40 {
		unit := fmt.Sprintf("user-%d", i)
		var ev struct {
			Assignments []struct {
				Value string `json:"value"`
			} `json:"assignments"`
		}
		s.mustAPI(http.StatusOK, "POST", "/v1/evaluate", map[string]any{"service": "shop", "attributes": map[string]any{"id": unit}}, &ev)
		if len(ev.Assignments) != 1 {
			t.Fatalf("evaluate %s: %+v", unit, ev)
		}
		units[unit] = ev.Assignments[0].Value
	}
	reads := func() int {
		var n int
		fmt.Sscan(b.eval(`document.querySelector('#outcomes').dataset.reads || '0'`), &n)
		return n
	}
	for burst := range 3 { // three bursts, two reads apart
		if burst > 0 && screenshotDir(t) != "" {
			// The screenshot's charts have lines: each burst in a minute of
			// its own (up to two minutes more, only when screenshots are
			// rewritten).
			next := time.Now().Truncate(time.Minute).Add(time.Minute)
			harness.MustEventually(t, 70*time.Second, func() error {
				if time.Now().Before(next) {
					return fmt.Errorf("the next minute (%v) has not begun", next)
				}
				return nil
			})
		}
		for i := range 40 {
			unit := fmt.Sprintf("user-%d", i)
			v := units[unit]
			h := map[string][]string{"x-user-id": {unit}}
			if v == "classic" {
				h[echo.StatusHeader] = []string{"503"}
			}
			r, err := proxies[(i+burst)%2].get(h)
			if err != nil && r.StatusCode != 503 {
				t.Fatal(err)
			}
			sent[v]++
			if r.StatusCode == 503 {
				failed[v]++
			}
		}
		from := reads()
		harness.MustEventually(t, 15*time.Second, func() error {
			if n := reads(); n < from+2 {
				return fmt.Errorf("the panel read the outcomes %d times since the burst, want 2", n-from)
			}
			return nil
		})
	}
	if sent["one-page"] == 0 || failed["one-page"] != 0 || failed["classic"] != sent["classic"] || sent["classic"] == 0 {
		t.Fatalf("sent %v, 503s %v", sent, failed)
	}
	wantCounts(t, s, map[string]int64{"a": sent["one-page"], "b": sent["classic"]}, map[string]int64{"a": 0, "b": failed["classic"]})

	// The table shows the API's own figures (the counts are final: every
	// request is in allotd).
	var o struct {
		Total []struct {
			Variation int     `json:"variation"`
			Requests  string  `json:"requests"`
			ErrorRate float64 `json:"errorRate"`
			Share     float64 `json:"share"`
		} `json:"total"`
	}
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/sunk/outcomes", nil, &o)
	if len(o.Total) != 2 {
		t.Fatalf("outcomes: %+v", o)
	}
	for _, v := range o.Total {
		row := fmt.Sprintf(`#outcomes tr[data-variation="%d"]`, v.Variation)
		for col, want := range map[string]string{
			"requests":   v.Requests,
			"error rate": fmt.Sprintf("%.1f%%", 100*v.ErrorRate),
			"share":      fmt.Sprintf("%.1f%%", 100*v.Share),
		} {
			b.waitText(row+` td[data-label="`+col+`"]`, want, 10*time.Second)
			if got := b.text(row + ` td[data-label="` + col + `"]`); got != want {
				t.Errorf("variation %d %s: the panel shows %q, the API %q", v.Variation, col, got, want)
			}
		}
		if got := b.text(row + ` td[data-label="p95"]`); !strings.HasSuffix(got, " ms") {
			t.Errorf("variation %d p95: %q, want a latency", v.Variation, got)
		}
	}
	if got := b.text(`#outcomes tr[data-variation="1"] td[data-label="error rate"]`); got != "100.0%" {
		t.Errorf("the 503 variation's error rate: %q, want 100.0%%", got)
	}
	if got := b.text(`#outcomes tr[data-variation="0"] td[data-label="error rate"]`); got != "0.0%" {
		t.Errorf("the other variation's error rate: %q, want 0.0%%", got)
	}
	// The charts are the API's series: a line and points per variation,
	// each point a minute's value; and after a reload the same (the
	// history is the server's, not the page's).
	harness.MustEventually(t, 15*time.Second, func() error { return chartsShowSeries(s, b) })
	b.eval(`(window.beforeReload = '1', '')`)
	b.do(chromedp.Reload())
	b.waitFor(`#outcomes svg.chart`, 10*time.Second)
	if b.eval(`window.beforeReload || ''`) != "" {
		t.Fatal("the page was not reloaded")
	}
	harness.MustEventually(t, 15*time.Second, func() error { return chartsShowSeries(s, b) })
	if got := b.eval(`document.querySelector('#outcomes svg.chart[data-metric="requests"]').getAttribute('role') + '|' + document.querySelector('#chart-requests-title').textContent`); got != "img|Requests per minute" {
		t.Errorf("the requests chart's text alternative: %q", got)
	}
	b.screenshot("outcomes")
	b.narrow("outcomes-narrow")
}

// chartsShowSeries compares the Outcomes panel's three charts with
// GET /v1/experiments/sunk/outcomes?minutes=60 (the panel's window): per
// variation, the requests chart has a vertex and a point per minute of the
// series, the error rate chart a point per minute with requests and the
// p95 chart a point per minute with a timed response, each at the API's
// minute with the API's value; a point's text (its <title>) names the
// minute, the variation and the value.
func chartsShowSeries(s *system, b *browser) error {
	var raw json.RawMessage
	s.mustAPI(http.StatusOK, "GET", "/v1/experiments/sunk/outcomes?minutes=60", nil, &raw)
	var o adminv1.Outcomes
	if err := protojson.Unmarshal(raw, &o); err != nil {
		return err
	}
	type point struct {
		Minute time.Time `json:"minute"`
		Value  float64   `json:"value"`
		Title  string    `json:"title"`
	}
	var charts []struct {
		Metric string `json:"metric"`
		Series []struct {
			Variation int     `json:"variation"`
			Vertices  int     `json:"vertices"`
			Points    []point `json:"points"`
		} `json:"series"`
	}
	page := b.eval(`JSON.stringify([...document.querySelectorAll('#outcomes svg.chart')].map((svg) => ({metric: svg.dataset.metric,
		series: [...svg.querySelectorAll('g.series')].map((g) => ({variation: +g.dataset.variation,
			vertices: [...g.querySelectorAll('polyline')].reduce((a, p) => a + p.points.numberOfItems, 0),
			points: [...g.querySelectorAll('circle.point')].map((c) => ({minute: c.dataset.minute, value: +c.dataset.value, title: c.querySelector('title').textContent}))}))})))`)
	if err := json.Unmarshal([]byte(page), &charts); err != nil {
		return fmt.Errorf("the charts %s: %w", page, err)
	}
	if len(o.Series) == 0 {
		return fmt.Errorf("no series in %s", raw)
	}
	names := []string{"one-page", "classic"}
	if len(charts) != 3 {
		return fmt.Errorf("%d charts, want 3", len(charts))
	}
	for _, c := range charts {
		if len(c.Series) != 2 {
			return fmt.Errorf("chart %s: %d lines, want 2 (one per variation)", c.Metric, len(c.Series))
		}
		for _, sr := range c.Series {
			var want []point // the API's minutes with a value, and the value
			for _, m := range o.Series {
				v := m.Variations[sr.Variation]
				at := m.Start.AsTime()
				switch {
				case c.Metric == "requests":
					want = append(want, point{Minute: at, Value: float64(v.Requests)})
				case c.Metric == "errors" && v.Requests > 0:
					want = append(want, point{Minute: at, Value: v.ErrorRate})
				case c.Metric == "p95" && v.LatencyMs != nil:
					want = append(want, point{Minute: at, Value: v.LatencyMs.P95})
				}
			}
			if len(sr.Points) != len(want) || sr.Vertices != len(want) {
				return fmt.Errorf("chart %s, variation %d: %d points, %d vertices; the API's series has %d (of %d minutes)", c.Metric, sr.Variation, len(sr.Points), sr.Vertices, len(want), len(o.Series))
			}
			for i, p := range sr.Points {
				if !p.Minute.Equal(want[i].Minute) || p.Value != want[i].Value {
					return fmt.Errorf("chart %s, variation %d, point %d: %v at %v, the API %v at %v", c.Metric, sr.Variation, i, p.Value, p.Minute, want[i].Value, want[i].Minute)
				}
				if c.Metric == "requests" {
					if label := fmt.Sprintf("%s %s: %d", p.Minute.Local().Format("15:04"), names[sr.Variation], int64(p.Value)); p.Title != label {
						return fmt.Errorf("chart requests, variation %d, point %d: text %q, want %q", sr.Variation, i, p.Title, label)
					}
				}
			}
		}
	}
	return nil
}
