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
	got, st := j.Open(v)
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
	if _, st := rotated.Open(v); st != Valid {
		t.Errorf("previous key's cookie after rotation: %v, want Valid", st)
	}
	if _, st := retired.Open(v); st != Invalid {
		t.Errorf("retired key's cookie: %v, want Invalid", st)
	}
	sc2, _ := rotated.Seal(nil, docs())
	if v2 := value(t, rotated, sc2); !strings.HasPrefix(v2, "k2.") {
		t.Errorf("rotated jar signs with %q, want k2", v2)
	} else if _, st := retired.Open(v2); st != Valid {
		t.Errorf("new key's cookie: %v", st)
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
			if d, st := j.Open(string(b)); st == Valid {
				t.Fatalf("byte %d changed to %q: Valid, %v", i, c, d)
			}
		}
	}
	other := jar(t, config.StickyCookie{Name: "other", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	osc, _ := other.Seal(nil, docs())
	if _, st := j.Open(value(t, other, osc)); st != Invalid {
		t.Errorf("another cookie's value: %v, want Invalid", st)
	}
	for _, v := range []string{"x", "k1", "k1.", "k1..", "k1.AQA.", "k9.AQA.AAAAAAAAAAAAAAAAAAAAAA", "..", "k1.%%%.AAAAAAAAAAAAAAAAAAAAAA"} {
		if _, st := j.Open(v); st != Invalid {
			t.Errorf("Open(%q) = %v, want Invalid", v, st)
		}
	}
	if _, st := j.Open(strings.Repeat("a", MaxValue+1)); st != Oversized {
		t.Errorf("oversized: %v", st)
	}
	if _, st := j.Open(""); st != Absent {
		t.Errorf("empty: %v", st)
	}
}

// TestMalformedPayload: a validly signed payload encode cannot have
// written (forged counts, lengths past the end, trailing bytes, another
// format) is Invalid.
func TestMalformedPayload(t *testing.T) {
	j := jar(t, config.StickyCookie{Name: "sb", Keys: []config.SigningKey{{ID: "k1", Secret: secret1}}})
	good := encode(nil, docs())
	for name, p := range map[string][]byte{
		"empty":          {},
		"format 2":       append([]byte{2}, good[1:]...),
		"trailing byte":  append(append([]byte(nil), good...), 0),
		"truncated":      good[:len(good)-1],
		"huge count":     {1, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"string too far": {1, 1, 9, 'a'},
	} {
		v := signed(j, p)
		if _, st := j.Open(v); st != Invalid {
			t.Errorf("%s: %v, want Invalid", name, st)
		}
	}
}

// signed is a cookie value for payload p, signed with the jar's key.
func signed(j *Jar, p []byte) string {
	k := &j.keys[0]
	s := k.id + "." + b64.EncodeToString(p)
	tag := j.sign(k, s)
	return s + "." + b64.EncodeToString(tag[:tagSize])
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
	f.Add(encode(nil, docs()))
	f.Add([]byte{1, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		d, st := j.Open(signed(j, p)) // a payload only the key holder could sign: decoding must never panic
		if st != Valid {
			return
		}
		// What decodes encodes back to the same documents.
		if d2, ok := decode(encode(nil, d)); !ok || len(d2) != len(d) {
			t.Fatalf("payload %x: decoded %v, re-encoded differs", p, d)
		}
	})
}
