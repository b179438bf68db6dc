package engine

import (
	"math"
	"strings"
	"unicode/utf8"

	"github.com/allotmesh/allot/filter/internal/regex"
)

// Condition values: what compileCondition turns each operator into, each
// with the match method that evaluates it against an attribute value.

type strCond string // value + "" === condition

func (c strCond) match(v any) bool {
	if s, ok := v.(string); ok {
		return s == string(c)
	}
	return jsString(v) == string(c)
}

type strFoldCond string // String(value).toLowerCase() === condition.toLowerCase()

func (c strFoldCond) match(v any) bool { return lowerEquals(jsString(v), string(c)) }

type numCond float64 // value * 1 === condition

func (c numCond) match(v any) bool { return jsNumber(v) == float64(c) }

type boolCond bool // value !== null && !!value === condition

func (c boolCond) match(v any) bool { return v != nil && truthy(v) == bool(c) }

type nullCond struct{} // value === null

func (nullCond) match(v any) bool { return v == nil }

type jsonCond struct{ want any } // JSON.stringify(value) === JSON.stringify(condition)

func (c jsonCond) match(v any) bool { return jsonEqual(v, c.want) }

type falseCond struct{}

func (falseCond) match(any) bool { return false }

type allCond []valueCond // an operator object: every operator must pass

func (c allCond) match(v any) bool {
	for _, op := range c {
		if !op.match(v) {
			return false
		}
	}
	return true
}

type eqCond struct {
	want any
	ne   bool
}

func (c eqCond) match(v any) bool { return strictEqual(v, c.want) != c.ne }

type cmpCond struct {
	op   byte
	want any
}

func (c cmpCond) match(v any) bool {
	// Fast paths for the common same-type cases.
	switch w := c.want.(type) {
	case float64:
		if x, ok := v.(float64); ok {
			return cmpFloat(c.op, x, w)
		}
	case string:
		if x, ok := v.(string); ok {
			return cmpString(c.op, x, w)
		}
	}
	return compare(c.op, v, c.want)
}

func cmpFloat(op byte, x, y float64) bool {
	switch op {
	case opLT:
		return x < y
	case opLTE:
		return x <= y
	case opGT:
		return x > y
	}
	return x >= y
}

// cmpString is JavaScript's x < y (or <=, >, >=) on strings: by UTF-16
// code units.
func cmpString(op byte, x, y string) bool {
	d := compareUTF16(x, y)
	switch op {
	case opLT:
		return d < 0
	case opLTE:
		return d <= 0
	case opGT:
		return d > 0
	}
	return d >= 0
}

type existsCond bool // expected ? actual != null : actual == null

func (c existsCond) match(v any) bool { return (v != nil) == bool(c) }

// inCond is isIn(actual, expected) (negated for $nin): strict equality
// against the listed primitives; an array attribute matches when any of its
// elements does. With fold, strings compare lower-cased as JavaScript's
// toLowerCase does.
type inCond struct {
	strs      []string
	strSet    map[string]struct{} // strs, when the list is long
	nums      []float64
	hasTrue   bool
	hasFalse  bool
	hasNull   bool
	fold, neg bool
}

func newInCond(arr []any, fold, neg bool) *inCond {
	c := &inCond{fold: fold, neg: neg}
	for _, e := range arr {
		switch x := e.(type) {
		case string:
			if fold {
				x = lowerString(x)
			}
			c.strs = append(c.strs, x)
		case float64:
			c.nums = append(c.nums, x)
		case bool:
			if x {
				c.hasTrue = true
			} else {
				c.hasFalse = true
			}
		case nil:
			c.hasNull = true
		}
	}
	if len(c.strs) > 8 {
		c.strSet = make(map[string]struct{}, len(c.strs))
		for _, s := range c.strs {
			c.strSet[s] = struct{}{}
		}
	}
	return c
}

func (c *inCond) has(v any) bool {
	switch x := v.(type) {
	case string:
		if c.fold && !lowerEquals(x, x) {
			// Lower-case into a stack buffer: neither the map index
			// nor the comparisons below copy string(l).
			var buf [64]byte
			l := appendLower(buf[:0], x)
			if c.strSet != nil {
				_, ok := c.strSet[string(l)]
				return ok
			}
			for _, s := range c.strs {
				if s == string(l) {
					return true
				}
			}
			return false
		}
		if c.strSet != nil {
			_, ok := c.strSet[x]
			return ok
		}
		for _, s := range c.strs {
			if s == x {
				return true
			}
		}
	case float64:
		for _, n := range c.nums {
			if n == x || (!c.fold && math.IsNaN(n) && math.IsNaN(x)) {
				return true
			}
		}
	case bool:
		return (x && c.hasTrue) || (!x && c.hasFalse)
	case nil:
		return c.hasNull
	}
	return false
}

func (c *inCond) match(v any) bool {
	found := false
	if arr, ok := v.([]any); ok {
		for _, e := range arr {
			if c.has(e) {
				found = true
				break
			}
		}
	} else {
		found = c.has(v)
	}
	return found != c.neg
}

type notCond struct{ c valueCond }

func (c notCond) match(v any) bool { return !c.c.match(v) }

type sizeCond struct{ c valueCond }

func (c sizeCond) match(v any) bool {
	arr, ok := v.([]any)
	return ok && c.c.match(float64(len(arr)))
}

type elemMatchCond struct {
	val valueCond // operator object: evalConditionValue per element
	obj *objCond  // otherwise evalCondition per element
}

func (c elemMatchCond) match(v any) bool {
	arr, ok := v.([]any)
	if !ok {
		return false
	}
	for _, e := range arr {
		if !truthy(e) {
			continue // the reference skips falsy elements
		}
		if c.val != nil && c.val.match(e) || c.obj != nil && c.obj.eval(e, nil) {
			return true
		}
	}
	return false
}

type allElemCond []valueCond // every condition matches some element

func (c allElemCond) match(v any) bool {
	arr, ok := v.([]any)
	if !ok {
		return false
	}
	for _, want := range c {
		passed := false
		for _, e := range arr {
			if want.match(e) {
				passed = true
				break
			}
		}
		if !passed {
			return false
		}
	}
	return true
}

type regexCond struct{ re *regex.Regexp }

func (c regexCond) match(v any) bool {
	if s, ok := v.(string); ok {
		return c.re.MatchString(s)
	}
	return c.re.MatchString(jsString(v)) // RegExp.test coerces with String()
}

type typeCond string

func (c typeCond) match(v any) bool { return typeName(v) == string(c) }

type versionCond struct {
	op   byte
	want string // padded
}

func (c versionCond) match(v any) bool {
	d := comparePaddedVersion(v, c.want)
	switch c.op {
	case opEQ:
		return d == 0
	case opNE:
		return d != 0
	case opLT:
		return d < 0
	case opLTE:
		return d <= 0
	case opGT:
		return d > 0
	}
	return d >= 0
}

// comparePaddedVersion compares paddedVersionString(v) with want (already
// padded) without building the padded string: part by part, stopping at the
// first difference — usually within the major version.
func comparePaddedVersion(v any, want string) int {
	s, ok := v.(string)
	if !ok || s == "" || s[0] == 'v' || len(s) > 48 {
		return comparePaddedVersionSlow(v, want)
	}
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	parts := 1
	for i := 0; i < len(s); i++ {
		if s[i] == '-' || s[i] == '.' {
			parts++
		}
	}
	w := 0 // bytes of want consumed
	var chunk [56]byte
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '-' && s[i] != '.' {
			continue
		}
		b := appendVersionPart(chunk[:0], s[start:i], start > 0)
		if i == len(s) && parts == 3 {
			b = append(b, '-', '~')
		}
		if d := compareChunk(b, want, &w); d == chunkNonASCII {
			return comparePaddedVersionSlow(v, want)
		} else if d != 0 {
			return d
		}
		start = i + 1
	}
	if w < len(want) {
		if want[w]&0xC0 == 0x80 {
			return comparePaddedVersionSlow(v, want) // invalid UTF-8 may decode differently
		}
		return -1
	}
	return 0
}

// comparePaddedVersionSlow builds paddedVersionString(v) and compares it
// with want by UTF-16 code units, as JavaScript's < does.
func comparePaddedVersionSlow(v any, want string) int {
	var buf [64]byte
	return compareUTF16(string(appendPaddedVersion(buf[:0], v)), want)
}

// chunkNonASCII is compareChunk's answer when the first difference involves
// a non-ASCII byte: byte order is not UTF-16 order there, so the caller
// compares the whole strings.
const chunkNonASCII = 2

// compareChunk compares b with want[*w:] over len(b) bytes and advances *w.
func compareChunk(b []byte, want string, w *int) int {
	rest := want[*w:]
	n := min(len(b), len(rest))
	for i := 0; i < n; i++ {
		if b[i] != rest[i] {
			if b[i] >= utf8.RuneSelf || rest[i] >= utf8.RuneSelf {
				return chunkNonASCII
			}
			if b[i] < rest[i] {
				return -1
			}
			return 1
		}
	}
	if len(rest) < len(b) {
		if b[len(rest)]&0xC0 == 0x80 {
			return chunkNonASCII // invalid UTF-8 may decode differently
		}
		return 1 // want is a proper prefix
	}
	*w += len(b)
	return 0
}
