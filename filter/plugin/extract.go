package plugin

import (
	"net/url"
	"strings"
)

// cookieValues sets vals for every mapped cookie found in one Cookie header
// value ("a=1; b=2"). The first occurrence of a name wins.
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
		if n, err := url.QueryUnescape(name); err == nil {
			name = n
		}
		idxs, ok := c.queries[name]
		if !ok {
			continue
		}
		v, err := url.QueryUnescape(value)
		if err != nil {
			continue
		}
		for _, i := range idxs {
			if vals[i] == "" {
				vals[i] = v
			}
		}
	}
}
