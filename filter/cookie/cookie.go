// Package cookie is the sticky-bucket cookie: the compact, signed encoding
// of a unit's sticky-bucket documents (engine.StickyDocs) that the filter
// sets on responses and reads back from requests, and its Set-Cookie
// attributes.
//
// A cookie's value is three dot-separated parts:
//
//	<key id>.<payload>.<tag>
//
// payload is the documents, base64url without padding: a format byte (2),
// then the number of documents and, for each, its attribute name, the
// keyed hash of its attribute value (below) and its assignments (key,
// variation), every string length-prefixed (uvarint), documents sorted by
// attribute name and hash, assignments by key, so the same documents
// always give the same value. tag is the first 16 bytes of
// HMAC-SHA-256(key, "<cookie name>=<key id>.<payload>"), base64url: a
// cookie signed for another name, by an unknown key, or changed in any
// byte does not verify.
//
// No attribute value is in the cookie, which is signed, not encrypted:
// each is replaced by the first 16 bytes of HMAC-SHA-256(value key,
// uvarint(len(name)) name value), where the value key of a signing key is
// HMAC-SHA-256(secret, "allot/sticky-cookie/attribute-value"). The
// engine's lookup of a document
// by name||value then works on what the request holds: Open hashes the
// request's own value of each document's attribute with the value key of
// the signing key the cookie names, and returns the documents whose hash
// matches, with the request's values; every other document (another
// unit's, an attribute the request has no value for) is dropped, so a
// cookie the filter writes holds the request's unit alone. A cookie of
// format 1 (values in clear) verifies but is Stale: ignored.
//
// It imports the standard library (bytes, encoding/base64, encoding/binary,
// slices, strconv, strings), filter/config, the engine and
// filter/internal/mac: it is linked into the Wasm module.
package cookie

import (
	"bytes"
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

// macSize is the length of every truncated HMAC the cookie holds: its tag
// and each attribute value's hash (RFC 2104 allows truncating to half the
// hash and no less than 80 bits; 128 bits also make two values of an
// attribute that one browser sees collide with odds of 2^-128).
const macSize = 16

// The payload's first byte.
const (
	// format is the format written: attribute values hashed.
	format = 2
	// formatClear is the previous format, attribute values in clear: read
	// as Stale.
	formatClear = 1
)

// valueKeyLabel derives a signing key's value key: HMAC-SHA-256(secret,
// valueKeyLabel). A separate key keeps the hashes of values a client
// chooses (its own id) from being tags of anything: a tag's message starts
// "<cookie name>=", and a cookie name, an RFC 6265 token, has no '/'.
const valueKeyLabel = "allot/sticky-cookie/attribute-value"

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
	// Stale: signed by a key the jar knows, in the previous format
	// (attribute values in clear), which is no longer read.
	Stale
)

// Jar reads and writes one configuration's sticky cookie. It is read-only
// once made, so workers share it.
type Jar struct {
	name   string
	signed []byte // "<name>=", what every tag's message starts with
	keys   []key  // keys[0] signs
	attrs  string
}

// key is one signing key: its id, its HMAC key for tags and its value key
// for attribute values' hashes.
type key struct {
	id     string
	mac    *mac.Key
	values *mac.Key
}

// New prepares the jar of a checked configuration's sticky cookie
// (config.Filter.Check, Defaults applied).
func New(c *config.StickyCookie) *Jar {
	j := &Jar{name: c.Name, signed: []byte(c.Name + "=")}
	for _, k := range c.Keys {
		m := mac.NewKey(k.Secret)
		v := m.Sum([]byte(valueKeyLabel))
		j.keys = append(j.keys, key{id: k.ID, mac: m, values: mac.NewKey(v[:])})
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

// Open verifies a cookie value and decodes the documents of the request's
// unit: vals[i] is the request's value of attribute names[i] ("" for
// none). A document is returned, with the request's value, when its hash
// is that of the request's value of its attribute under the value key of
// the key the cookie names; the cookie's other documents are dropped. Only
// a Valid cookie has documents (possibly none); any other is to be
// ignored.
func (j *Jar) Open(value string, names, vals []string) (engine.StickyDocs, Status) {
	switch {
	case value == "":
		return nil, Absent
	case len(value) > MaxValue:
		return nil, Oversized
	}
	id, rest, ok1 := strings.Cut(value, ".")
	payload, tag, ok2 := strings.Cut(rest, ".")
	if !ok1 || !ok2 || b64.DecodedLen(len(tag)) != macSize {
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
	var got [macSize]byte
	if n, err := b64.Decode(got[:], []byte(tag)); err != nil || n != macSize {
		return nil, Invalid
	}
	want := j.sign(k, value[:len(id)+1+len(payload)])
	if !mac.Equal(got[:], want[:macSize]) {
		return nil, Invalid
	}
	raw, err := b64.DecodeString(payload)
	if err != nil {
		return nil, Invalid
	}
	if len(raw) > 0 && raw[0] == formatClear {
		return nil, Stale
	}
	docs, ok := decode(raw, k.values, names, vals)
	if !ok {
		return nil, Invalid
	}
	return docs, Valid
}

// Payload returns the decoded payload of a cookie value, or of the
// "<name>=<value>" pair of a Cookie header (a value holds no '='),
// unverified: what anyone who reads the browser's cookies sees (tests
// assert what it does not hold). ok is false for a value that is not
// three parts, or whose payload is not base64url or is shorter than a
// format byte and a count.
func Payload(s string) (p []byte, ok bool) {
	if _, v, found := strings.Cut(s, "="); found {
		s = v
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return nil, false
	}
	p, err := b64.DecodeString(parts[1])
	return p, err == nil && len(p) >= 2
}

// sign is the HMAC of "<name>=<signed>".
func (j *Jar) sign(k *key, signed string) [mac.Size]byte {
	return k.mac.Sum(j.signed, []byte(signed))
}

// valueHash is the keyed hash of attribute name's value under the value
// key vk; its first macSize bytes stand for the value in a cookie.
func valueHash(vk *mac.Key, name, value string) [mac.Size]byte {
	var buf [128]byte
	msg := binary.AppendUvarint(buf[:0], uint64(len(name)))
	msg = append(append(msg, name...), value...)
	return vk.Sum(msg)
}

// Seal appends to dst the Set-Cookie header value that stores docs:
// "<name>=<value>" and the jar's attributes, signed with the jar's first
// key and each attribute value hashed with its value key. ok is false,
// and dst returned unchanged, when the value would be longer than
// MaxValue.
func (j *Jar) Seal(dst []byte, docs engine.StickyDocs) ([]byte, bool) {
	start := len(dst)
	dst = append(dst, j.name...)
	dst = append(dst, '=')
	val := len(dst)
	k := &j.keys[0]
	dst = append(dst, k.id...)
	dst = append(dst, '.')
	dst = b64.AppendEncode(dst, encode(nil, k.values, docs))
	tag := j.sign(k, string(dst[val:]))
	dst = append(dst, '.')
	dst = b64.AppendEncode(dst, tag[:macSize])
	if len(dst)-val > MaxValue {
		return dst[:start], false
	}
	return append(dst, j.attrs...), true
}

// hashed is a document to encode, with its value's hash.
type hashed struct {
	hash [mac.Size]byte
	doc  engine.StickyDoc
}

// encode appends the payload of docs to dst, each attribute value hashed
// with the value key vk.
func encode(dst []byte, vk *mac.Key, docs engine.StickyDocs) []byte {
	list := make([]hashed, 0, len(docs))
	for _, d := range docs {
		list = append(list, hashed{hash: valueHash(vk, d.AttributeName, d.AttributeValue), doc: d})
	}
	slices.SortFunc(list, func(a, b hashed) int {
		if c := strings.Compare(a.doc.AttributeName, b.doc.AttributeName); c != 0 {
			return c
		}
		return bytes.Compare(a.hash[:macSize], b.hash[:macSize])
	})
	dst = append(dst, format)
	dst = binary.AppendUvarint(dst, uint64(len(list)))
	for i := range list {
		h, d := &list[i], &list[i].doc
		dst = appendString(dst, d.AttributeName)
		dst = append(dst, h.hash[:macSize]...)
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

func appendString(dst []byte, s string) []byte {
	return append(binary.AppendUvarint(dst, uint64(len(s))), s...)
}

// decode reads a payload whose values were hashed with the value key vk,
// keeping the documents of the request's values (vals[i] of attribute
// names[i]); ok is false for anything encode cannot have written (another
// format, a length past the end, trailing bytes). The documents it drops
// cost no allocation.
func decode(b []byte, vk *mac.Key, names, vals []string) (docs engine.StickyDocs, ok bool) {
	if len(b) == 0 || b[0] != format {
		return nil, false
	}
	r := reader{b: b[1:]}
	n := r.count()
	// Documents are sorted by name: those of one attribute are adjacent
	// and share the request value's hash, so a cookie costs at most one
	// hash per attribute, however many documents it holds.
	last := -1
	var h [mac.Size]byte
	for range n {
		name, hash := r.next(), r.fixed(macSize)
		value := ""
		for i, nm := range names {
			if nm == string(name) && vals[i] != "" && !r.bad {
				if i != last {
					h, last = valueHash(vk, nm, vals[i]), i
				}
				if string(h[:macSize]) == string(hash) {
					value = vals[i]
				}
				break
			}
		}
		m := r.count()
		if value == "" {
			for range 2 * m {
				r.next()
			}
			continue
		}
		d := engine.StickyDoc{AttributeName: string(name), AttributeValue: value, Assignments: make(map[string]string, m)}
		for range m {
			k := r.next()
			d.Assignments[string(k)] = string(r.next())
		}
		if docs == nil {
			docs = engine.StickyDocs{}
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

// next reads a length-prefixed string, as bytes of the payload.
func (r *reader) next() []byte {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > uint64(len(r.b)-n) {
		r.bad, r.b = true, nil
		return nil
	}
	s := r.b[n : n+int(v)]
	r.b = r.b[n+int(v):]
	return s
}

// fixed reads n bytes.
func (r *reader) fixed(n int) []byte {
	if len(r.b) < n {
		r.bad, r.b = true, nil
		return nil
	}
	s := r.b[:n]
	r.b = r.b[n:]
	return s
}
