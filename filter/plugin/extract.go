package plugin

import "strings"

// cookieValues sets vals for every mapped cookie found in one Cookie header
// value ("a=1; b=2"). The first occurrence of a name wins.
//
//go:noinline
func (c *Config) cookieValues(header string, vals []string) {
	for header != "" {
		var pair string
		pair, header, _ = strings.Cut(header, ";")
		name, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			continue
		}
		idxs, ok := c.cookies[strings.TrimSpace(name)]
		if !ok {
			continue
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && value[0] == '"' && value[len(value)-1] == '"' {
			value = value[1 : len(value)-1]
		}
		for _, i := range idxs {
			if vals[i] == "" {
				vals[i] = value
			}
		}
	}
}

// pathValues sets vals for the URL path and every mapped query parameter of
// a :path value. Parameter names and values are percent-decoded; the first
// occurrence of a name wins.
//
//go:noinline
func (c *Config) pathValues(path string, vals []string) {
	path, _, _ = strings.Cut(path, "#")
	p, query, _ := strings.Cut(path, "?")
	for _, i := range c.urlPath {
		vals[i] = p
	}
	if len(c.queries) == 0 {
		return
	}
	for query != "" {
		var pair string
		pair, query, _ = strings.Cut(query, "&")
		name, value, _ := strings.Cut(pair, "=")
		if n, ok := queryUnescape(name); ok {
			name = n
		}
		idxs, ok := c.queries[name]
		if !ok {
			continue
		}
		v, ok := queryUnescape(value)
		if !ok {
			continue
		}
		for _, i := range idxs {
			if vals[i] == "" {
				vals[i] = v
			}
		}
	}
}

// queryUnescape is url.QueryUnescape without linking net/url: "+" becomes a
// space and %XX its byte; ok is false when a "%" is not followed by two hex
// digits. It allocates only when s has something to decode.
func queryUnescape(s string) (string, bool) {
	decode := false
	for i := 0; i < len(s); {
		switch s[i] {
		case '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				return "", false
			}
			decode = true
			i += 3
		case '+':
			decode = true
			i++
		default:
			i++
		}
	}
	if !decode {
		return s, true
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
		case '+':
			b.WriteByte(' ')
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
