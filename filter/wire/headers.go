package wire

import "strings"

// The assignment headers' default names: a configuration that names none
// uses these (filter/config's defaults are the same strings; the plugin's
// tests hold them to these).
const (
	// DefaultHeaderPrefix prefixes each experiment's own assignment header
	// (x-experiment-<key>).
	DefaultHeaderPrefix = "x-experiment-"
	// DefaultDictionaryHeader carries every assignment of a request as an
	// RFC 9651 dictionary (DictionaryMember).
	DefaultDictionaryHeader = "x-experiments"
	// DefaultVersionHeader carries the configuration's version.
	DefaultVersionHeader = "x-experiments-version"
)

// SetCookieHeader is the response header that carries the sticky cookie.
const SetCookieHeader = "set-cookie"

// ExposureProperty is the filter state the filter writes each request's
// assignments to; Envoy's access log prints it with
// %FILTER_STATE(wasm.allot:PLAIN)%.
const ExposureProperty = "allot"

// OwnsHeader reports whether an inbound request header name is one the
// filter owns (and therefore strips as forged) under the header names
// prefix, dictionary and version (none empty): one starting with prefix,
// or the dictionary or version header, in any casing.
func OwnsHeader(name, prefix, dictionary, version string) bool {
	// Most request headers differ from all three in their first byte.
	if name == "" {
		return false
	}
	if b := lowerByte(name[0]); b != prefix[0] && b != dictionary[0] && b != version[0] {
		return false
	}
	return len(name) >= len(prefix) && strings.EqualFold(name[:len(prefix)], prefix) ||
		len(name) == len(dictionary) && strings.EqualFold(name, dictionary) ||
		len(name) == len(version) && strings.EqualFold(name, version)
}

// lowerByte lowercases an ASCII letter and leaves any other byte alone.
func lowerByte(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}

// DictionaryMember is an assignment of experiment key to variation value
// (its rendered header value) as an RFC 9651 dictionary member of the
// dictionary header, the separator included: `, key="value"`. The header's
// value is a request's members, in key order, without the first separator
// (DictionarySeparator).
func DictionaryMember(key, value string) string {
	return DictionarySeparator + key + "=" + sfString(value)
}

// DictionarySeparator separates the dictionary header's members; each
// DictionaryMember starts with it.
const DictionarySeparator = ", "

// AssignmentHeaderBytes is how many bytes of request headers (names and
// values, as Envoy counts a header map against its limit) the assignment of
// experiment key to variation value adds: its dictionary member and, with
// per-experiment headers, its own header prefix+key: value.
func AssignmentHeaderBytes(prefix, key, value string, perExperiment bool) int {
	n := len(DictionaryMember(key, value))
	if perExperiment {
		n += len(prefix) + len(key) + len(value)
	}
	return n
}

// HeaderBytes is how many bytes of request headers the filter adds to a
// request whose assignments add assigned bytes (the sum of their
// AssignmentHeaderBytes; 0 for none): those, the dictionary header's name
// when there is any (its value is the members less the first separator),
// and the version header.
func HeaderBytes(assigned int, dictionaryHeader, versionHeader, version string) int {
	n := 0
	if version != "" {
		n += len(versionHeader) + len(version)
	}
	if assigned > 0 {
		n += assigned + len(dictionaryHeader) - len(DictionarySeparator)
	}
	return n
}

// sfString renders s as an RFC 9651 bare item: an sf-string ("...", with
// backslash escapes for '"' and '\') when s is printable ASCII, otherwise a
// Display String (%"..." with UTF-8 bytes, '%' and '"' percent-encoded
// in lowercase hex), which the RFC added for Unicode text.
func sfString(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			ascii = false
			break
		}
	}
	var b strings.Builder
	if ascii {
		b.Grow(len(s) + 2)
		b.WriteByte('"')
		for i := 0; i < len(s); i++ {
			if s[i] == '"' || s[i] == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(s[i])
		}
		b.WriteByte('"')
		return b.String()
	}
	const hex = "0123456789abcdef"
	b.WriteString(`%"`)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c == '"' || c < 0x20 || c > 0x7e {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&0xf])
			continue
		}
		b.WriteByte(c)
	}
	b.WriteByte('"')
	return b.String()
}
