// Package mac is HMAC-SHA-256 (RFC 2104 over FIPS 180-4's SHA-256) for the
// filter, which signs and verifies its sticky-bucket cookies with it. The
// standard library's crypto/hmac and crypto/sha256 link os and time through
// their FIPS 140 module, which the Wasm module must not (each MB of module
// costs every Envoy worker memory), so the filter carries its own: about a
// hundred lines, checked against crypto/hmac by its tests and fuzz target.
//
// A Key keeps the hash state after the padded key's block, so signing costs
// the message's blocks and two more. Nothing here allocates after NewKey.
// It imports only the standard library's encoding/binary and math/bits.
package mac

import (
	"encoding/binary"
	"math/bits"
)

// Size is the length of a full HMAC-SHA-256 tag.
const Size = 32

const blockSize = 64

// Key is an HMAC-SHA-256 key, prepared: the SHA-256 states after the inner
// and outer padded key blocks.
type Key struct {
	inner, outer [8]uint32
}

// NewKey prepares secret as an HMAC key (a secret longer than a block is
// hashed first, as RFC 2104 says).
func NewKey(secret []byte) *Key {
	var block [blockSize]byte
	if len(secret) > blockSize {
		d := Sum256(secret)
		copy(block[:], d[:])
	} else {
		copy(block[:], secret)
	}
	k := &Key{inner: iv, outer: iv}
	var pad [blockSize]byte
	for i := range block {
		pad[i] = block[i] ^ 0x36
	}
	compress(&k.inner, pad[:])
	for i := range block {
		pad[i] = block[i] ^ 0x5c
	}
	compress(&k.outer, pad[:])
	return k
}

// Sum returns HMAC-SHA-256(key, parts joined): the parts are hashed as one
// message, so a caller signs a message in pieces without concatenating it.
func (k *Key) Sum(parts ...[]byte) [Size]byte {
	d := digest{h: k.inner, n: blockSize}
	for _, p := range parts {
		d.write(p)
	}
	in := d.sum()
	o := digest{h: k.outer, n: blockSize}
	o.write(in[:])
	return o.sum()
}

// Equal reports whether a and b are equal, in time that depends only on
// their lengths: a forger learns nothing from how long a comparison took.
func Equal(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	var v byte
	for i := range a {
		v |= a[i] ^ b[i]
	}
	return v == 0
}

// Sum256 is SHA-256 of data.
func Sum256(data []byte) [Size]byte {
	d := digest{h: iv}
	d.write(data)
	return d.sum()
}

// digest is a running SHA-256: the state, the partial block and the
// number of bytes hashed.
type digest struct {
	h   [8]uint32
	buf [blockSize]byte
	nb  int    // bytes in buf
	n   uint64 // bytes written in all
}

func (d *digest) write(p []byte) {
	d.n += uint64(len(p))
	if d.nb > 0 {
		c := copy(d.buf[d.nb:], p)
		d.nb += c
		p = p[c:]
		if d.nb < blockSize {
			return
		}
		compress(&d.h, d.buf[:])
		d.nb = 0
	}
	for len(p) >= blockSize {
		compress(&d.h, p[:blockSize])
		p = p[blockSize:]
	}
	d.nb = copy(d.buf[:], p)
}

func (d *digest) sum() [Size]byte {
	bitLen := d.n << 3
	var pad [blockSize + 8]byte
	pad[0] = 0x80
	m := 1 + (55-d.nb+blockSize)%blockSize // padding up to 56 mod 64
	binary.BigEndian.PutUint64(pad[m:], bitLen)
	d.write(pad[:m+8])
	var out [Size]byte
	for i, v := range d.h {
		binary.BigEndian.PutUint32(out[4*i:], v)
	}
	return out
}

var iv = [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

var k256 = [64]uint32{
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
	0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
	0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
	0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
	0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
	0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
	0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
}

// compress runs SHA-256's compression function over one 64-byte block.
func compress(h *[8]uint32, p []byte) {
	var w [64]uint32
	for i := 0; i < 16; i++ {
		w[i] = binary.BigEndian.Uint32(p[4*i:])
	}
	for i := 16; i < 64; i++ {
		v1, v2 := w[i-2], w[i-15]
		s1 := bits.RotateLeft32(v1, -17) ^ bits.RotateLeft32(v1, -19) ^ v1>>10
		s0 := bits.RotateLeft32(v2, -7) ^ bits.RotateLeft32(v2, -18) ^ v2>>3
		w[i] = s1 + w[i-7] + s0 + w[i-16]
	}
	a, b, c, d, e, f, g, hh := h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
	for i := 0; i < 64; i++ {
		t1 := hh + (bits.RotateLeft32(e, -6) ^ bits.RotateLeft32(e, -11) ^ bits.RotateLeft32(e, -25)) + (e&f ^ ^e&g) + k256[i] + w[i]
		t2 := (bits.RotateLeft32(a, -2) ^ bits.RotateLeft32(a, -13) ^ bits.RotateLeft32(a, -22)) + (a&b ^ a&c ^ b&c)
		hh, g, f, e, d, c, b, a = g, f, e, d+t1, c, b, a, t1+t2
	}
	h[0] += a
	h[1] += b
	h[2] += c
	h[3] += d
	h[4] += e
	h[5] += f
	h[6] += g
	h[7] += hh
}
