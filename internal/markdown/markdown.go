// Package markdown fits generated Markdown to a line width, so that a
// generated record (bench/REPORT.md, docs/RELIABILITY.md) reads in a
// terminal and passes make lint's bound on line length (tools/archlint:
// 300 characters outside fenced code, tables included).
//
// Fit leaves fenced code and headings alone, wraps a paragraph, list item
// or quote line that is over the width at spaces (never inside a code span that
// fits a line), and turns a table with a row over the limit into a list:
// one item per row, its first cell first, then each other cell after its
// column's header. Tables within the limit stay tables.
package markdown

import "strings"

// Fit returns md with every line outside fenced code at most width
// characters where a space allows it, and every table whose longest row is
// over limit rewritten as a list. Text is never dropped or reordered
// within a line; only line breaks (and table syntax) change.
func Fit(md string, width, limit int) string {
	lines := strings.Split(md, "\n")
	var out []string
	fenced := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			out = append(out, l)
			continue
		}
		if fenced {
			out = append(out, l)
			continue
		}
		if strings.HasPrefix(l, "|") {
			j := i
			for j < len(lines) && strings.HasPrefix(lines[j], "|") {
				j++
			}
			out = append(out, table(lines[i:j], width, limit)...)
			i = j - 1
			continue
		}
		out = append(out, line(l, width)...)
	}
	return strings.Join(out, "\n")
}

// line wraps one line of prose, a list item or a quote, keeping its
// marker's indentation on the lines that follow.
func line(l string, width int) []string {
	if len(l) <= width || strings.HasPrefix(l, "#") { // a heading is one line
		return []string{l}
	}
	if len(l) <= width {
		return []string{l}
	}
	indent := len(l) - len(strings.TrimLeft(l, " "))
	body := l[indent:]
	first, rest := strings.Repeat(" ", indent), strings.Repeat(" ", indent)
	for _, m := range []string{"- ", "* ", "> "} {
		if strings.HasPrefix(body, m) {
			first += m
			body = body[len(m):]
			if m == "> " {
				rest += m
			} else {
				rest += "  "
			}
			break
		}
	}
	if n := numbered(body); n > 0 {
		first += body[:n]
		body = body[n:]
		rest += strings.Repeat(" ", n)
	}
	return strings.Split(strings.TrimSuffix(Wrap(first, rest, body, width), "\n"), "\n")
}

// numbered is the length of an ordered-list marker ("12. ") at the start
// of s, or 0.
func numbered(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i > 0 && i+1 < len(s) && s[i] == '.' && s[i+1] == ' ' {
		return i + 2
	}
	return 0
}

// table returns rows unchanged when none is over limit, else the table as
// a list.
func table(rows []string, width, limit int) []string {
	long := false
	for _, r := range rows {
		long = long || len(r) > limit
	}
	if !long || len(rows) < 2 {
		return rows
	}
	header := cells(rows[0])
	var out []string
	for _, r := range rows[2:] { // rows[1] is the delimiter row
		c := cells(r)
		var parts []string
		for k, v := range c {
			if v == "" || v == "–" && k > 0 {
				continue
			}
			switch {
			case k == 0:
				parts = append(parts, v)
			case k < len(header) && header[k] != "":
				parts = append(parts, header[k]+": "+v)
			default:
				parts = append(parts, v)
			}
		}
		text := strings.Join(parts, "; ")
		if len(parts) > 1 {
			text = parts[0] + " — " + strings.Join(parts[1:], "; ")
		}
		out = append(out, strings.Split(strings.TrimSuffix(Wrap("- ", "  ", text, width), "\n"), "\n")...)
	}
	return out
}

// cells splits a table row into its trimmed cells; an escaped pipe (\|)
// stays in its cell, unescaped.
func cells(row string) []string {
	row = strings.TrimSpace(row)
	row = strings.TrimPrefix(row, "|")
	row = strings.TrimSuffix(row, "|")
	var out []string
	var cur strings.Builder
	for i := 0; i < len(row); i++ {
		switch {
		case row[i] == '\\' && i+1 < len(row) && row[i+1] == '|':
			cur.WriteByte('|')
			i++
		case row[i] == '|':
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		default:
			cur.WriteByte(row[i])
		}
	}
	return append(out, strings.TrimSpace(cur.String()))
}

// Wrap fills the words of text onto lines of at most width characters
// where the words allow, the first line prefixed by first and the rest by
// rest, each line ending in a newline. A code span (`…`) is one word, so a
// command is never split across lines.
func Wrap(first, rest, text string, width int) string {
	var b strings.Builder
	cur := first
	empty := true
	for _, w := range words(text) {
		if !empty && len(cur)+1+len(w) > width {
			b.WriteString(cur + "\n")
			cur, empty = rest, true
		}
		if !empty {
			cur += " "
		}
		cur += w
		empty = false
	}
	b.WriteString(cur + "\n")
	return b.String()
}

// words splits text at spaces, but not inside a code span.
func words(text string) []string {
	var out []string
	var cur strings.Builder
	code := false
	for _, c := range text {
		switch {
		case c == '`':
			code = !code
			cur.WriteRune(c)
		case c == ' ' && !code:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(c)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}
