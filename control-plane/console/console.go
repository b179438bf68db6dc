// Package console is allotd's web console for experiment owners: static
// HTML, CSS and JavaScript modules embedded in the binary, served under
// /ui/ on the admin listener. The console runs in the browser and does
// everything through the public admin API (/v1/ on the same origin, with
// the token the user signs in with), so everything it does is scriptable
// with curl or allotctl; it has no endpoint of its own.
//
// It must not import the admin API or any other package of the control
// plane: it reaches the API only as a client, over HTTP.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

// Prefix is the path the console is served under.
const Prefix = "/ui/"

// ContentSecurityPolicy is the policy every console response carries: the
// page loads scripts, styles, images and data from its own origin only,
// runs no inline script or style, and cannot be framed.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

//go:embed static
var static embed.FS

// asset is one embedded file, ready to serve.
type asset struct {
	body        []byte
	etag        string
	contentType string
}

// contentTypes are the types of the file kinds the console ships; a file
// of any other kind fails Handler (and its test), so nothing is served
// with a guessed type.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// Handler returns the handler of the console under Prefix: GET and HEAD of the embedded
// files, the index at Prefix itself; anything else is 404. Every response
// carries ContentSecurityPolicy and headers that keep the page from being
// sniffed, framed or leaking its URL, and is revalidated by ETag on each
// load (Cache-Control: no-cache), so a new allotd's console is picked up
// at once.
func Handler() (http.Handler, error) {
	assets := map[string]asset{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct, ok := contentTypes[path.Ext(p)]
		if !ok {
			return fmt.Errorf("%s: no content type for %q files", p, path.Ext(p))
		}
		assets[strings.TrimPrefix(p, "static/")] = asset{body: b, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, contentType: ct}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("console assets: %w", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, Prefix)
		if !ok {
			http.NotFound(w, r)
			return
		}
		if name == "" {
			name = "index.html"
		}
		a, ok := assets[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		h.Set("Content-Type", a.contentType)
		h.Set("ETag", a.etag)
		h.Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
	}), nil
}
