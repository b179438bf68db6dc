package cookie

import (
	"bytes"
	"maps"
	"strings"
	"testing"

	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/engine"
)

var (
	secret1 = bytes.Repeat([]byte{1}, 32)
	secret2 = bytes.Repeat([]byte{2}, 32)
)

func jar(t testing.TB, c config.StickyCookie) *Jar {
	t.Helper()
	f := config.Filter{StickyCookie: &c}
	f.Defaults()
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
	return New(f.StickyCookie)
}

func docs() engine.StickyDocs {
	return engine.StickyDocs{}.Apply([]engine.StickyChange{
		{Attribute: "id", Value: "user-1", Key: "checkout__0", Variation: "0"},
		{Attribute: "id", Value: "user-1", Key: "pricing__2", Variation: "1"},
		{Attribute: "deviceId", Value: "d-ü", Key: "banner__0", Variation: "2"},
	})
}

// The attribute values of docs' unit, as a request carries them.
var (
	names = []string{"deviceId", "email", "id"}
	vals  = []string{"d-ü", "", "user-1"}
)

// value splits a Set-Cookie header into the cookie's value.
func value(t *testing.T, j *Jar, setCookie []byte) string {
	t.Helper()
	nv, _, _ := strings.Cut(string(setCookie), ";")
	name, v, ok := strings.Cut(nv, "=")
	if !ok || name != j.Name() {
		t.Fatalf("Set-Cookie %q: not the jar's cookie", setCookie)
	}
	return v
}

func TestSealOpen(t *testing.T) {
	j := jar(t, config.StickyCookie{Name: "allot_sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	sc, ok := j.Seal(nil, docs())
	if !ok {
		t.Fatal("Seal refused")
	}
	if want := "; Path=/; Max-Age=31536000; Secure; HttpOnly; SameSite=Lax"; !strings.HasSuffix(string(sc), want) {
		t.Errorf("Set-Cookie %q, want attributes %q", sc, want)
	}
	v := value(t, j, sc)
	if !strings.HasPrefix(v, "k1.") {
		t.Errorf("value %q does not name its key", v)
	}
	got, st := j.Open(v, names, vals)
	if st != Valid {
		t.Fatalf("Open: %v", st)
	}
	want := docs()
	if !maps.EqualFunc(got, want, func(a, b engine.StickyDoc) bool {
		return a.AttributeName == b.AttributeName && a.AttributeValue == b.AttributeValue && maps.Equal(a.Assignments, b.Assignments)
	}) {
		t.Errorf("Open = %v, want %v", got, want)
	}
	again, _ := j.Seal(nil, docs())
	if !bytes.Equal(sc, again) {
		t.Errorf("Seal is not deterministic: %q then %q", sc, again)
	}
}

func TestAttributes(t *testing.T) {
	j := jar(t, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k", Secret: secret1}},
		Path: "/shop", Domain: "example.com", MaxAgeSeconds: -1, SameSite: "Strict", Insecure: true, ScriptReadable: true})
	if got, want := j.Attributes(), "; Path=/shop; Domain=example.com; SameSite=Strict"; got != want {
		t.Errorf("attributes %q, want %q", got, want)
	}
}

// TestRotation: a cookie signed by the previous key verifies while that key
// is listed; the jar signs with the first key; once the previous key is
// gone its cookies are invalid.
func TestRotation(t *testing.T) {
	old := jar(t, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	rotated := jar(t, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k2", Secret: secret2}, {ID: "k1", Secret: secret1}}})
	retired := jar(t, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k2", Secret: secret2}}})
	sc, _ := old.Seal(nil, docs())
	v := value(t, old, sc)
	if d, st := rotated.Open(v, names, vals); st != Valid || len(d) != 2 {
		t.Errorf("previous key's cookie after rotation: %v, %d documents; want Valid, 2 (its values hashed with the key it names)", st, len(d))
	}
	if _, st := retired.Open(v, names, vals); st != Invalid {
		t.Errorf("retired key's cookie: %v, want Invalid", st)
	}
	sc2, _ := rotated.Seal(nil, docs())
	v2 := value(t, rotated, sc2)
	if !strings.HasPrefix(v2, "k2.") {
		t.Errorf("rotated jar signs with %q, want k2", v2)
	} else if d, st := retired.Open(v2, names, vals); st != Valid || len(d) != 2 {
		t.Errorf("new key's cookie: %v, %d documents", st, len(d))
	}
	// Each key hashes the values with its own value key: the same
	// documents have other hashes under k2.
	if p1, p2 := payload(t, v), payload(t, v2); bytes.Equal(p1, p2) {
		t.Errorf("payloads under k1 and k2 are equal (%x): values not hashed per key", p1)
	}
}

// payload is a cookie value's decoded payload.
func payload(t *testing.T, v string) []byte {
	t.Helper()
	p, ok := Payload(v)
	if !ok {
		t.Fatalf("value %q: no payload", v)
	}
	return p
}

// TestNoClearValue: neither the cookie nor its decoded payload holds an
// attribute value, a unit id or an e-mail address, in clear; the same
// value of two attributes hashes differently.
func TestNoClearValue(t *testing.T) {
	j := jar(t, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	const id, email = "user-4711-abc", "jane.doe@example.com"
	d := engine.StickyDocs{}.Apply([]engine.StickyChange{
		{Attribute: "id", Value: id, Key: "checkout__0", Variation: "1"},
		{Attribute: "email", Value: email, Key: "newsletter__0", Variation: "0"},
		{Attribute: "deviceId", Value: id, Key: "banner__0", Variation: "0"},
	})
	sc, ok := j.Seal(nil, d)
	if !ok {
		t.Fatal("Seal refused")
	}
	v := value(t, j, sc)
	p := payload(t, v)
	for _, clear := range []string{id, email, "user-", "@example"} {
		if strings.Contains(string(sc), clear) || bytes.Contains(p, []byte(clear)) {
			t.Errorf("cookie %q, payload %q: holds %q in clear", sc, p, clear)
		}
	}
	if p[0] != format || p[1] != 3 {
		t.Fatalf("payload %x: want format %d, 3 documents", p, format)
	}
	// The payload holds three hashes; id and deviceId share the value.
	var hashes [][]byte
	r := reader{b: p[2:]}
	for range 3 {
		r.next()
		hashes = append(hashes, r.fixed(macSize))
		for range 2 * r.count() {
			r.next()
		}
	}
	if r.bad || len(r.b) != 0 {
		t.Fatalf("payload %x does not parse", p)
	}
	if bytes.Equal(hashes[0], hashes[1]) || bytes.Equal(hashes[0], hashes[2]) || bytes.Equal(hashes[1], hashes[2]) {
		t.Errorf("hashes %x: the same value of two attributes hashes the same", hashes)
	}
	got, st := j.Open(v, []string{"deviceId", "email", "id"}, []string{id, email, id})
	if st != Valid || len(got) != 3 || got[engine.StickyDocKey("email", email)].Assignments["newsletter__0"] != "0" {
		t.Errorf("Open: %v %v, want the three documents back", st, got)
	}
}

// TestOpenKeepsTheUnitsOwn: Open returns only the documents of the
// request's values: another unit's (another id on the same browser) and
// those of attributes the request has no value for are dropped.
func TestOpenKeepsTheUnitsOwn(t *testing.T) {
	j := jar(t, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	sc, _ := j.Seal(nil, engine.StickyDocs{}.Apply([]engine.StickyChange{
		{Attribute: "id", Value: "user-a", Key: "checkout__0", Variation: "0"},
		{Attribute: "id", Value: "user-b", Key: "checkout__0", Variation: "1"},
		{Attribute: "deviceId", Value: "dev-1", Key: "banner__0", Variation: "1"},
		{Attribute: "retired", Value: "x", Key: "old__0", Variation: "1"},
	}))
	v := value(t, j, sc)
	for name, tc := range map[string]struct {
		vals []string
		want []string // document keys
	}{
		"unit b":           {[]string{"dev-1", "", "user-b"}, []string{"id||user-b", "deviceId||dev-1"}},
		"unit a":           {[]string{"dev-1", "", "user-a"}, []string{"id||user-a", "deviceId||dev-1"}},
		"signed out":       {[]string{"dev-1", "", ""}, []string{"deviceId||dev-1"}},
		"another device":   {[]string{"dev-2", "", "user-c"}, nil},
		"no values at all": {[]string{"", "", ""}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			got, st := j.Open(v, names, tc.vals)
			if st != Valid || len(got) != len(tc.want) {
				t.Fatalf("Open: %v %v, want %q", st, got, tc.want)
			}
			for _, k := range tc.want {
				if _, ok := got[k]; !ok {
					t.Errorf("Open: %v, want %q", got, k)
				}
			}
		})
	}
}

// TestStale: a cookie of format 1 (attribute values in clear) signed by a
// listed key is Stale; signed by another key it is Invalid.
func TestStale(t *testing.T) {
	j := jar(t, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	// Format 1: count, then name, value, count, key, variation in clear.
	old := []byte{formatClear, 1, 2, 'i', 'd', 6, 'u', 's', 'e', 'r', '-', '1', 1, 11}
	old = append(append(old, "checkout__0"...), 1, '0')
	if _, st := j.Open(signed(j, old), names, vals); st != Stale {
		t.Errorf("format 1 under a listed key: %v, want Stale", st)
	}
	other := jar(t, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret2}}})
	if _, st := j.Open(signed(other, old), names, vals); st != Invalid {
		t.Errorf("format 1 under another key: %v, want Invalid", st)
	}
}

// TestTampered: every change of one byte of a cookie, another cookie
// name's signature, a key id the jar does not know, garbage: never Valid.
func TestTampered(t *testing.T) {
	j := jar(t, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	sc, _ := j.Seal(nil, docs())
	v := value(t, j, sc)
	for i := range len(v) {
		for _, c := range []byte{'A', 'x', '.', '_', '0'} {
			if v[i] == c {
				continue
			}
			b := []byte(v)
			b[i] = c
			if d, st := j.Open(string(b), names, vals); st == Valid {
				t.Fatalf("byte %d changed to %q: Valid, %v", i, c, d)
			}
		}
	}
	other := jar(t, config.StickyCookie{Name: "other", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	osc, _ := other.Seal(nil, docs())
	if _, st := j.Open(value(t, other, osc), names, vals); st != Invalid {
		t.Errorf("another cookie's value: %v, want Invalid", st)
	}
	for _, v := range []string{"x", "k1", "k1.", "k1..", "k1.AQA.", "k9.AQA.AAAAAAAAAAAAAAAAAAAAAA", "..", "k1.%%%.AAAAAAAAAAAAAAAAAAAAAA"} {
		if _, st := j.Open(v, names, vals); st != Invalid {
			t.Errorf("Open(%q) = %v, want Invalid", v, st)
		}
	}
	if _, st := j.Open(strings.Repeat("a", MaxValue+1), names, vals); st != Oversized {
		t.Errorf("oversized: %v", st)
	}
	if _, st := j.Open("", names, vals); st != Absent {
		t.Errorf("empty: %v", st)
	}
}

// TestMalformedPayload: a validly signed payload encode cannot have
// written (forged counts, lengths past the end, a short hash, trailing
// bytes, an unknown format) is Invalid.
func TestMalformedPayload(t *testing.T) {
	j := jar(t, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	good := encode(nil, j.keys[0].values, docs())
	for name, p := range map[string][]byte{
		"empty":          {},
		"format 3":       append([]byte{3}, good[1:]...),
		"trailing byte":  append(append([]byte(nil), good...), 0),
		"truncated":      good[:len(good)-1],
		"huge count":     {format, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"string too far": {format, 1, 9, 'a'},
		"short hash":     {format, 1, 2, 'i', 'd', 1, 2, 3, 0},
	} {
		v := signed(j, p)
		if _, st := j.Open(v, names, vals); st != Invalid {
			t.Errorf("%s: %v, want Invalid", name, st)
		}
	}
}

// signed is a cookie value for payload p, signed with the jar's key.
func signed(j *Jar, p []byte) string {
	k := &j.keys[0]
	s := k.id + "." + b64.EncodeToString(p)
	tag := j.sign(k, s)
	return s + "." + b64.EncodeToString(tag[:macSize])
}

func TestSealTooLarge(t *testing.T) {
	j := jar(t, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	var ch []engine.StickyChange
	for i := range 200 {
		ch = append(ch, engine.StickyChange{Attribute: "id", Value: "u", Key: strings.Repeat("k", 20) + string(rune('a'+i%26)) + "__" + string(rune('0'+i/26)), Variation: "1"})
	}
	dst := []byte("keep")
	out, ok := j.Seal(dst, engine.StickyDocs{}.Apply(ch))
	if ok || string(out) != "keep" {
		t.Errorf("Seal of %d assignments: ok %v, %d bytes; want refused, dst unchanged", len(ch), ok, len(out))
	}
}

func FuzzOpen(f *testing.F) {
	j := jar(f, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	vk := j.keys[0].values
	f.Add(encode(nil, vk, docs()))
	f.Add([]byte{format, 0})
	f.Add([]byte{formatClear, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		d, st := j.Open(signed(j, p), names, vals) // a payload only the key holder could sign: decoding must never panic
		if st != Valid {
			return
		}
		// What decodes encodes back to the same documents.
		if d2, ok := decode(encode(nil, vk, d), vk, names, vals); !ok || len(d2) != len(d) {
			t.Fatalf("payload %x: decoded %v, re-encoded differs", p, d)
		}
	})
}

// BenchmarkOpen is a returning unit's cookie missing the filter's cache:
// verified, decoded and its documents' hashes checked against the
// request's values.
func BenchmarkOpen(b *testing.B) {
	j := jar(b, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	sc, _ := j.Seal(nil, docs())
	v := strings.TrimPrefix(strings.SplitN(string(sc), ";", 2)[0], "sb=")
	b.ReportAllocs()
	for b.Loop() {
		if _, st := j.Open(v, names, vals); st != Valid {
			b.Fatal(st)
		}
	}
}

// BenchmarkSeal is a changed unit's new cookie.
func BenchmarkSeal(b *testing.B) {
	j := jar(b, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	d := docs()
	var dst []byte
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = j.Seal(dst[:0], d)
	}
}
