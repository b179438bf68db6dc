package plugin_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/abi"
	"github.com/allotmesh/allot/filter/abi/fakehost"
	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/cookie"
	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/plugin"
	"github.com/allotmesh/allot/filter/proxywasm"
	"github.com/allotmesh/allot/filter/wire"
)

var stickySecret = base64.StdEncoding.EncodeToString([]byte(strings.Repeat("s", 32)))

// stickyConfig is a configuration with a sticky cookie and one experiment
// of two variations with the given weights and bucket versions.
func stickyConfig(weights string, bucketVersion, minBucketVersion int) string {
	return fmt.Sprintf(`{"version":"w%s-%d-%d","stickyCookie":{"name":"allot_sb","insecure":true,"keys":[{"id":"k1","secret":%q}]},
		"experiments":[{"key":"checkout","variations":["blue","green"],"weights":[%s],"bucketVersion":%d,"minBucketVersion":%d},
		{"key":"plain","variations":["a","b"],"weights":[0.5,0.5],"disableStickyBucketing":true}]}`,
		weights, bucketVersion, minBucketVersion, stickySecret, weights, bucketVersion, minBucketVersion)
}

// exchange runs one request for unit id carrying cookies (a Cookie header
// when not empty) and returns the checkout assignment ("" if none) and the
// response's Set-Cookie values.
func exchange(t *testing.T, h *fakehost.Host, p *proxywasm.Handler, root uint32, id, cookies string) (string, []string) {
	t.Helper()
	req := [][2]string{{":path", "/"}, {"x-user-id", id}}
	if cookies != "" {
		req = append(req, [2]string{"cookie", cookies})
	}
	up, down, err := h.Exchange(p, root, req, [][2]string{{":status", "200"}})
	if err != nil {
		t.Fatal(err)
	}
	v := values(up, "x-experiment-checkout")
	if len(v) > 1 {
		t.Fatalf("x-experiment-checkout = %q", v)
	}
	if len(v) == 0 {
		return "", values(down, "set-cookie")
	}
	return v[0], values(down, "set-cookie")
}

// cookieOf returns the Cookie header a browser sends back for a
// Set-Cookie value.
func cookieOf(t *testing.T, setCookie []string) string {
	t.Helper()
	if len(setCookie) != 1 {
		t.Fatalf("Set-Cookie %q, want one", setCookie)
	}
	nv, attrs, _ := strings.Cut(setCookie[0], ";")
	if want := " Path=/; Max-Age=31536000; HttpOnly; SameSite=Lax"; attrs != want {
		t.Errorf("cookie attributes %q, want %q", attrs, want)
	}
	return nv
}

// unitIn finds a unit the 50/50 split gives variation want.
func unitIn(t *testing.T, want string) string {
	t.Helper()
	for i := range 100 {
		id := fmt.Sprintf("u%d", i)
		if expected(t, stickyConfig("0.5,0.5", 0, 0), id)["checkout"] == want {
			return id
		}
	}
	t.Fatal("no unit found")
	return ""
}

// TestStickyAcrossWeightChange is the scenario on the fake host:
// a unit assigned blue keeps blue after the weights go to 0/100, with the
// cookie its first response set; a new unit gets green; bumping
// bucketVersion re-buckets the first unit; raising minBucketVersion past
// its stored bucket excludes it.
func TestStickyAcrossWeightChange(t *testing.T) {
	h, p, root := start(t, stickyConfig("0.5,0.5", 0, 0))
	alice := unitIn(t, "blue")
	v, sc := exchange(t, h, p, root, alice, "")
	if v != "blue" {
		t.Fatalf("first request: %q, want blue", v)
	}
	jar := cookieOf(t, sc)
	if v, sc := exchange(t, h, p, root, alice, "theme=dark; "+jar); v != "blue" || len(sc) != 0 {
		t.Fatalf("same configuration, cookie returned: %q, Set-Cookie %q; want blue and no new cookie", v, sc)
	}

	if !h.Configure(p, root, []byte(stickyConfig("0,1", 0, 0))) {
		t.Fatalf("0/100 refused: %v", h.Logs)
	}
	if v, sc := exchange(t, h, p, root, alice, jar); v != "blue" || len(sc) != 0 {
		t.Fatalf("after 0/100 with the cookie: %q, Set-Cookie %q; want blue, no new cookie", v, sc)
	}
	if v, _ := exchange(t, h, p, root, alice, ""); v != "green" {
		t.Fatalf("after 0/100 without the cookie: %q, want green", v)
	}
	bob := unitIn(t, "blue") + "-new"
	v, sc = exchange(t, h, p, root, bob, "")
	if v != "green" || len(sc) != 1 {
		t.Fatalf("new unit after 0/100: %q, Set-Cookie %q; want green and a cookie", v, sc)
	}
	// alice's cookie does not carry bob's assignment: a cookie is the
	// unit's own.
	if v, _ := exchange(t, h, p, root, bob, jar); v != "green" {
		t.Fatalf("bob with alice's cookie: %q, want green (his own hash)", v)
	}

	if !h.Configure(p, root, []byte(stickyConfig("0,1", 1, 0))) {
		t.Fatalf("bucketVersion 1 refused: %v", h.Logs)
	}
	v, sc = exchange(t, h, p, root, alice, jar)
	if v != "green" {
		t.Fatalf("bucketVersion 1: %q, want green (re-bucketed)", v)
	}
	jar2 := cookieOf(t, sc)
	docs, st := decodeCookie(t, jar2, alice)
	if st != cookie.Valid || docs[engine.StickyDocKey("id", alice)].Assignments["checkout__0"] != "0" || docs[engine.StickyDocKey("id", alice)].Assignments["checkout__1"] != "1" {
		t.Fatalf("cookie after re-bucketing: %v %v, want checkout__0=0 and checkout__1=1", st, docs)
	}

	if !h.Configure(p, root, []byte(stickyConfig("0,1", 2, 2))) {
		t.Fatalf("minBucketVersion 2 refused: %v", h.Logs)
	}
	if v, _ := exchange(t, h, p, root, alice, jar2); v != "" {
		t.Fatalf("minBucketVersion above the stored buckets: %q, want excluded", v)
	}
	if v, _ := exchange(t, h, p, root, alice+"-fresh", ""); v != "green" {
		t.Fatalf("a unit with no stored bucket under minBucketVersion 2: %q, want green", v)
	}
}

// decodeCookie opens a sticky cookie ("name=value") for unit id: the
// documents it holds for that id.
func decodeCookie(t *testing.T, nv, id string) (engine.StickyDocs, cookie.Status) {
	t.Helper()
	f, _, err := config.Parse([]byte(stickyConfig("0,1", 0, 0)))
	if err != nil {
		t.Fatal(err)
	}
	_, v, _ := strings.Cut(nv, "=")
	return cookie.New(f.StickyCookie).Open(v, []string{"id"}, []string{id})
}

// TestStickyBadCookies: a forged, tampered, foreign-key or oversized
// cookie is ignored and counted; the unit is assigned by hash and given a
// good cookie; the request never fails.
func TestStickyBadCookies(t *testing.T) {
	h, p, root := start(t, stickyConfig("0.5,0.5", 0, 0))
	alice := unitIn(t, "blue")
	_, sc := exchange(t, h, p, root, alice, "")
	jar := cookieOf(t, sc)
	if !h.Configure(p, root, []byte(stickyConfig("0,1", 0, 0))) {
		t.Fatal("refused")
	}
	name, val, _ := strings.Cut(jar, "=")
	tampered := []byte(val)
	tampered[5] ^= 1
	for _, tc := range []struct {
		name, cookie, metric string
	}{
		{"forged", name + "=k1.AQEFAmlkBWFsaWNlAQtjaGVja291dF9fMAEw.AAAAAAAAAAAAAAAAAAAAAA", wire.MetricStickyInvalid},
		{"tampered", name + "=" + string(tampered), wire.MetricStickyInvalid},
		{"unknown key", name + "=k9." + val[3:], wire.MetricStickyInvalid},
		{"garbage", name + "=%%%", wire.MetricStickyInvalid},
		{"oversized", name + "=" + strings.Repeat("a", cookie.MaxValue+1), wire.MetricStickyOversized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.Counter(tc.metric)
			v, sc := exchange(t, h, p, root, alice, tc.cookie)
			if v != "green" {
				t.Errorf("assignment %q, want green (by hash, the cookie ignored)", v)
			}
			if len(sc) != 1 {
				t.Errorf("Set-Cookie %q, want a fresh cookie", sc)
			}
			p.OnTick(root)
			if got := h.Counter(tc.metric); got != before+1 {
				t.Errorf("%s = %d, want %d", tc.metric, got, before+1)
			}
		})
	}
	if n := h.Counter(wire.MetricFailOpen); n != 0 {
		t.Errorf("fail_open = %d", n)
	}
}

// TestStickyCache: a request repeating a valid cookie is a cache hit and
// sets nothing; requests that set a cookie are never cached.
func TestStickyCache(t *testing.T) {
	h, p, root := start(t, stickyConfig("0.5,0.5", 0, 0))
	_, sc := exchange(t, h, p, root, "carol", "")
	if _, sc2 := exchange(t, h, p, root, "carol", ""); len(sc2) != 1 {
		t.Fatalf("second cookieless request: Set-Cookie %q, want one again", sc2)
	}
	jar := cookieOf(t, sc)
	p.OnTick(root)
	hits := h.Counter(wire.MetricCacheHits)
	for range 3 {
		if _, sc := exchange(t, h, p, root, "carol", jar); len(sc) != 0 {
			t.Fatalf("cookie returned: Set-Cookie %q", sc)
		}
	}
	p.OnTick(root)
	if got := h.Counter(wire.MetricCacheHits) - hits; got != 2 {
		t.Errorf("cache hits = %d, want 2 (the first of three computes)", got)
	}
	if got := h.Counter(wire.MetricStickyWritten); got != 2 {
		t.Errorf("%s = %d, want 2", wire.MetricStickyWritten, got)
	}
}

// TestStickyOffSetsNothing: without a sticky cookie the response is left
// alone, and a cookie of the name changes nothing.
func TestStickyOffSetsNothing(t *testing.T) {
	h, p, root := start(t, twoArm)
	_, down, err := h.Exchange(p, root, [][2]string{{"x-user-id", "u1"}, {"cookie", "allot_sb=k1.x.y"}}, [][2]string{{":status", "200"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(down) != 1 {
		t.Errorf("response headers %q, want only :status", down)
	}
	for _, n := range []string{wire.MetricStickyInvalid, wire.MetricStickyWritten} {
		if _, ok := h.Metrics[n]; ok {
			t.Errorf("%s defined without a sticky cookie", n)
		}
	}
}

// TestStickyFailOpenSetsNoCookie: a request that fails open changes no
// sticky assignment, so its response sets no cookie.
func TestStickyFailOpenSetsNoCookie(t *testing.T) {
	h, p, root := start(t, stickyConfig("0.5,0.5", 0, 0))
	h.Inject(fakehost.Fault{Call: "proxy_add_header_map_value", Nth: 1})
	up, down, err := h.Exchange(p, root, [][2]string{{"x-user-id", "dave"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ownedHeaders(up)) != 0 || len(values(down, "set-cookie")) != 0 {
		t.Errorf("failed request: upstream %q, downstream %q; want neither assignment nor cookie", up, down)
	}
	h.Fail = nil
	// A failed Set-Cookie add (the last add of a request that sets a
	// cookie) costs the unit its cookie only.
	h.Trace, h.Calls = true, nil
	exchange(t, h, p, root, "dave-2", "")
	adds := 0
	for _, c := range h.Calls {
		if c == "proxy_add_header_map_value" {
			adds++
		}
	}
	h.Trace = false
	h.Inject(fakehost.Fault{Call: "proxy_add_header_map_value", Nth: adds, Panic: true})
	v, sc := exchange(t, h, p, root, "dave", "")
	if v == "" || len(sc) != 0 || h.Fired != 1 {
		t.Errorf("Set-Cookie add panicked: assignment %q, Set-Cookie %q, fired %d", v, sc, h.Fired)
	}
	if n := p.Waiting(); n != 0 {
		t.Errorf("%d cookies left pending", n)
	}
}

// TestStickyPrune: a cookie that would be too long loses the assignments
// of experiments the configuration no longer has, and keeps the unit's
// own.
func TestStickyPrune(t *testing.T) {
	cfg := stickyConfig("0.5,0.5", 0, 0)
	h, p, root := start(t, cfg)
	f, _, _ := config.Parse([]byte(cfg))
	jar := cookie.New(f.StickyCookie)
	// The longest cookie of erin's assignments of retired experiments
	// that still fits.
	var ch []engine.StickyChange
	var big []byte
	for _, size := range []string{"retired-experiment-%03d", "r%d"} { // coarse, then fine
		for i := 0; ; i++ {
			c := engine.StickyChange{Attribute: "id", Value: "erin", Key: fmt.Sprintf(size, i) + "__0", Variation: "1"}
			b, ok := jar.Seal(nil, engine.StickyDocs{}.Apply(append(ch, c)))
			if !ok {
				break
			}
			ch, big = append(ch, c), b
		}
	}
	nv, _, _ := strings.Cut(string(big), ";")
	v, sc := exchange(t, h, p, root, "erin", nv)
	if v == "" || len(sc) != 1 {
		t.Fatalf("assignment %q, Set-Cookie %q", v, sc)
	}
	docs, st := decodeCookie(t, cookieOf(t, sc), "erin")
	if st != cookie.Valid || len(docs) != 1 || len(docs[engine.StickyDocKey("id", "erin")].Assignments) != 1 {
		t.Errorf("pruned cookie: %v %v, want erin's one assignment", st, docs)
	}
}

func TestStickyConfigErrors(t *testing.T) {
	for name, tc := range map[string]struct{ cfg, want string }{
		"no name":     {`{"stickyCookie":{"keys":[{"id":"k","secret":"` + stickySecret + `"}]}}`, "stickyCookie.name: is required"},
		"bad name":    {`{"stickyCookie":{"name":"a b","keys":[{"id":"k","secret":"` + stickySecret + `"}]}}`, "stickyCookie.name: \"a b\" is not a cookie name"},
		"no keys":     {`{"stickyCookie":{"name":"sb"}}`, "stickyCookie.keys: at least one signing key is required"},
		"short key":   {`{"stickyCookie":{"name":"sb","keys":[{"id":"k","secret":"c2hvcnQ="}]}}`, "stickyCookie.keys[0].secret: 5 bytes, at least 32"},
		"bad base64":  {`{"stickyCookie":{"name":"sb","keys":[{"id":"k","secret":"!!"}]}}`, "stickyCookie.keys[0].secret: not base64"},
		"bad id":      {`{"stickyCookie":{"name":"sb","keys":[{"id":"k.1","secret":"` + stickySecret + `"}]}}`, `stickyCookie.keys[0].id: "k.1" is not 1 to 16 characters`},
		"twice":       {`{"stickyCookie":{"name":"sb","keys":[{"id":"k","secret":"` + stickySecret + `"},{"id":"k","secret":"` + stickySecret + `"}]}}`, `stickyCookie.keys[1].id: "k" is given twice`},
		"samesite":    {`{"stickyCookie":{"name":"sb","sameSite":"lax","keys":[{"id":"k","secret":"` + stickySecret + `"}]}}`, `stickyCookie.sameSite: "lax" is not`},
		"none":        {`{"stickyCookie":{"name":"sb","sameSite":"None","insecure":true,"keys":[{"id":"k","secret":"` + stickySecret + `"}]}}`, `stickyCookie.sameSite: "None" requires Secure`},
		"path":        {`{"stickyCookie":{"name":"sb","path":"shop","keys":[{"id":"k","secret":"` + stickySecret + `"}]}}`, `stickyCookie.path: "shop" is not a path`},
		"unknown key": {`{"stickyCookie":{"name":"sb","secure":true,"keys":[{"id":"k","secret":"` + stickySecret + `"}]}}`, `stickyCookie.secure: unknown field`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := plugin.ParseConfig([]byte(tc.cfg))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

var _ = abi.ResponseHeaders

// privateConfig has a sticky experiment hashing the unit id and one
// hashing its e-mail address.
func privateConfig(weights string) string {
	return fmt.Sprintf(`{"version":"p%s","stickyCookie":{"name":"allot_sb","insecure":true,"keys":[{"id":"k1","secret":%q}]},
		"attributes":[{"name":"email","header":"x-email"}],
		"experiments":[{"key":"checkout","variations":["blue","green"],"weights":[%s]},
		{"key":"newsletter","variations":["weekly","daily"],"weights":[%s],"hashAttribute":"email"}]}`,
		weights, stickySecret, weights, weights)
}

// TestStickyCookieHoldsNoClearValue: the cookie carries neither the unit
// id nor the e-mail address it was assigned by, in its value or in its
// decoded payload, and still keeps the unit in both experiments after the
// weights change.
func TestStickyCookieHoldsNoClearValue(t *testing.T) {
	h, p, root := start(t, privateConfig("0.5,0.5"))
	const id, email = "alice-7f3a9c", "alice.smith@example.com"
	send := func(c string) (map[string]string, []string) {
		t.Helper()
		req := [][2]string{{":path", "/"}, {"x-user-id", id}, {"x-email", email}}
		if c != "" {
			req = append(req, [2]string{"cookie", c})
		}
		up, down, err := h.Exchange(p, root, req, [][2]string{{":status", "200"}})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, k := range []string{"checkout", "newsletter"} {
			if v := values(up, "x-experiment-"+k); len(v) == 1 {
				got[k] = v[0]
			}
		}
		return got, values(down, "set-cookie")
	}
	first, sc := send("")
	if len(first) != 2 {
		t.Fatalf("assignments %v, want both experiments", first)
	}
	jar := cookieOf(t, sc)
	payload, ok := cookie.Payload(jar)
	if !ok {
		t.Fatalf("cookie %q has no payload", jar)
	}
	for _, clear := range []string{id, email, "alice"} {
		if strings.Contains(sc[0], clear) || bytes.Contains(payload, []byte(clear)) {
			t.Errorf("cookie %q (payload %q) holds %q in clear", sc[0], payload, clear)
		}
	}
	// Both experiments go to the other variation for new units: the
	// cookie's hashed documents must still keep this unit where it was.
	flipped := "1,0"
	if first["checkout"] == "blue" {
		flipped = "0,1"
	}
	if !h.Configure(p, root, []byte(privateConfig(flipped))) {
		t.Fatalf("weights %s refused: %v", flipped, h.Logs)
	}
	if got, sc := send(jar); got["checkout"] != first["checkout"] || len(sc) != 0 {
		t.Errorf("after weights %s with the cookie: %v, Set-Cookie %q; want checkout %q kept, no new cookie", flipped, got, sc, first["checkout"])
	}
}

// TestStickyCookieOneUnit: a response's cookie holds the documents of the
// request's own unit only. Unit B sent unit A's cookie (a shared browser)
// gets a cookie with B's document alone: nothing of A's, not even hashed,
// so A sent B's cookie later keeps nothing.
func TestStickyCookieOneUnit(t *testing.T) {
	h, p, root := start(t, stickyConfig("0.5,0.5", 0, 0))
	alice := "alice-shared-browser"
	for i := 0; expected(t, stickyConfig("0.5,0.5", 0, 0), alice)["checkout"] != "blue"; i++ {
		alice = fmt.Sprintf("alice-shared-browser-%d", i)
	}
	_, sc := exchange(t, h, p, root, alice, "")
	aliceJar := cookieOf(t, sc)
	_, sc = exchange(t, h, p, root, "bob-shared-browser", aliceJar)
	bobJar := cookieOf(t, sc)
	payload, _ := cookie.Payload(bobJar)
	if bytes.Contains(payload, []byte(alice)) {
		t.Errorf("bob's cookie holds alice's id: %q", payload)
	}
	// Format 2: the format byte, then the number of documents.
	if len(payload) < 2 || payload[1] != 1 {
		t.Errorf("bob's cookie payload %q: want exactly one document", payload)
	}
	// The cookie is the one bob gets on a browser of his own.
	if _, sc := exchange(t, h, p, root, "bob-shared-browser", ""); cookieOf(t, sc) != bobJar {
		t.Errorf("bob's cookie from alice's browser %q, from his own %q: want the same", bobJar, cookieOf(t, sc))
	}
	if !h.Configure(p, root, []byte(stickyConfig("0,1", 0, 0))) {
		t.Fatal("0/100 refused")
	}
	if v, _ := exchange(t, h, p, root, alice, bobJar); v != "green" {
		t.Errorf("alice with bob's cookie after 0/100: %q, want green (bob's cookie keeps nothing of alice's)", v)
	}
	if v, _ := exchange(t, h, p, root, alice, aliceJar); v != "blue" {
		t.Errorf("alice with her own cookie after 0/100: %q, want blue", v)
	}
}

// oldFormatCookie is a sticky cookie of format 1 (documents with attribute
// values in clear), as the filter set it before format 2, for stickyConfig's
// key: unit u0 (blue at 50/50) holding checkout__0 = 0.
const oldFormatCookie = "allot_sb=k1.AQECaWQCdTABC2NoZWNrb3V0X18wATA.rvjZq8Ha37ztPJ1dYDihRw"

// TestStickyOldFormat: a cookie of the previous format verifies but is
// ignored and counted as stale (not invalid); the unit is assigned by hash
// and given a cookie of the current format, which then keeps it.
func TestStickyOldFormat(t *testing.T) {
	h, p, root := start(t, stickyConfig("0,1", 0, 0))
	if u := unitIn(t, "blue"); u != "u0" {
		t.Fatalf("the fixture is u0's, blue at 50/50; unitIn found %q", u)
	}
	v, sc := exchange(t, h, p, root, "u0", oldFormatCookie)
	if v != "green" || len(sc) != 1 {
		t.Fatalf("old-format cookie at 0/100: %q, Set-Cookie %q; want green (by hash) and a fresh cookie", v, sc)
	}
	fresh := cookieOf(t, sc)
	if b, ok := cookie.Payload(fresh); !ok || b[0] != 2 {
		t.Errorf("fresh cookie's payload %q, want format 2", b)
	}
	p.OnTick(root)
	for metric, want := range map[string]int64{wire.MetricStickyStale: 1, wire.MetricStickyInvalid: 0, wire.MetricFailOpen: 0, wire.MetricStickyWritten: 1} {
		if got := h.Counter(metric); got != want {
			t.Errorf("%s = %d, want %d", metric, got, want)
		}
	}
	if v, sc := exchange(t, h, p, root, "u0", fresh); v != "green" || len(sc) != 0 {
		t.Errorf("with the fresh cookie: %q, Set-Cookie %q; want green, no new cookie", v, sc)
	}
}
