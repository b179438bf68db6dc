package markdown

import (
	"strings"
	"testing"
)

// TestFit: long prose, list items and quotes are wrapped with their
// markers' indentation; a wide table becomes a list and a narrow one
// stays; fenced code and headings are untouched; no word is lost.
func TestFit(t *testing.T) {
	long := strings.Repeat("word ", 40) + "`go test -run '^TestX$' ./e2e/` end"
	wide := "| target | numbers | result |\n|---|---|---|\n| Q ≥ 0.70 × A | " + strings.Repeat("figure ", 50) + "| **met** |\n| R \\| S | few | – |"
	in := strings.Join([]string{
		"# " + strings.Repeat("Heading ", 20),
		"",
		long,
		"",
		"- " + long,
		"12. " + long,
		"> " + long,
		"",
		"| a | b |\n|---|---|\n| 1 | 2 |",
		"",
		wide,
		"",
		"```",
		strings.Repeat("x", 400),
		"```",
	}, "\n")
	got := Fit(in, 118, 300)
	fenced := false
	for i, l := range strings.Split(got, "\n") {
		if strings.HasPrefix(l, "```") {
			fenced = !fenced
			continue
		}
		if !fenced && !strings.HasPrefix(l, "#") && len(l) > 118 {
			t.Errorf("line %d is %d characters: %q", i+1, len(l), l)
		}
	}
	for _, want := range []string{
		"# " + strings.Repeat("Heading ", 20) + "\n",
		"\n  word ",                       // a list item's continuation under its text
		"\n    word ",                     // an ordered item's, under its number's width
		"\n> word ",                       // a quote's, still quoted
		"`go test -run '^TestX$' ./e2e/`", // a code span kept whole
		"| a | b |\n|---|---|\n| 1 | 2 |", // a narrow table kept
		"- Q ≥ 0.70 × A — numbers: figure figure",
		"result: **met**",
		"- R | S — numbers: few\n", // an escaped pipe unescaped; an empty (–) cell left out
		strings.Repeat("x", 400),
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "| target |") {
		t.Errorf("the wide table was kept:\n%s", got)
	}
	strip := func(s string) string {
		s = strings.NewReplacer("|", " ", "—", " ", ";", " ", ":", " ", "-", " ", ">", " ").Replace(s)
		return strings.Join(strings.Fields(s), " ")
	}
	for _, w := range strings.Fields(strip(long)) {
		if !strings.Contains(strip(got), w) {
			t.Errorf("word %q lost", w)
		}
	}
}

// TestWrap: the width holds wherever a space allows, and a code span
// longer than the width stays whole on its own line.
func TestWrap(t *testing.T) {
	code := "`" + strings.Repeat("c", 130) + "`"
	got := Wrap("- ", "  ", "a b "+code+" d", 20)
	want := "- a b\n  " + code + "\n  d\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
