package console_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/allotmesh/allot/control-plane/console"
)

func serve(t *testing.T, method, target string, header http.Header) *http.Response {
	t.Helper()
	h, err := console.Handler()
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Result()
}

// TestHandler: the index at /ui/, each asset with its type, nothing else;
// every answer carries the security headers.
func TestHandler(t *testing.T) {
	tests := []struct {
		name, method, path string
		wantStatus         int
		wantType           string
		wantBody           string
	}{
		{"index", "GET", "/ui/", 200, "text/html; charset=utf-8", `<script type="module" src="js/app.js">`},
		{"index by name", "GET", "/ui/index.html", 200, "text/html; charset=utf-8", "<title>Allot console</title>"},
		{"module", "GET", "/ui/js/app.js", 200, "text/javascript; charset=utf-8", "import"},
		{"style", "GET", "/ui/style.css", 200, "text/css; charset=utf-8", ":root"},
		{"icon", "GET", "/ui/favicon.svg", 200, "image/svg+xml", "<svg"},
		{"head", "HEAD", "/ui/js/api.js", 200, "text/javascript; charset=utf-8", ""},
		{"missing file", "GET", "/ui/nope.js", 404, "", ""},
		{"no directory listing", "GET", "/ui/js/", 404, "", ""},
		{"no escape from the assets", "GET", "/ui/../console.go", 404, "", ""},
		{"outside the prefix", "GET", "/v1/experiments", 404, "", ""},
		{"write", "POST", "/ui/", 405, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := serve(t, tc.method, tc.path, nil)
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantStatus {
				t.Fatalf("%s %s: %d %s, want %d", tc.method, tc.path, resp.StatusCode, body, tc.wantStatus)
			}
			for k, want := range map[string]string{
				"Content-Security-Policy": console.ContentSecurityPolicy,
				"X-Content-Type-Options":  "nosniff",
				"X-Frame-Options":         "DENY",
				"Referrer-Policy":         "no-referrer",
			} {
				if got := resp.Header.Get(k); got != want {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
			if tc.wantStatus != 200 {
				return
			}
			if got := resp.Header.Get("Content-Type"); got != tc.wantType {
				t.Errorf("Content-Type %q, want %q", got, tc.wantType)
			}
			if resp.Header.Get("ETag") == "" || resp.Header.Get("Cache-Control") != "no-cache" {
				t.Errorf("ETag %q, Cache-Control %q: want an ETag, revalidated on each load", resp.Header.Get("ETag"), resp.Header.Get("Cache-Control"))
			}
			if !strings.Contains(string(body), tc.wantBody) {
				t.Errorf("body lacks %q:\n%s", tc.wantBody, body)
			}
		})
	}
	t.Run("revalidation", func(t *testing.T) {
		etag := serve(t, "GET", "/ui/js/app.js", nil).Header.Get("ETag")
		if resp := serve(t, "GET", "/ui/js/app.js", http.Header{"If-None-Match": {etag}}); resp.StatusCode != http.StatusNotModified {
			t.Errorf("If-None-Match the current ETag: %d, want 304", resp.StatusCode)
		}
	})
	t.Run("policy", func(t *testing.T) {
		for _, d := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(console.ContentSecurityPolicy, d) {
				t.Errorf("the policy lacks %s", d)
			}
		}
		if strings.Contains(console.ContentSecurityPolicy, "unsafe") {
			t.Error("the policy allows something unsafe")
		}
	})
}

var (
	// references are the files the index and the modules load.
	htmlRef   = regexp.MustCompile(`(?:src|href)="([^"#]+)"`)
	importRef = regexp.MustCompile(`(?m)^import [^'"]*['"]([^'"]+)['"];`)
	// foreign finds anything that could reach another host: a URL with a
	// scheme, or protocol-relative. The SVG namespace is a name, not a
	// request.
	foreign = regexp.MustCompile(`(?i)(?:https?:|wss?:)?//[a-z0-9.-]+\.[a-z]{2,}|url\(\s*['"]?(?:https?:)?//`)
	// inline finds what the policy would refuse: inline scripts, style
	// attributes and elements, event-handler attributes.
	inline = regexp.MustCompile(`(?i)<script>|<script(?:\s+type="module")?\s*>|\sstyle=|<style|\son[a-z]+=`)
)

// TestAssetsSelfContained: every file the index and the modules load is
// embedded, and no asset refers to another host or holds what the
// Content-Security-Policy would block, so the console works offline and
// under its policy.
func TestAssetsSelfContained(t *testing.T) {
	root := os.DirFS("static")
	var files []string
	if err := fs.WalkDir(root, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		b, err := fs.ReadFile(root, f)
		if err != nil {
			t.Fatal(err)
		}
		// The SVG namespace names SVG elements (in the favicon's xmlns and
		// the charts' createElementNS); nothing loads it.
		text := strings.NewReplacer(`"http://www.w3.org/2000/svg"`, "", `'http://www.w3.org/2000/svg'`, "").Replace(string(b))
		if m := foreign.FindString(text); m != "" {
			t.Errorf("%s refers to another host: %s", f, m)
		}
		if m := inline.FindString(text); m != "" && path.Ext(f) == ".html" {
			t.Errorf("%s holds %q, which the policy blocks", f, m)
		}
		var refs [][]string
		switch path.Ext(f) {
		case ".html":
			refs = htmlRef.FindAllStringSubmatch(text, -1)
		case ".js":
			refs = importRef.FindAllStringSubmatch(text, -1)
			if strings.Contains(text, "innerHTML") || strings.Contains(text, "eval(") || strings.Contains(text, "localStorage") {
				t.Errorf("%s uses innerHTML, eval or localStorage", f)
			}
		}
		for _, r := range refs {
			target := path.Join(path.Dir(f), r[1])
			if !slices.Contains(files, target) {
				t.Errorf("%s loads %s: not embedded", f, r[1])
			}
		}
	}
	for _, f := range files {
		if resp := serve(t, "GET", console.Prefix+f, nil); resp.StatusCode != 200 {
			t.Errorf("%s is not served: %d", f, resp.StatusCode)
		}
	}
}
