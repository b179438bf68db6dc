// Package cookie is the sticky-bucket cookie: the compact, signed encoding
// of a unit's sticky-bucket documents (engine.StickyDocs) that the filter
// sets on responses and reads back from requests, and its Set-Cookie
// attributes.
//
// A cookie's value is three dot-separated parts:
//
//	<key id>.<payload>.<tag>
//
// payload is the documents, base64url without padding: a format byte (1),
// then the number of documents and, for each, its attribute name and value
// and its assignments (key, variation), every string length-prefixed
// (uvarint), documents and assignments sorted by key, so the same
// documents always give the same value. tag is the first 16 bytes of
// HMAC-SHA-256(key, "<cookie name>=<key id>.<payload>"), base64url: a
// cookie signed for another name, by an unknown key, or changed in any
// byte does not verify. A unit can replay only its own cookie, and the
// engine reads only the documents of the unit's own attribute values.
//
// It imports the standard library (encoding/base64, encoding/binary,
// slices, strconv, strings), filter/config, the engine and
// filter/internal/mac: it is linked into the Wasm module.
package cookie

import (
	"encoding/base64"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/config"
	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/internal/mac"
)

// MaxValue is the longest cookie value read or written, in bytes: with its
// name and attributes a cookie stays under the 4,096 bytes browsers keep.
const MaxValue = 3800

// tagSize is the length of the truncated HMAC (RFC 2104 allows truncating
// to half the hash and no less than 80 bits).
const tagSize = 16

// format is the payload's first byte.
const format = 1

// b64 is strict: a value has one encoding, its unused trailing bits zero.
var b64 = base64.RawURLEncoding.Strict()

// Status is what Open found.
type Status uint8

// What Open found.
const (
	// Absent: no cookie.
	Absent Status = iota
	// Valid: the cookie verified and decoded.
	Valid
	// Invalid: malformed, signed by no key the jar knows, or altered.
	Invalid
	// Oversized: longer than MaxValue (not read).
	Oversized
)

// Jar reads and writes one configuration's sticky cookie. It is read-only
// once made, so workers share it.
type Jar struct {
	name   string
	signed []byte // "<name>=", what every tag's message starts with
	keys   []key  // keys[0] signs
	attrs  string
}

type key struct {
	id  string
	mac *mac.Key
}

// New prepares the jar of a checked configuration's sticky cookie
// (config.Filter.Check, Defaults applied).
func New(c *config.StickyCookie) *Jar {
	j := &Jar{name: c.Name, signed: []byte(c.Name + "=")}
	for _, k := range c.Keys {
		j.keys = append(j.keys, key{id: k.ID, mac: mac.NewKey(k.Secret)})
	}
	var b strings.Builder
	b.WriteString("; Path=" + c.Path)
	if c.Domain != "" {
		b.WriteString("; Domain=" + c.Domain)
	}
	if c.MaxAgeSeconds > 0 {
		b.WriteString("; Max-Age=" + strconv.Itoa(c.MaxAgeSeconds))
	}
	if !c.Insecure {
		b.WriteString("; Secure")
	}
	if !c.ScriptReadable {
		b.WriteString("; HttpOnly")
	}
	b.WriteString("; SameSite=" + c.SameSite)
	j.attrs = b.String()
	return j
}

// Name is the cookie's name.
func (j *Jar) Name() string { return j.name }

// Attributes are the attributes every Set-Cookie of the jar carries, each
// after "; ".
func (j *Jar) Attributes() string { return j.attrs }

// Open verifies a cookie value and decodes its documents. Only a Valid
// cookie has documents; any other is to be ignored.
func (j *Jar) Open(value string) (engine.StickyDocs, Status) {
	switch {
	case value == "":
		return nil, Absent
	case len(value) > MaxValue:
		return nil, Oversized
	}
	id, rest, ok1 := strings.Cut(value, ".")
	payload, tag, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || b64.DecodedLen(len(tag)) != tagSize {
		return nil, Invalid
	}
	var k *key
	for i := range j.keys {
		if j.keys[i].id == id {
			k = &j.keys[i]
		}
	}
	if k == nil {
		return nil, Invalid
	}
	var got [tagSize]byte
	if n, err := b64.Decode(got[:], []byte(tag)); err != nil || n != tagSize {
		return nil, Invalid
	}
	want := j.sign(k, value[:len(id)+1+len(payload)])
	if !mac.Equal(got[:], want[:tagSize]) {
		return nil, Invalid
	}
	raw, err := b64.DecodeString(payload)
	if err != nil {
		return nil, Invalid
	}
	docs, ok := decode(raw)
	if !ok {
		return nil, Invalid
	}
	return docs, Valid
}

// sign is the HMAC of "<name>=<signed>".
func (j *Jar) sign(k *key, signed string) [mac.Size]byte {
	return k.mac.Sum(j.signed, []byte(signed))
}

// Seal appends to dst the Set-Cookie header value that stores docs:
// "<name>=<value>" and the jar's attributes. ok is false, and dst returned
// unchanged, when the value would be longer than MaxValue.
func (j *Jar) Seal(dst []byte, docs engine.StickyDocs) ([]byte, bool) {
	start := len(dst)
	dst = append(dst, j.name...)
	dst = append(dst, '=')
	val := len(dst)
	k := &j.keys[0]
	dst = append(dst, k.id...)
	dst = append(dst, '.')
	dst = b64.AppendEncode(dst, encode(nil, docs))
	tag := j.sign(k, string(dst[val:]))
	dst = append(dst, '.')
	dst = b64.AppendEncode(dst, tag[:tagSize])
	if len(dst)-val > MaxValue {
		return dst[:start], false
	}
	return append(dst, j.attrs...), true
}

// encode appends the payload of docs to dst.
func encode(dst []byte, docs engine.StickyDocs) []byte {
	dst = append(dst, format)
	dst = binary.AppendUvarint(dst, uint64(len(docs)))
	for _, dk := range sortedKeys(docs) {
		d := docs[dk]
		dst = appendString(dst, d.AttributeName)
		dst = appendString(dst, d.AttributeValue)
		dst = binary.AppendUvarint(dst, uint64(len(d.Assignments)))
		keys := make([]string, 0, len(d.Assignments))
		for k := range d.Assignments {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, ak := range keys {
			dst = appendString(dst, ak)
			dst = appendString(dst, d.Assignments[ak])
		}
	}
	return dst
}

// sortedKeys returns the documents' keys, sorted.
func sortedKeys(docs engine.StickyDocs) []string {
	keys := make([]string, 0, len(docs))
	for k := range docs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// decode reads a payload; ok is false for anything encode cannot have
// written (another format, a length past the end, trailing bytes).
func decode(b []byte) (docs engine.StickyDocs, ok bool) {
	if len(b) == 0 || b[0] != format {
		return nil, false
	}
	r := reader{b: b[1:]}
	n := r.count()
	docs = make(engine.StickyDocs, n)
	for range n {
		d := engine.StickyDoc{AttributeName: r.str(), AttributeValue: r.str()}
		m := r.count()
		d.Assignments = make(map[string]string, m)
		for range m {
			k := r.str()
			d.Assignments[k] = r.str()
		}
		docs[engine.StickyDocKey(d.AttributeName, d.AttributeValue)] = d
	}
	if r.bad || len(r.b) > 0 {
		return nil, false
	}
	return docs, true
}

// reader reads a payload; after the first error (bad) it reads nothing.
type reader struct {
	b   []byte
	bad bool
}

// count reads a number of items, each at least two bytes: a count the
// remaining bytes cannot hold is an error, so that a forged count never
// sizes a map.
func (r *reader) count() int {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > uint64(len(r.b)-n)/2 {
		r.bad, r.b = true, nil
		return 0
	}
	r.b = r.b[n:]
	return int(v)
}

func (r *reader) str() string {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > uint64(len(r.b)-n) {
		r.bad, r.b = true, nil
		return ""
	}
	s := string(r.b[n : n+int(v)])
	r.b = r.b[n+int(v):]
	return s
}
