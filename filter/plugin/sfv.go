package plugin

import "strings"

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
