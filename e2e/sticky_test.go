//go:build e2e

package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/cookie"
	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/wire"
	"github.com/allotmesh/allot/internal/harness"
)

// stickySecret is the e2e systems' sticky cookie key.
var stickySecret = bytes.Repeat([]byte("e2e-sticky-key!!"), 2)

// TestStickyBucketing is #23's acceptance at the edge gateway, for both
// artifacts, against real Envoy and allotd (-mesh with a stickyCookie,
// -sticky-keys): a unit assigned blue keeps blue after the owner sets the
// weights to 0/100, with the cookie its first response set; a new unit
// gets green; raising bucketVersion re-buckets the first unit (its cookie
// then holds both versions), and raising minBucketVersion past its stored
// buckets excludes it, as GrowthBook defines; a forged or tampered cookie
// is ignored and counted, and so is one of the previous format (values in
// clear), which is replaced; a request without cookies is assigned exactly
// as without stickiness. No cookie holds its unit's id in clear, and a
// unit sent another's cookie gets a cookie of its own document alone.
func TestStickyBucketing(t *testing.T) { forArtifacts(t, testStickyBucketing) }

func testStickyBucketing(t *testing.T, a artifact) {
	mesh := harness.MustWriteFile(t, "mesh.json", `{"stickyCookie": {"name": "allot_sb", "maxAgeSeconds": 86400}}`)
	keys := harness.MustWriteFile(t, "keys.json", fmt.Sprintf(`{"keys": [{"id": "k1", "secret": %q}]}`, base64.StdEncoding.EncodeToString(stickySecret)))
	s := startSystemFor(t, a, "-mesh", mesh, "-sticky-keys", keys)
	_, checkoutPort, _ := splitHostPort(s.echoAddr)
	_, searchPort, _ := splitHostPort(harness.MustStartEcho(t))
	g := startEnvoy(t, a.gateway, s.xdsPort, s.filter(), a.env(), "edge-sticky", "gateway", map[string]string{
		"port_value: 8081": "port_value: " + checkoutPort,
		"port_value: 8082": "port_value: " + searchPort,
	})
	s.waitConnected("edge-sticky")

	def := map[string]any{"key": "button", "variations": []string{"blue", "green"}, "weights": []float64{0.5, 0.5}}
	var w waitedWrite
	s.mustAPI(http.StatusCreated, "POST", "/v1/experiments?wait=10s", def, &w)
	if !w.Rollout.appliedBy(1) {
		t.Fatalf("create: %+v", w.Rollout)
	}
	update := func(change map[string]any) {
		t.Helper()
		for k, v := range change {
			def[k] = v
		}
		def["revision"] = w.Experiment["revision"]
		s.mustAPI(http.StatusOK, "PUT", "/v1/experiments/button?wait=10s", def, &w)
		if !w.Rollout.appliedBy(1) {
			t.Fatalf("update %v: %+v", change, w.Rollout)
		}
	}
	// send makes one request for unit with cookies (a Cookie header if not
	// empty) and returns the upstream's button header ("" if none) and the
	// response's sticky cookie ("" if none).
	send := func(unit, cookies string) (string, string) {
		t.Helper()
		h := map[string][]string{"x-user-id": {unit}}
		if cookies != "" {
			h["cookie"] = []string{cookies}
		}
		r, err := g.getPath("/checkout", h)
		if err != nil {
			t.Fatal(err)
		}
		v := r.Header("x-experiment-button")
		if len(v) > 1 {
			t.Fatalf("%s: x-experiment-button %q", unit, v)
		}
		var set string
		for _, sc := range r.ResponseHeader.Values("Set-Cookie") {
			c, err := http.ParseSetCookie(sc)
			if err != nil || c.Name != "allot_sb" {
				t.Fatalf("Set-Cookie %q: %v", sc, err)
			}
			if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.MaxAge != 86400 {
				t.Errorf("Set-Cookie %q: want Secure, HttpOnly, SameSite=Lax, Path=/, Max-Age=86400", sc)
			}
			if set != "" {
				t.Fatalf("two sticky cookies: %q", r.ResponseHeader.Values("Set-Cookie"))
			}
			set = c.Name + "=" + c.Value
		}
		if len(v) == 0 {
			return "", set
		}
		return v[0], set
	}

	// Without cookies, the assignment is the engine's by hash, as without
	// stickiness, and every response carries the unit's new cookie, which
	// holds the unit's id only hashed: neither its value nor its decoded
	// payload has the id in clear.
	units := userIDs(200)
	want := assignments(t, def, units)
	var alice string
	for _, u := range units {
		v, set := send(u, "")
		if v != want[u] || set == "" {
			t.Fatalf("%s without a cookie: %q, Set-Cookie %q; want %q and a cookie", u, v, set, want[u])
		}
		if p, ok := cookie.Payload(set); !ok || strings.Contains(set, u) || bytes.Contains(p, []byte(u)) {
			t.Fatalf("%s's cookie %q (payload %q) holds its id in clear", u, set, p)
		}
		if d := openCookie(t, set, u); len(d) != 1 || d[engine.StickyDocKey("id", u)].Assignments["button__0"] == "" {
			t.Fatalf("%s's cookie holds %v, want its own document of button__0", u, d)
		}
		if alice == "" && v == "blue" {
			alice = u
		}
	}
	_, jar := send(alice, "")
	if v, set := send(alice, "theme=dark; "+jar); v != "blue" || set != "" {
		t.Fatalf("%s returning its cookie: %q, Set-Cookie %q; want blue and no new cookie", alice, v, set)
	}

	update(map[string]any{"weights": []float64{0, 1}})
	if v, set := send(alice, jar); v != "blue" || set != "" {
		t.Fatalf("after 0/100, %s with its cookie: %q, Set-Cookie %q; want blue, no new cookie", alice, v, set)
	}
	if v, _ := send(alice, ""); v != "green" {
		t.Fatalf("after 0/100, %s without its cookie: %q, want green", alice, v)
	}
	if v, set := send("new-user", ""); v != "green" || set == "" {
		t.Fatalf("after 0/100, a new unit: %q, Set-Cookie %q; want green and a cookie", v, set)
	}

	// A forged cookie (signed by another key), a tampered one, one of
	// another unit: ignored, the unit assigned by hash (green).
	forged := otherKeyCookie(t, alice)
	name, val, _ := strings.Cut(jar, "=")
	b := []byte(val)
	b[len(b)/2] ^= 0x01
	tampered := name + "=" + string(b)
	invalid := func() int64 {
		var n int64
		harness.MustEventually(t, 5*time.Second, func() error {
			n = g.MustStats(t)["wasmcustom."+wire.MetricStickyInvalid]
			return nil
		})
		return n
	}
	before := invalid()
	for _, c := range []string{forged, tampered} {
		if v, set := send(alice, c); v != "green" || set == "" {
			t.Fatalf("%s with a bad cookie %q: %q, Set-Cookie %q; want green (by hash) and a fresh cookie", alice, c, v, set)
		}
	}
	_, bobJar := send("bob", "")
	if v, _ := send(alice, bobJar); v != "green" {
		t.Fatalf("%s with bob's cookie: %q, want green (bob's cookie holds nothing of alice's)", alice, v)
	}
	// A new unit on alice's browser (sent her cookie) gets a cookie of
	// its own document alone: nothing of alice's, not even hashed.
	_, daveJar := send("dave", jar)
	if d, p := openCookie(t, daveJar, "dave"), payloadOf(daveJar); len(d) != 1 || p[1] != 1 {
		t.Fatalf("dave's cookie, made from alice's: %v (payload %q), want dave's one document", d, p)
	}
	harness.MustEventually(t, 5*time.Second, func() error {
		if got := g.MustStats(t)["wasmcustom."+wire.MetricStickyInvalid]; got != before+2 {
			return fmt.Errorf("%s = %d, want %d", wire.MetricStickyInvalid, got, before+2)
		}
		return nil
	})
	// A cookie of the previous format (alice's id in clear), signed by the
	// system's key: ignored, counted as stale, replaced by a cookie of the
	// current format.
	if v, set := send(alice, oldFormatCookie(t, alice)); v != "green" || set == "" || payloadOf(set)[0] != 2 {
		t.Fatalf("%s with an old-format cookie: %q, Set-Cookie %q; want green (by hash) and a fresh cookie of format 2", alice, v, set)
	}
	harness.MustEventually(t, 5*time.Second, func() error {
		if got := g.MustStats(t)["wasmcustom."+wire.MetricStickyStale]; got != 1 {
			return fmt.Errorf("%s = %d, want 1", wire.MetricStickyStale, got)
		}
		return nil
	})

	// bucketVersion 1: the stored bucket of version 0 no longer counts;
	// alice is assigned afresh (green at 0/100) and her cookie keeps both.
	update(map[string]any{"bucketVersion": 1})
	v, jar1 := send(alice, jar)
	if v != "green" || jar1 == "" {
		t.Fatalf("bucketVersion 1: %q, Set-Cookie %q; want green and a new cookie", v, jar1)
	}
	docs := openCookie(t, jar1, alice)[engine.StickyDocKey("id", alice)].Assignments
	if docs["button__0"] != "0" || docs["button__1"] != "1" {
		t.Fatalf("cookie after re-bucketing holds %v, want button__0=0 and button__1=1", docs)
	}
	// minBucketVersion 2 (bucketVersion 2): a unit holding a bucket of a
	// lower version is excluded; a unit without one is assigned.
	update(map[string]any{"bucketVersion": 2, "minBucketVersion": 2})
	if v, _ := send(alice, jar1); v != "" {
		t.Fatalf("minBucketVersion 2, %s with buckets of versions 0 and 1: %q, want excluded", alice, v)
	}
	if v, _ := send("carol", ""); v != "green" {
		t.Fatalf("minBucketVersion 2, a new unit: %q, want green", v)
	}
	if n := g.MustStats(t)["wasmcustom."+wire.MetricFailOpen]; n != 0 {
		t.Errorf("fail_open = %d", n)
	}
}

// otherKeyCookie is a well-formed sticky cookie for unit, naming the
// system's key id but signed with another secret: a forgery.
func otherKeyCookie(t *testing.T, unit string) string {
	t.Helper()
	jar := cookie.New(stickyCookie(t, bytes.Repeat([]byte("x"), 32)))
	sc, ok := jar.Seal(nil, engine.StickyDocs{}.Apply([]engine.StickyChange{{Attribute: "id", Value: unit, Key: "button__0", Variation: "0"}}))
	if !ok {
		t.Fatal("seal")
	}
	nv, _, _ := strings.Cut(string(sc), ";")
	return nv
}

// oldFormatCookie is the cookie the filter set before format 2 for unit
// holding button__0 = 0 (blue), signed with the system's key: format 1,
// the attribute value in clear. The tag is made with crypto/hmac, an
// oracle of the filter's own HMAC.
func oldFormatCookie(t *testing.T, unit string) string {
	t.Helper()
	p := []byte{1, 1, 2, 'i', 'd', byte(len(unit))}
	p = append(p, unit...)
	p = append(append(p, 1, 11), "button__0"...)
	p = append(p, 1, '0')
	v := "k1." + base64.RawURLEncoding.EncodeToString(p)
	m := hmac.New(sha256.New, stickySecret)
	m.Write([]byte("allot_sb=" + v))
	return "allot_sb=" + v + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}

// openCookie verifies and decodes a sticky cookie ("name=value") with the
// system's key: the documents it holds for unit.
func openCookie(t *testing.T, nv, unit string) engine.StickyDocs {
	t.Helper()
	_, v, _ := strings.Cut(nv, "=")
	docs, st := cookie.New(stickyCookie(t, stickySecret)).Open(v, []string{"id"}, []string{unit})
	if st != cookie.Valid {
		t.Fatalf("cookie %q: %v", nv, st)
	}
	return docs
}

// payloadOf is a sticky cookie's decoded payload, at least two bytes.
func payloadOf(nv string) []byte {
	if p, ok := cookie.Payload(nv); ok {
		return p
	}
	return []byte{0, 0}
}

// stickyCookie is the e2e mesh's cookie settings with secret as key k1.
func stickyCookie(t *testing.T, secret []byte) *config.StickyCookie {
	t.Helper()
	f := config.Filter{StickyCookie: &config.StickyCookie{Name: "allot_sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret}}}}
	f.Defaults()
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
	return f.StickyCookie
}
