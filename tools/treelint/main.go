// Command treelint checks the repository's tracked files for what neither
// the compiler nor go vet sees: merge-conflict markers left by a committed
// merge, and relative links in Markdown that point nowhere (a file that does
// not exist, or a heading anchor the target file does not have). `make lint`
// runs it (`make lint-tree TREE=dir` on another repository); it prints one
// line per problem and exits 1 if there is any.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"unicode"

	"github.com/allotmesh/allot/tools/internal/tracked"
)

func main() {
	root := flag.String("C", ".", "the repository to check")
	flag.Parse()
	files, err := tracked.Files(*root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "treelint:", err)
		os.Exit(2)
	}
	problems := check(*root, files)
	for _, p := range problems {
		fmt.Println(p)
	}
	if len(problems) > 0 {
		fmt.Printf("treelint: %d problem(s)\n", len(problems))
		os.Exit(1)
	}
}

// check returns every problem in files (paths relative to root), sorted.
func check(root string, files []string) []string {
	var problems []string
	headings := map[string]map[string]bool{} // Markdown file → its anchors, read once
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			if os.IsNotExist(err) { // deleted in the work tree, not yet in the index
				continue
			}
			problems = append(problems, fmt.Sprintf("%s: %v", f, err))
			continue
		}
		if bytes.IndexByte(b, 0) >= 0 {
			continue // binary
		}
		problems = append(problems, conflictMarkers(f, b)...)
		if strings.HasSuffix(f, ".md") {
			problems = append(problems, brokenLinks(root, f, b, headings)...)
		}
	}
	sort.Strings(problems)
	return problems
}

// conflictMarkers reports the lines of a file that a merge left: "<<<<<<< "
// and ">>>>>>> " lines, and "=======" lines in a file that has either (alone,
// "=======" is a Markdown heading's underline).
func conflictMarkers(name string, b []byte) []string {
	lines := strings.Split(string(b), "\n")
	var marks []int
	sides := false
	for i, l := range lines {
		l = strings.TrimSuffix(l, "\r")
		switch {
		case strings.HasPrefix(l, "<<<<<<< ") || strings.HasPrefix(l, ">>>>>>> ") || l == "<<<<<<<" || l == ">>>>>>>":
			sides = true
			marks = append(marks, i)
		case l == "=======":
			marks = append(marks, i)
		}
	}
	if !sides {
		return nil
	}
	var out []string
	for _, i := range marks {
		out = append(out, fmt.Sprintf("%s:%d: merge-conflict marker %q", name, i+1, strings.TrimSpace(lines[i])))
	}
	return out
}

var (
	// inlineLink matches [text](target) and ![alt](target), with an optional
	// "title" after the target.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	// refLink matches a reference definition: [label]: target
	refLink  = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+.*)?$`)
	codeSpan = regexp.MustCompile("`+[^`]*`+")
	scheme   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// prose yields the lines of a Markdown document outside fenced code
// blocks, with their index.
func prose(b []byte) iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		fence := ""
		for i, line := range strings.Split(string(b), "\n") {
			t := strings.TrimSpace(line)
			switch {
			case fence != "":
				if strings.HasPrefix(t, fence) {
					fence = ""
				}
			case strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~"):
				fence = t[:3]
			default:
				if !yield(i, line) {
					return
				}
			}
		}
	}
}

// brokenLinks reports the relative links of Markdown file name whose target
// file does not exist, or whose #anchor is not a heading of the target.
func brokenLinks(root, name string, b []byte, headings map[string]map[string]bool) []string {
	var out []string
	for i, line := range prose(b) {
		line = codeSpan.ReplaceAllString(line, "")
		var targets []string
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets = append(targets, m[1])
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if msg := resolve(root, name, target, headings); msg != "" {
				out = append(out, fmt.Sprintf("%s:%d: link %q: %s", name, i+1, target, msg))
			}
		}
	}
	return out
}

// resolve checks one link target of Markdown file name; it returns what is
// wrong, or "" if the link is external or points at something that exists.
func resolve(root, name, target string, headings map[string]map[string]bool) string {
	if scheme.MatchString(target) || strings.HasPrefix(target, "//") {
		return "" // external
	}
	path, anchor, _ := strings.Cut(target, "#")
	path, _, _ = strings.Cut(path, "?")
	file := name
	if path != "" {
		if strings.HasPrefix(path, "/") {
			file = filepath.Clean(strings.TrimPrefix(path, "/"))
		} else {
			file = filepath.Join(filepath.Dir(name), path)
		}
		fi, err := os.Stat(filepath.Join(root, file))
		if err != nil {
			return "no such file " + file
		}
		if fi.IsDir() {
			return ""
		}
	}
	if anchor == "" || !strings.HasSuffix(file, ".md") {
		return ""
	}
	hs, ok := headings[file]
	if !ok {
		b, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			return err.Error()
		}
		hs = anchors(b)
		headings[file] = hs
	}
	if !hs[strings.ToLower(anchor)] {
		return fmt.Sprintf("%s has no heading #%s", file, anchor)
	}
	return ""
}

// anchors returns the anchors GitHub gives the headings of a Markdown
// document: lowercased, punctuation but '-' and '_' dropped, spaces made
// '-', a repeated one suffixed -1, -2, …
func anchors(b []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range prose(b) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		slug := slugify(h)
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

func slugify(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_':
			b.WriteRune(r)
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r > 127 && isLetterOrDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isLetterOrDigit(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }
