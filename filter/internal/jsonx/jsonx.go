// Package jsonx is the small JSON codec the Wasm filter links instead of
// encoding/json, which costs about 1.4 MB of Wasm (reflection included). It
// decodes to and encodes from the untyped values encoding/json uses for
// any — nil, bool, float64, string, []any and map[string]any — plus Object,
// an object that keeps its members in document order. Its results are those
// of encoding/json (the differential fuzz tests check it), except
// ParseStrict's, which are protojson's tokenizer's (checked likewise); its
// error messages are its own.
//
// It imports only the standard library, and no reflection.
package jsonx

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Object is a JSON object with its members in document order, duplicates
// included.
type Object []Member

// Member is one name/value pair of an Object.
type Member struct {
	Key   string
	Value any
}

// Plain converts Objects to map[string]any, recursively (the last of
// duplicate names wins): what Parse would have returned.
func Plain(v any) any {
	switch x := v.(type) {
	case Object:
		m := make(map[string]any, len(x))
		for _, kv := range x {
			m[kv.Key] = Plain(kv.Value)
		}
		return m
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = Plain(e)
		}
		return out
	}
	return v
}

// maxDepth is encoding/json's nesting limit.
const maxDepth = 10000

// Parse decodes one JSON value, surrounded by optional whitespace, as
// json.Unmarshal into an any does: objects become map[string]any (the last
// of duplicate names wins), arrays []any, numbers float64.
func Parse(data []byte) (any, error) { return parse(data, false) }

// ParseOrdered is Parse with objects decoded as Object.
func ParseOrdered(data []byte) (any, error) { return parse(data, true) }

// Number is a JSON number as ParseStrict returns it: its literal, which
// holds more than a float64 (1.0000000000000000001 is not an integer).
type Number string

// ParseStrict decodes one JSON value as protojson's tokenizer reads it:
// objects become Object, numbers Number, and a string with invalid UTF-8 or
// an unpaired surrogate escape is a syntax error (Parse would repair both).
// Containers may nest maxDepth deep.
func ParseStrict(data []byte, maxDepth int) (any, error) {
	p := parser{data: data, ordered: true, strict: true, limit: maxDepth}
	return p.top()
}

// ValidNumber reports whether s is exactly one JSON number literal.
func ValidNumber(s string) bool {
	if s == "" || s[0] != '-' && !isDigit(s[0]) {
		return false
	}
	p := parser{data: []byte(s), strict: true}
	_, err := p.number()
	return err == nil && p.i == len(s)
}

func parse(data []byte, ordered bool) (any, error) {
	p := parser{data: data, ordered: ordered, limit: maxDepth}
	return p.top()
}

func (p *parser) top() (any, error) {
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i < len(p.data) {
		return nil, p.syntax("after top-level value")
	}
	return v, nil
}

type parser struct {
	data    []byte
	i       int
	ordered bool
	strict  bool // ParseStrict
	limit   int  // of nesting
}

// SyntaxError is a malformed JSON input.
type SyntaxError struct {
	Msg    string
	Offset int // bytes read before the error
}

// Error implements error.
func (e *SyntaxError) Error() string { return e.Msg }

var errEnd = errors.New("unexpected end of JSON input")

func (p *parser) syntax(context string) error {
	if p.i >= len(p.data) {
		return &SyntaxError{errEnd.Error(), p.i}
	}
	return &SyntaxError{"invalid character " + quoteChar(p.data[p.i]) + " " + context, p.i + 1}
}

func quoteChar(c byte) string {
	if c == '\'' {
		return `'\''`
	}
	if c == '"' {
		return `'"'`
	}
	s := strconv.Quote(string(rune(c)))
	return "'" + s[1:len(s)-1] + "'"
}

func (p *parser) space() {
	for p.i < len(p.data) {
		switch p.data[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *parser) value(depth int) (any, error) {
	p.space()
	if p.i >= len(p.data) {
		return nil, p.syntax("")
	}
	switch c := p.data[p.i]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		return p.string()
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	}
	return nil, p.syntax("looking for beginning of value")
}

func (p *parser) literal(lit string) error {
	for j := 0; j < len(lit); j++ {
		if p.i >= len(p.data) || p.data[p.i] != lit[j] {
			return p.syntax("in literal " + lit + " (expecting " + quoteChar(lit[j]) + ")")
		}
		p.i++
	}
	return nil
}

func (p *parser) object(depth int) (any, error) {
	if depth > p.limit {
		return nil, &SyntaxError{"exceeded max depth", p.i + 1}
	}
	p.i++ // {
	var obj Object
	var m map[string]any
	if p.ordered {
		obj = Object{}
	} else {
		m = map[string]any{}
	}
	p.space()
	if p.i < len(p.data) && p.data[p.i] == '}' {
		p.i++
		if p.ordered {
			return obj, nil
		}
		return m, nil
	}
	for {
		p.space()
		if p.i >= len(p.data) || p.data[p.i] != '"' {
			return nil, p.syntax("looking for beginning of object key string")
		}
		k, err := p.string()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.data) || p.data[p.i] != ':' {
			return nil, p.syntax("after object key")
		}
		p.i++
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		if p.ordered {
			obj = append(obj, Member{k, v})
		} else {
			m[k] = v
		}
		p.space()
		if p.i < len(p.data) && p.data[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.data) && p.data[p.i] == '}' {
			p.i++
			if p.ordered {
				return obj, nil
			}
			return m, nil
		}
		return nil, p.syntax("after object key:value pair")
	}
}

func (p *parser) array(depth int) (any, error) {
	if depth > p.limit {
		return nil, &SyntaxError{"exceeded max depth", p.i + 1}
	}
	p.i++ // [
	arr := []any{}
	p.space()
	if p.i < len(p.data) && p.data[p.i] == ']' {
		p.i++
		return arr, nil
	}
	for {
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
		p.space()
		if p.i < len(p.data) && p.data[p.i] == ',' {
			p.i++
			continue
		}
		if p.i < len(p.data) && p.data[p.i] == ']' {
			p.i++
			return arr, nil
		}
		return nil, p.syntax("after array element")
	}
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func (p *parser) digits() int {
	n := 0
	for p.i < len(p.data) && isDigit(p.data[p.i]) {
		p.i++
		n++
	}
	return n
}

func (p *parser) number() (any, error) {
	start := p.i
	if p.data[p.i] == '-' {
		p.i++
	}
	switch {
	case p.i < len(p.data) && p.data[p.i] == '0':
		p.i++
	case p.digits() == 0:
		return nil, p.syntax("in numeric literal")
	}
	if p.i < len(p.data) && p.data[p.i] == '.' {
		p.i++
		if p.digits() == 0 {
			return nil, p.syntax("after decimal point in numeric literal")
		}
	}
	if p.i < len(p.data) && (p.data[p.i] == 'e' || p.data[p.i] == 'E') {
		p.i++
		if p.i < len(p.data) && (p.data[p.i] == '+' || p.data[p.i] == '-') {
			p.i++
		}
		if p.digits() == 0 {
			return nil, p.syntax("in exponent of numeric literal")
		}
	}
	lit := string(p.data[start:p.i])
	if p.strict {
		return Number(lit), nil
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return nil, &SyntaxError{"number " + lit + " is out of range", start + 1}
	}
	return f, nil
}

func hexValue(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// string decodes a string literal as encoding/json does: invalid UTF-8
// bytes and unpaired surrogate escapes become U+FFFD (syntax errors when
// strict).
func (p *parser) string() (string, error) {
	p.i++ // "
	start := p.i
	// Fast path: nothing to unescape or repair.
	for p.i < len(p.data) {
		c := p.data[p.i]
		if c == '"' {
			s := string(p.data[start:p.i])
			p.i++
			return s, nil
		}
		if c == '\\' || c < ' ' || c >= utf8.RuneSelf {
			break
		}
		p.i++
	}
	b := make([]byte, p.i-start, p.i-start+16)
	copy(b, p.data[start:p.i])
	for p.i < len(p.data) {
		c := p.data[p.i]
		switch {
		case c == '"':
			p.i++
			return string(b), nil
		case c < ' ':
			return "", p.syntax("in string literal")
		case c == '\\':
			p.i++
			if p.i >= len(p.data) {
				return "", p.syntax("")
			}
			switch e := p.data[p.i]; e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r := hexValue(p.data[p.i+1:])
				if r < 0 {
					for j := 1; j <= 4 && p.i+1 < len(p.data) && isHex(p.data[p.i+1]); j++ {
						p.i++
					}
					p.i++
					return "", p.syntax("in \\u hexadecimal character escape")
				}
				p.i += 4
				if p.strict && utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if p.i+2 < len(p.data) && p.data[p.i+1] == '\\' && p.data[p.i+2] == 'u' {
						r2 = hexValue(p.data[p.i+3:])
					}
					if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
						return "", &SyntaxError{"unpaired surrogate escape in string literal", p.i + 1}
					}
					p.i += 6
				} else if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if p.i+2 < len(p.data) && p.data[p.i+1] == '\\' && p.data[p.i+2] == 'u' {
						r2 = hexValue(p.data[p.i+3:])
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						p.i += 6
						b = utf8.AppendRune(b, d)
						break
					}
					r = utf8.RuneError
				}
				b = utf8.AppendRune(b, r)
			default:
				return "", p.syntax("in string escape code")
			}
			p.i++
		case c < utf8.RuneSelf:
			b = append(b, c)
			p.i++
		default:
			r, n := utf8.DecodeRune(p.data[p.i:])
			if p.strict && r == utf8.RuneError && n == 1 {
				return "", &SyntaxError{"invalid UTF-8 in string literal", p.i + 1}
			}
			b = utf8.AppendRune(b, r)
			p.i += n
		}
	}
	return "", p.syntax("")
}

func isHex(c byte) bool {
	return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// Compact appends to dst the valid JSON src without insignificant
// whitespace.
func Compact(dst, src []byte) []byte {
	inString := false
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case inString:
			dst = append(dst, c)
			if c == '\\' && i+1 < len(src) {
				i++
				dst = append(dst, src[i])
			} else if c == '"' {
				inString = false
			}
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			inString = c == '"'
			dst = append(dst, c)
		}
	}
	return dst
}

// UnsupportedError is a value Append cannot encode: NaN, an infinity, or a
// type other than the ones Parse returns.
type UnsupportedError struct{ Value any }

// Error implements error.
func (e *UnsupportedError) Error() string {
	switch v := e.Value.(type) {
	case float64:
		return "jsonx: unsupported value: " + strconv.FormatFloat(v, 'g', -1, 64)
	}
	return "jsonx: unsupported type"
}

// Append appends the encoding of v to dst exactly as json.Marshal encodes
// it: map keys sorted, Object members in order, HTML-sensitive characters
// and U+2028/U+2029 escaped in strings.
func Append(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case float64:
		return appendFloat(dst, x)
	case string:
		return AppendString(dst, x), nil
	case []any:
		if x == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = Append(dst, e); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case map[string]any:
		if x == nil {
			return append(dst, "null"...), nil
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = append(dst, '{')
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, k)
			dst = append(dst, ':')
			var err error
			if dst, err = Append(dst, x[k]); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	case Object:
		if x == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '{')
		for i, m := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, m.Key)
			dst = append(dst, ':')
			var err error
			if dst, err = Append(dst, m.Value); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	}
	return nil, &UnsupportedError{v}
}

// appendFloat is encoding/json's float64 encoding.
func appendFloat(dst []byte, f float64) ([]byte, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, &UnsupportedError{f}
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	dst = strconv.AppendFloat(dst, f, format, -1, 64)
	if format == 'e' { // e-09 → e-9
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst, nil
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string, as json.Marshal writes it.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += n
			start = i
			continue
		}
		i += n
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
