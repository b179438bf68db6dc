// Package regex is the regular-expression matcher behind the engine's $regex
// and $regexi condition operators. It imports only the standard library and
// never regexp, fmt or os: it is linked into the Wasm filter. It replaces the
// standard regexp package, which with regexp/syntax and the tables they pull
// in made up about 545 KB of the Wasm module — and every megabyte of module
// costs Envoy about 16 MiB of RSS.
//
// For every pattern Compile accepts, the result is that of Go's regexp
// (RE2 syntax, Perl flags: `^` and `$` match only at the ends of the text and
// `.` does not match "\n" unless (?m) or (?s) say otherwise). A pattern Go
// rejects is rejected, and so is syntax this package does not implement; none
// is ever matched differently. The API is what the engine needs: Compile and
// (*Regexp).MatchString. Matching is an unanchored search that only
// reports whether there is a match. Supported:
//
//   - literals (UTF-8), `.`, `^ $ \A \z \b \B`, alternation `|`;
//   - groups `( )`, `(?: )`, `(?P<name> )` and `(?<name> )` (captures are
//     parsed, not reported); flags `i m s U`, set by `(?flags)`, cleared by
//     `(?-flags)`, scoped by `(?flags: )`;
//   - repetition `* + ? {n} {n,} {n,m}` and their lazy forms ending in `?`
//     (laziness does not change whether a pattern matches), counts ≤ 1000;
//   - classes `[...]` with ranges, negation, escapes, `\d \s \w \D \S \W`
//     (also outside classes) and the ASCII classes `[:alpha:]`,
//     `[:^alpha:]` and the rest of RE2's list;
//   - escapes `\a \f \t \n \r \v`, octal `\0`…`\777` (`\1`–`\7` only followed
//     by a digit: alone they would be backreferences), hex `\x7F` and
//     `\x{10FFFF}`, escaped punctuation, literal text `\Q...\E`;
//   - case folding under (?i) over unicode.SimpleFold orbits, as in RE2.
//
// Not supported, though Go's regexp accepts them (Compile rejects them):
//
//   - Unicode classes `\pL`, `\p{Greek}`, `\PL`, `\P{Greek}`, also inside
//     `[...]`: they would link unicode's category and script tables;
//   - patterns compiling to more than 10,000 instructions, counting repeats
//     expanded (Go allows about 3.3 million), or with more than 2^20 class
//     runes (Go: 2^25);
//   - groups nested more than 1000 deep, and alternations whose RE2 parse
//     tree might exceed RE2's height limit of 1000 by our conservative
//     estimate: in practice, alternations with two branches of more than
//     about 500 instructions each (RE2 factors their common prefixes into
//     nested groups).
//
// Go's regexp rejects (and so do we) lookaround, backreferences, `\C`, `\Z`,
// possessive and nested repetition, counts over 1000, invalid UTF-8.
//
// Matching runs a Pike VM over a Thompson NFA in O(len(program) ×
// len(input)) time, without backtracking. A compiled regex is immutable and
// each match keeps its state on the stack (or, for programs over 128
// instructions, in a few slices), so MatchString is safe for concurrent use.
// Invalid UTF-8 in the input reads as U+FFFD one byte at a time, as in Go.
package regex
