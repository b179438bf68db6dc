package engine

import "unicode/utf8"

// The primitives below reproduce GrowthBook's reference functions
// (hash, getBucketRanges, chooseVariation, inNamespace, getEqualWeights),
// including how they treat invalid input, so the conformance suite can run
// them directly. Compile rejects the invalid definitions they tolerate.
//
// Strings hash as JavaScript sees them: FNV-1a runs over UTF-16 code units
// (String.charCodeAt), so non-ASCII ids ("Zoë", "用户", "😀") bucket exactly
// as in GrowthBook's JavaScript SDK and its Go SDK v0.7.0.

const (
	fnvOffset32 = 2166136261
	fnvPrime32  = 16777619
)

// fnv1a continues a 32-bit FNV-1a hash h over the UTF-16 code units of s
// (what JavaScript's charCodeAt returns), without converting s. An ASCII
// byte is its own code unit; other runes are one code unit in the Basic
// Multilingual Plane and a surrogate pair above it. Invalid UTF-8 hashes as
// U+FFFD one byte at a time (utf8.DecodeRuneInString's reading): that is the
// string JavaScript would receive, since jsonx (ValidString, decoding) and
// encoding/json turn each invalid byte into U+FFFD before a value leaves Go.
// Hashing in pieces (the seed's state, then the value) is hashing the
// concatenation of the pieces' code units, as JavaScript's seed + value is.
func fnv1a(h uint32, s string) uint32 {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return fnv1aUTF16(h, s[i:])
		}
		h ^= uint32(c)
		h *= fnvPrime32
	}
	return h
}

// fnv1aUTF16 is fnv1a from the first non-ASCII byte on: the ASCII loop
// above stays as tight as a byte loop.
func fnv1aUTF16(h uint32, s string) uint32 {
	for _, r := range s { // invalid UTF-8 ranges as U+FFFD per byte
		if r >= 0x10000 {
			r -= 0x10000
			h ^= 0xD800 + uint32(r)>>10
			h *= fnvPrime32
			r = 0xDC00 + r&0x3FF
		}
		h ^= uint32(r)
		h *= fnvPrime32
	}
	return h
}

// Hash is GrowthBook's hash(seed, value, version): a number in [0, 1).
// Version 1 is fnv1a(value+seed) % 1000 / 1000; version 2 is
// fnv1a(decimal(fnv1a(seed+value))) % 10000 / 10000. Any other version
// returns ok == false. Hash does not allocate.
func Hash(seed, value string, version int) (n float64, ok bool) {
	switch version {
	case 1:
		h := fnv1a(fnv1a(fnvOffset32, value), seed)
		return float64(h%1000) / 1000, true
	case 2:
		return hashV2(fnv1a(fnv1a(fnvOffset32, seed), value)), true
	}
	return 0, false
}

// unitHash computes Hash for one unit's value under many seeds without
// hashing the value again for each: version 1 hashes value+seed, so the
// FNV state after the value is shared; version 2 hashes seed+value, so the
// state after the seed is precomputed per experiment (seedState).
type unitHash struct {
	value string
	state uint32
	ok    bool
}

// hash is Hash(seed, value, version) given seedState = fnv1a(offset, seed).
func (u *unitHash) hash(seed string, seedState uint32, value string, version int) (float64, bool) {
	switch version {
	case 1:
		if !u.ok || u.value != value {
			u.value, u.state, u.ok = value, fnv1a(fnvOffset32, value), true
		}
		return float64(fnv1a(u.state, seed)%1000) / 1000, true
	case 2:
		return hashV2(fnv1a(seedState, value)), true
	}
	return 0, false
}

// hashV2 finishes version 2 from h = fnv1a(seed+value): FNV-1a of h's
// decimal digits, modulo 10000.
func hashV2(h uint32) float64 {
	var buf [10]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + h%10)
		h /= 10
		if h == 0 {
			break
		}
	}
	h2 := uint32(fnvOffset32)
	for _, c := range buf[i:] {
		h2 ^= uint32(c)
		h2 *= fnvPrime32
	}
	return float64(h2%10000) / 10000
}

// EqualWeights is GrowthBook's getEqualWeights(n): n weights of 1/n, or none
// when n <= 0.
func EqualWeights(n int) []float64 {
	if n <= 0 {
		return []float64{}
	}
	w := make([]float64, n)
	for i := range w {
		w[i] = 1 / float64(n)
	}
	return w
}

// BucketRanges is GrowthBook's getBucketRanges: one [start, end) range per
// variation, start at the cumulative weight, end at start+coverage*weight.
// Like the reference it clamps coverage to [0, 1] and falls back to equal
// weights when weights are nil, of the wrong length, or do not sum to
// within 0.01 of 1. The arithmetic (and its order) is the reference's, so
// boundaries agree bit for bit: in particular the end rounds coverage*w
// before adding it to start. The Go spec lets a compiler fuse x*y + z into
// one FMA (Go does on arm64, and on amd64 with GOAMD64=v3), which moves some
// ends by one ulp; the explicit float64 conversion forbids that, so native,
// Wasm and control-plane builds agree. This is the engine's only
// floating-point multiply-add.
func BucketRanges(numVariations int, coverage float64, weights []float64) [][2]float64 {
	if coverage < 0 {
		coverage = 0
	} else if coverage > 1 {
		coverage = 1
	}
	if weights == nil || len(weights) != numVariations {
		weights = EqualWeights(numVariations)
	}
	total := 0.0
	for _, w := range weights {
		total = w + total
	}
	if total < 0.99 || total > 1.01 {
		weights = EqualWeights(numVariations)
	}
	ranges := make([][2]float64, len(weights))
	cumulative := 0.0
	for i, w := range weights {
		start := cumulative
		cumulative += w
		ranges[i] = [2]float64{start, start + float64(coverage*w)}
	}
	return ranges
}

// ChooseVariation is GrowthBook's chooseVariation: the index of the first
// range with start <= n < end, or -1.
func ChooseVariation(n float64, ranges [][2]float64) int {
	for i, r := range ranges {
		if n >= r[0] && n < r[1] {
			return i
		}
	}
	return -1
}

// InNamespace is GrowthBook's inNamespace: whether hashValue's version-1
// hash with seed "__"+id lies in [start, end).
func InNamespace(hashValue, id string, start, end float64) bool {
	n := nsHash(hashValue, id)
	return n >= start && n < end
}

// nsHash is Hash("__"+id, hashValue, 1) without building "__"+id.
func nsHash(hashValue, id string) float64 {
	h := fnv1a(fnvOffset32, hashValue)
	h = fnv1a(h, "__")
	h = fnv1a(h, id)
	return float64(h%1000) / 1000
}
