package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"unicode/utf8"
)

// checkGo returns a line per size violation of the Go file name (src its
// content): a file over maxGoLines lines, a function body over
// maxFuncLines lines that is not table-driven data (isData). Test files,
// generated files (ast.IsGenerated) and files under testdata/ are exempt.
func checkGo(name string, src []byte) []string {
	if strings.HasSuffix(name, "_test.go") || strings.HasPrefix(name, "testdata/") || strings.Contains(name, "/testdata/") {
		return nil
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return []string{fmt.Sprintf("%s: go-syntax: %v", name, err)}
	}
	if ast.IsGenerated(f) {
		return nil
	}
	var out []string
	if n := lineCount(src); n > maxGoLines {
		out = append(out, fmt.Sprintf("%s:%d: go-file-size: %d lines, at most %d in a non-test, non-generated Go file", name, maxGoLines+1, n, maxGoLines))
	}
	check := func(what string, body *ast.BlockStmt) {
		if body == nil {
			return
		}
		from, to := fset.Position(body.Lbrace).Line, fset.Position(body.Rbrace).Line
		n := to - from - 1
		if n <= maxFuncLines || isData(fset, body, from, to) {
			return
		}
		out = append(out, fmt.Sprintf("%s:%d: func-size: %s has a %d-line body, at most %d unless it is table-driven data", name, from, what, n, maxFuncLines))
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			check(funcName(d), d.Body)
		case *ast.GenDecl: // function literals at package level: var x = func() {...}
			ast.Inspect(d, func(n ast.Node) bool {
				if lit, ok := n.(*ast.FuncLit); ok {
					check("func literal", lit.Body)
					return false
				}
				return true
			})
		}
	}
	return out
}

// isData reports whether a function body (lines from to to, its braces)
// is table-driven data: at least dataShareNum/dataShareDen of the lines
// between its braces lie within composite literals (a line counts when it
// lies between, or on, the braces of an outermost composite literal of the
// body). A body that is one return of a slice or map literal is data; a
// body of logic around a table is not, and its logic goes elsewhere.
func isData(fset *token.FileSet, body *ast.BlockStmt, from, to int) bool {
	data := map[int]bool{}
	ast.Inspect(body, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		for l := fset.Position(lit.Lbrace).Line; l <= fset.Position(lit.Rbrace).Line; l++ {
			if l > from && l < to {
				data[l] = true
			}
		}
		return false
	})
	return len(data)*dataShareDen >= (to-from-1)*dataShareNum
}

// funcName names a function declaration: "func F" or "method T.M".
func funcName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return "func " + d.Name.Name
	}
	t := d.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr: // generic receiver T[P]
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return "method " + id.Name + "." + d.Name.Name
	}
	return "method " + d.Name.Name
}

// lineCount is the number of lines of src.
func lineCount(src []byte) int {
	n := bytes.Count(src, []byte("\n"))
	if len(src) > 0 && src[len(src)-1] != '\n' {
		n++
	}
	return n
}

// checkMarkdown returns a line per violation in the Markdown file name (src
// its content): a line over maxMarkdownLineRunes characters outside fenced
// code blocks (tables count: a table is read on screen too), and a file over
// its line limit (markdownLines, else maxGuideLines unless markdownRecords
// exempts it).
func checkMarkdown(name string, src []byte) []string {
	var out []string
	fence := ""
	lines := strings.Split(string(src), "\n")
	for i, line := range lines {
		t := strings.TrimSpace(line)
		switch {
		case fence != "":
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			continue
		case strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~"):
			fence = t[:3]
			continue
		}
		if n := utf8.RuneCountInString(strings.TrimRight(line, "\r")); n > maxMarkdownLineRunes {
			out = append(out, fmt.Sprintf("%s:%d: markdown-line: %d characters, at most %d outside fenced code (tables too)", name, i+1, n, maxMarkdownLineRunes))
		}
	}
	limit, own := markdownLines[name]
	if !own {
		limit = maxGuideLines
		for _, r := range markdownRecords {
			if name == r || strings.HasSuffix(r, "/") && strings.HasPrefix(name, r) {
				return out
			}
		}
	}
	if n := lineCount(src); n > limit {
		out = append(out, fmt.Sprintf("%s:%d: markdown-size: %d lines, at most %d", name, limit+1, n, limit))
	}
	return out
}
