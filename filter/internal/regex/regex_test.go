package regex

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode"
)

// regexMatchCases are patterns Compile accepts, each with inputs and
// whether the pattern matches somewhere in them. Every case is also checked
// against Go's regexp.
var regexMatchCases = []struct {
	name    string
	pattern string
	match   []string
	noMatch []string
}{
	{"empty", ``, []string{"", "x"}, nil},
	{"literal", `abc`, []string{"abc", "xabcx"}, []string{"", "ab", "acb", "ABC"}},
	{"utf8 literal", `héllo 世界`, []string{"say héllo 世界!"}, []string{"hello 世界"}},
	{"dot", `a.c`, []string{"abc", "a世c", "a\xffc"}, []string{"a\nc", "ac"}},
	{"dot invalid utf8 is one rune", `^a.b$`, []string{"a\xffb", "a\xe2b"}, []string{"a\xff\xffb", "a\xe2\x82b"}},
	{"replacement char matches invalid byte", `\x{FFFD}`, []string{"\xff", "\uFFFD"}, []string{"a"}},
	{"anchors", `^ab$`, []string{"ab"}, []string{"ab\n", "\nab", "xab"}},
	{"begin anchor", `^ping`, []string{"ping", "pingpong"}, []string{"xping"}},
	{"end anchor", `-12-25$`, []string{"1980-12-25"}, []string{"1980-12-25\n", "1980-12-26"}},
	{"text anchors", `\Aab\z`, []string{"ab"}, []string{"ab\n"}},
	{"multiline", `(?m)^b$`, []string{"a\nb\nc", "b"}, []string{"ab\nc"}},
	{"multiline text anchors", `(?m)\Ab\z`, []string{"b"}, []string{"a\nb"}},
	{"word boundary", `\bfoo\b`, []string{"foo", "a foo.", "(foo)"}, []string{"foobar", "_foo"}},
	{"not word boundary", `\Boo\B`, []string{"fooxd"}, []string{"oo", "a oo b"}},
	{"word boundary non-ascii", `\bé`, []string{"aé"}, []string{"é", " é"}},
	{"alternation", `(Mobile|Tablet)`, []string{"Mobile Safari", "Tablet"}, []string{"mobile", "Desktop"}},
	{"alternation empty branch", `a(|b)c`, []string{"ac", "abc"}, []string{"abbc"}},
	{"non-capturing", `(?:ab)+$`, []string{"abab"}, []string{"aba"}},
	{"named P", `(?P<os>iOS|Android) (\d+)`, []string{"iOS 17"}, []string{"iOS x"}},
	{"named", `(?<os>iOS)`, []string{"iOS"}, []string{"ios"}},
	{"fold", `(?i)(mobile|tablet)`, []string{"MOBILE", "TaBlEt"}, []string{"desktop"}},
	{"fold prefix", `(?i)hello`, []string{"HeLLo"}, []string{"help"}},
	{"fold kelvin", `(?i)k`, []string{"K", "k", "\u212A"}, []string{"x"}},
	{"fold long s", `(?i)s`, []string{"S", "\u017F"}, nil},
	{"fold sigma", `(?i)σ`, []string{"Σ", "ς"}, []string{"s"}},
	{"fold class", `(?i)[a-c]`, []string{"B"}, []string{"d"}},
	{"fold class kelvin", `(?i)[j-l]`, []string{"\u212A"}, []string{"m"}},
	{"fold negated class", `(?i)^[^k]$`, []string{"j"}, []string{"K", "k", "\u212A"}},
	{"fold word", `(?i)^\w$`, []string{"\u212A", "\u017F"}, []string{"é"}},
	{"fold not word", `(?i)^\W$`, []string{"é"}, []string{"\u212A", "\u017F", "a"}},
	{"fold class with not word", `(?i)^[a\W]$`, []string{"A", "é"}, []string{"\u017F", "b"}},
	{"no fold word", `^\W$`, []string{"\u212A"}, []string{"a"}},
	{"fold posix", `(?i)^[[:upper:]]$`, []string{"a", "\u212A"}, []string{"1"}},
	{"fold negated posix", `(?i)^[[:^upper:]]$`, []string{"1"}, []string{"a", "\u212A"}},
	{"scoped fold", `a(?i:b)c`, []string{"aBc"}, []string{"ABc", "aBC"}},
	{"fold off", `(?i)a(?-i)b`, []string{"Ab"}, []string{"AB"}},
	{"flag persists across alternation", `x|(?i)y|z`, []string{"Z", "Y"}, []string{"X"}},
	{"flag ends with group", `(a(?i)b)c`, []string{"aBc"}, []string{"aBC"}},
	{"dot nl", `(?s)a.b`, []string{"a\nb"}, nil},
	{"dot nl scoped", `(?s:.)(.)`, []string{"\nx"}, []string{"\n\n"}},
	{"ungreedy", `(?U)a+`, []string{"aa"}, []string{"b"}},
	{"empty flags", `(?)a`, []string{"a"}, nil},
	{"star", `ab*c`, []string{"ac", "abbbc"}, []string{"abdc"}},
	{"plus", `ab+c`, []string{"abc"}, []string{"ac"}},
	{"quest", `^ab?c$`, []string{"ac", "abc"}, []string{"abbc"}},
	{"lazy", `^a+?b*?c??$`, []string{"a", "aabbc"}, []string{"b"}},
	{"count", `^a{3}$`, []string{"aaa"}, []string{"aa", "aaaa"}},
	{"count min", `^a{2,}$`, []string{"aa", "aaaaa"}, []string{"a"}},
	{"count range", `^a{2,3}$`, []string{"aa", "aaa"}, []string{"a", "aaaa"}},
	{"count zero", `^ba{0}c$`, []string{"bc"}, []string{"bac"}},
	{"count lazy", `^a{1,2}?$`, []string{"a"}, []string{""}},
	{"count 1000", `^a{1000}$`, []string{strings.Repeat("a", 1000)}, []string{strings.Repeat("a", 999)}},
	{"nested counts", `^(?:a{10}){100}$`, []string{strings.Repeat("a", 1000)}, []string{strings.Repeat("a", 990)}},
	{"star of empty", `^(?:)*$`, []string{""}, []string{"a"}},
	{"star of star", `^(a*)*$`, []string{"", "aaa"}, []string{"b"}},
	{"repeat of assertion", `^*a$*`, []string{"a", "ab"}, []string{"b"}},
	{"repeat after flags", `^a(?i)*b$`, []string{"B", "aaB"}, []string{"Ab"}},
	{"repeat after empty quote", `^a*\Q\E*$`, []string{"aa"}, []string{"b"}},
	{"brace literal", `a{,2}`, []string{"a{,2}"}, []string{"aa"}},
	{"brace literal leading zero", `a{01}`, []string{"a{01}"}, []string{"a"}},
	{"brace literal open", `x{`, []string{"x{"}, []string{"x"}},
	{"brace literal alone", `{`, []string{"{"}, nil},
	{"brace literal after repeat", `a*{`, []string{"{"}, nil},
	{"brace literal no max", `a{2,x}`, []string{"a{2,x}"}, nil},
	{"closing brackets literal", `]}`, []string{"]}"}, nil},
	{"class", `^[abc]+$`, []string{"cab"}, []string{"abd"}},
	{"class range", `^[a-fA-F0-9]+$`, []string{"Fe09"}, []string{"g"}},
	{"class negated", `^[^abc]$`, []string{"d", "\n", "世"}, []string{"a"}},
	{"class bracket first", `^[]a]+$`, []string{"]a"}, []string{"b"}},
	{"class negated bracket first", `^[^]a]$`, []string{"b"}, []string{"]"}},
	{"class dash", `^[-a]+$`, []string{"-a"}, []string{"b"}},
	{"class dash last", `^[a-]+$`, []string{"-a"}, []string{"b"}},
	{"class dash between ranges", `^[a-c-e]+$`, []string{"a-e"}, []string{"d"}},
	{"class perl", `^[\d\s]+$`, []string{"1 2\t3"}, []string{"a", "\v"}},
	{"class perl then dash", `^[\d-z]+$`, []string{"1-z"}, []string{"y"}},
	{"class escapes", `^[\]\[\\\-\^]+$`, []string{`][\-^`}, []string{"a"}},
	{"class hex", `^[\x41-\x{5A}]+$`, []string{"AZ"}, []string{"a"}},
	{"class unicode range", `^[α-ω]+$`, []string{"αβγ"}, []string{"Α"}},
	{"class open bracket", `^[[a]+$`, []string{"[a"}, nil},
	{"class colon not posix", `^[[:]+$`, []string{"[:"}, nil},
	{"posix", `^[[:alpha:][:digit:]]+$`, []string{"a1Z"}, []string{"_"}},
	{"posix negated", `^[[:^space:]]+$`, []string{"ab"}, []string{"a b", "\v"}},
	{"posix all", `[[:alnum:]][[:ascii:]][[:blank:]][[:cntrl:]][[:graph:]][[:lower:]][[:print:]][[:punct:]][[:upper:]][[:word:]][[:xdigit:]]`,
		[]string{"a\u007f \x01!a !A_f"}, nil},
	{"perl classes", `^\d\D\s\S\w\W$`, []string{"1a b_-"}, []string{"1a\vb_-"}},
	{"space is not vtab", `\s`, []string{"\f", "\r", "\n", "\t", " "}, []string{"\v", "\u00a0"}},
	{"digit ascii", `\d`, nil, []string{"٣"}},
	{"escapes", `\t\n\r\f\v\a`, []string{"\t\n\r\f\v\a"}, nil},
	{"hex", `\x41\x{42}\x{000043}`, []string{"ABC"}, nil},
	{"hex max", `\x{10FFFF}`, []string{"\U0010FFFF"}, nil},
	{"octal", `\0\07\101\1011`, []string{"\x00\x07AA1"}, nil},
	{"octal 8 after", `\08`, []string{"\x008"}, nil},
	{"octal over 255", `\777`, []string{"\u01ff"}, nil},
	{"punctuation", `\.\*\\\[\]\(\)\{\}\|\?\+\^\$\-\_\#\ \!\/`, []string{`.*\[](){}|?+^$-_# !/`}, nil},
	{"quote", `\Qa.b*\E+`, []string{"a.b**"}, []string{"aab"}},
	{"quote unterminated", `x\Q(a`, []string{"x(a"}, nil},
	{"regexi conformance", `(?i)(MOBILE|TABLET)`, []string{"mobile"}, nil},
	{"ip prefix", `^10\.`, []string{"10.1.2.3"}, []string{"100.1"}},
	{"surrogate never matches", `\x{D800}`, nil, []string{"\xed\xa0\x80", "\uFFFD"}},
	{"prefix then more", `foo(bar|baz)`, []string{"xxfoofoobaz"}, []string{"foobax"}},
	{"prefix with fold tail", `ab(?i)c`, []string{"abC"}, []string{"aBc"}},
}

// regexRejectCases are patterns Compile rejects, with part of the
// error. goAccepts marks the ones Go's regexp accepts (deliberately
// unsupported here).
var regexRejectCases = []struct {
	name, pattern, err string
	goAccepts          bool
}{
	{"missing paren", `(ab`, `missing closing ): "(ab"`, false},
	{"unexpected paren", `ab)`, `unexpected )`, false},
	{"missing bracket", `[ab`, `missing closing ]: "[ab"`, false},
	{"empty class", `[]`, `missing closing ]`, false},
	{"bad range", `[z-a]`, `invalid character class range: "z-a"`, false},
	{"bad posix", `[[:foo:]]`, `invalid character class range: "[:foo:]"`, false},
	{"posix closes late", `[[:a]b:]]`, `invalid character class range`, false},
	{"posix closes after colon", `[[:]:]]`, `invalid character class range: "[:]:]"`, false},
	{"perl name as posix", `[[:d:]]`, `invalid character class range`, false},
	{"negated perl name as posix", `[[:^w:]]`, `invalid character class range`, false},
	{"posix name with separator", `[[:alnum:09AZaz;alpha:]]`, `invalid character class range`, false},
	{"range to class", `[a-\d]`, `invalid escape sequence`, false},
	{"backspace in class", `[\b]`, `invalid escape sequence`, false},
	{"trailing backslash", `ab\`, `trailing backslash`, false},
	{"trailing backslash in class", `[a\`, `trailing backslash`, false},
	{"backreference", `(a)\1`, `invalid escape sequence`, false},
	{"octal 8", `\8`, `invalid escape sequence`, false},
	{"letter escape", `\q`, `invalid escape sequence`, false},
	{"Z", `a\Z`, `invalid escape sequence`, false},
	{"C", `\C`, `invalid escape sequence`, false},
	{"E alone", `\E`, `invalid escape sequence`, false},
	{"non-ascii escape", `\é`, `invalid escape sequence`, false},
	{"hex short", `\x4`, `invalid escape sequence`, false},
	{"hex empty braces", `\x{}`, `invalid escape sequence`, false},
	{"hex too big", `\x{110000}`, `invalid escape sequence`, false},
	{"hex unterminated", `\x{41`, `invalid escape sequence`, false},
	{"lookahead", `^(?!bot)`, `invalid or unsupported Perl syntax: "(?!"`, false},
	{"lookbehind", `(?<=a)b`, `invalid named capture`, false},
	{"negative lookbehind", `(?<!a)b`, `invalid named capture`, false},
	{"atomic", `(?>a)`, `invalid or unsupported Perl syntax`, false},
	{"comment", `(?#x)`, `invalid or unsupported Perl syntax`, false},
	{"quote name", `(?'n'a)`, `invalid or unsupported Perl syntax`, false},
	{"named backref", `(?P=n)`, `invalid or unsupported Perl syntax`, false},
	{"bad flag", `(?x)a`, `invalid or unsupported Perl syntax`, false},
	{"double negation", `(?i--m)a`, `invalid or unsupported Perl syntax`, false},
	{"negation without flag", `(?i-)a`, `invalid or unsupported Perl syntax`, false},
	{"unterminated flags", `(?i`, `invalid or unsupported Perl syntax`, false},
	{"empty name", `(?P<>a)`, `invalid named capture`, false},
	{"bad name", `(?P<a-b>a)`, `invalid named capture`, false},
	{"non-ascii name", `(?P<é>a)`, `invalid named capture`, false},
	{"unterminated name", `(?P<name`, `invalid named capture`, false},
	{"star alone", `*`, `missing argument to repetition operator: "*"`, false},
	{"star after paren", `(*)`, `missing argument`, false},
	{"star after bar", `a|*`, `missing argument`, false},
	{"star after flags", `(?i)*`, `missing argument`, false},
	{"count alone", `{2}`, `missing argument`, false},
	{"double star", `a**`, `invalid nested repetition operator: "**"`, false},
	{"possessive", `a++`, `invalid nested repetition operator`, false},
	{"lazy then quest", `a???`, `invalid nested repetition operator`, false},
	{"count then star", `a{2}*`, `invalid nested repetition operator`, false},
	{"count then count", `a{2}{3}`, `invalid nested repetition operator`, false},
	{"count over 1000", `a{1001}`, `invalid repeat count: "{1001}"`, false},
	{"count max over 1000", `a{1,1001}`, `invalid repeat count`, false},
	{"count min over max", `a{3,2}`, `invalid repeat count`, false},
	{"count huge", `a{100000000000}`, `invalid repeat count`, false},
	{"nested counts over 1000", `(a{11}){100}`, `invalid repeat count`, false},
	{"nested counts division", `((a{2}){3}){167}`, `invalid repeat count`, false},
	{"invalid utf8", "a\xffb", `invalid UTF-8`, false},
	{"unicode class", `\pL`, `unsupported \p{...} class`, true},
	{"unicode class braces", `\p{Greek}`, `unsupported \p{...} class: "\\p{Greek}"`, true},
	{"negated unicode class", `\P{L}`, `unsupported \p{...} class`, true},
	{"unicode class in class", `[\p{Lu}a]`, `unsupported \p{...} class`, true},
	{"unknown unicode class", `\p{Foo}`, `unsupported \p{...} class`, false},
	{"too large", "(?:" + strings.Repeat("()", 3400) + "){1000}", `expression too large`, false},
	{"too large for us", `[a-z]{1000}[0-9]{1000}[A-Z]{1000}[a-z]{1000}[0-9]{1000}[A-Z]{1000}[a-z]{1000}[0-9]{1000}[A-Z]{1000}[a-z]{1000}x`, `expression too large`, true},
	{"too deep", strings.Repeat("(", 1001) + strings.Repeat(")", 1001), `expression nests too deeply`, false},
}

func TestRegexMatch(t *testing.T) {
	for _, tc := range regexMatchCases {
		t.Run(tc.name, func(t *testing.T) {
			re, err := Compile(tc.pattern)
			if err != nil {
				t.Fatalf("Compile(%q): %v", tc.pattern, err)
			}
			goRE := regexp.MustCompile(tc.pattern)
			for _, s := range tc.match {
				if !re.MatchString(s) {
					t.Errorf("%q does not match %q", tc.pattern, s)
				}
				if !goRE.MatchString(s) {
					t.Errorf("bad case: Go's regexp %q does not match %q", tc.pattern, s)
				}
			}
			for _, s := range tc.noMatch {
				if re.MatchString(s) {
					t.Errorf("%q matches %q", tc.pattern, s)
				}
				if goRE.MatchString(s) {
					t.Errorf("bad case: Go's regexp %q matches %q", tc.pattern, s)
				}
			}
		})
	}
}

func TestRegexReject(t *testing.T) {
	for _, tc := range regexRejectCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(tc.pattern)
			if err == nil {
				t.Fatalf("Compile(%q) accepted", tc.pattern)
			}
			if !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Compile(%q): %v, want %q", tc.pattern, err, tc.err)
			}
			if _, goErr := regexp.Compile(tc.pattern); (goErr == nil) != tc.goAccepts {
				t.Errorf("bad case: Go's regexp.Compile(%q) = %v", tc.pattern, goErr)
			}
		})
	}
}

// TestRegexLimits runs patterns built to reach RE2's limits on size, parse
// tree height and class runes: what Compile accepts, Go must accept
// and match alike.
func TestRegexLimits(t *testing.T) {
	type limitCase struct{ name, pattern string }
	var cases []limitCase
	for _, n := range []int{998, 999, 1000, 1001} {
		cases = append(cases,
			limitCase{fmt.Sprint(n, " nested captures"), strings.Repeat("(", n) + "a" + strings.Repeat(")", n)},
			limitCase{fmt.Sprint(n, " nested groups"), strings.Repeat("(?:", n) + "a" + strings.Repeat(")", n)},
			limitCase{fmt.Sprint(n, " stacked stars"), "a" + strings.Repeat(`*\Q\E`, n)},
		)
	}
	for _, n := range []int{100, 300, 490, 495, 500, 505, 600, 1000} {
		dots := strings.Repeat(".", n)
		cases = append(cases,
			limitCase{fmt.Sprint(n, " dots in two branches"), "(?:" + dots + "y|" + dots + "z)"},
			limitCase{fmt.Sprint(n, " dots after a literal in two branches"), "x" + dots + "|x" + dots + "z"},
			limitCase{fmt.Sprint(n, " classes in two branches"), "(?:" + strings.Repeat("[ab]", n) + "|" + strings.Repeat("[ab]", n) + "c)"},
			limitCase{fmt.Sprint(n, " dots after a factored group"), "(?:ax|ay)|a" + dots},
			limitCase{fmt.Sprint(n, " literals in one branch"), "foo|" + strings.Repeat("b", 3*n)},
		)
	}
	big := `(?i)[\x{100}-\x{2000}]`
	cases = append(cases,
		limitCase{"empty captures", "(?:" + strings.Repeat("()", 3400) + "){1000}"},
		limitCase{"empty groups", "(?:" + strings.Repeat("(?:)", 3400) + "){1000}"},
		limitCase{"zero counts", "(?:" + strings.Repeat("a{0}", 3400) + "){1000}"},
		limitCase{"folded class in 1000 groups", strings.Repeat("(?:", 1000) + big + strings.Repeat(")", 1000)},
		limitCase{"folded classes in 500 groups", strings.Repeat(strings.Repeat("(?:", 500)+big+strings.Repeat(")", 500), 20)},
		limitCase{"count 1000 once", `(?:a{1000}){1}`},
		limitCase{"class 1000 times", `[a-z]{1000}`},
		limitCase{"nested counts", `(?:\d{1,100}\.){9}`},
	)
	inputs := []string{"", "a", strings.Repeat("ab", 600), strings.Repeat(".", 1200) + "yz"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			re, err := Compile(tc.pattern)
			goRE, goErr := regexp.Compile(tc.pattern)
			t.Logf("ours accepts %v, Go accepts %v", err == nil, goErr == nil)
			if err != nil {
				return
			}
			if goErr != nil {
				t.Fatalf("accepted; Go: %.80v", goErr)
			}
			for _, s := range inputs {
				if got, want := re.MatchString(s), goRE.MatchString(s); got != want {
					t.Errorf("on %.20q: got %v, Go %v", s, got, want)
				}
			}
		})
	}
}

func TestRegexFoldRange(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if (r < minFold || r > maxFold) && unicode.SimpleFold(r) != r {
			t.Fatalf("U+%04X folds to U+%04X, outside [minFold, maxFold]", r, unicode.SimpleFold(r))
		}
	}
}

// TestRegexPathological: a Pike VM runs these in linear time; a
// backtracking matcher would not finish.
func TestRegexPathological(t *testing.T) {
	s := strings.Repeat("a", 10000) + "b"
	for _, p := range []string{`(a*)*$`, `(a*)*c`, `(a|aa)+c`, `(?:a+a+)+c`, `^(a?){50}a{50}$`} {
		re, err := Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := re.MatchString(s), regexp.MustCompile(p).MatchString(s); got != want {
			t.Errorf("%q: got %v, want %v", p, got, want)
		}
	}
}

// TestRegexLargeProgram checks a program too large for MatchString's stack
// buffers: it keeps one working state per pattern, so matching again must
// neither see the previous input's state nor allocate.
func TestRegexLargeProgram(t *testing.T) {
	p := `(?i)chrome/[0-9]{1,150}(\.[0-9]+)?`
	re, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(re.prog) <= smallProg {
		t.Fatalf("%q compiles to %d instructions, want more than %d", p, len(re.prog), smallProg)
	}
	want := regexp.MustCompile(p)
	inputs := []string{"Mozilla/5.0 Chrome/120.0.1", "chrome/", "CHROME/7", "Firefox/120", "chrome/x chrome/9", ""}
	for round := range 3 {
		for _, s := range inputs {
			if got := re.MatchString(s); got != want.MatchString(s) {
				t.Errorf("round %d, %q: got %v, want %v", round, s, got, !got)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { re.MatchString("Mozilla/5.0 Chrome/120.0.1") }); n != 0 {
		t.Errorf("MatchString allocates %.0f times per call, want 0", n)
	}
}

func TestRegexConcurrent(t *testing.T) {
	for _, p := range []string{`(?i)(mobile|tablet)\b`, `(?i)(mobile|tablet)\b[0-9]{0,100}`} {
		re, err := Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 1000 {
					s, want := "Desktop", false
					if (i+j)%2 == 0 {
						s, want = "iPad; Tablet OS", true
					}
					if re.MatchString(s) != want {
						t.Errorf("%q, %q: got %v", p, s, !want)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
}

// TestRegexRandom compares Compile and MatchString with Go's regexp on
// patterns built at random from tokens that exercise the parser's corners.
func TestRegexRandom(t *testing.T) {
	tokens := []string{"a", "b", "A", "k", "K", "\u212a", "ſ", "s", "é", "\n", ".", "^", "$", `\A`, `\z`,
		`\b`, `\B`, "|", "(", ")", "(?:", "(?i)", "(?-i)", "(?s)", "(?m)", "(?i:", "(?P<n>", "(?<n>", "*",
		"+", "?", "*?", "??", "{2}", "{1,3}", "{0,}", "{,2}", "{0}", "[", "]", "[^", "-", `\d`, `\W`, `\s`,
		"[:alpha:]", "[:^lower:]", "[:word:]", `\x41`, `\x{6B}`, `\101`, `\0`, `\Q`, `\E`, `\.`, `\-`,
		"{", "}", `\`, `\pL`, "0", "_", "\xff", ":", "]"}
	for i, tok := range tokens {
		if u, err := strconv.Unquote(`"` + tok + `"`); err == nil {
			tokens[i] = u
		}
	}
	inputs := []string{"a", "b", "A", "k", "K", "\u212a", "ſ", "s", "S", "\n", " ", "é", "É", "_", "0", "\xff", "{", "}", "-", ":"}
	for i, in := range inputs {
		inputs[i], _ = strconv.Unquote(`"` + in + `"`)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	n := 30000
	if testing.Short() {
		n = 3000
	}
	accepted := 0
	for range n {
		var pb strings.Builder
		for range 1 + rng.IntN(8) {
			pb.WriteString(tokens[rng.IntN(len(tokens))])
		}
		pattern := pb.String()
		re, err := Compile(pattern)
		goRE, goErr := regexp.Compile(pattern)
		if (err == nil) != (goErr == nil) && !strings.Contains(fmt.Sprint(err), `\p{...}`) {
			t.Fatalf("Compile(%q): %v; Go: %v", pattern, err, goErr)
		}
		if err != nil {
			continue
		}
		accepted++
		for range 8 {
			var sb strings.Builder
			for range rng.IntN(6) {
				sb.WriteString(inputs[rng.IntN(len(inputs))])
			}
			if s := sb.String(); re.MatchString(s) != goRE.MatchString(s) {
				t.Fatalf("%q on %q: got %v, Go %v", pattern, s, !goRE.MatchString(s), goRE.MatchString(s))
			}
		}
	}
	t.Logf("%d of %d patterns accepted", accepted, n)
}

// FuzzRegex compares Compile and MatchString with Go's regexp: what
// Compile accepts Go accepts and matches alike; what Go rejects
// Compile rejects.
func FuzzRegex(f *testing.F) {
	// The regexes of GrowthBook's spec suite (cases.json).
	for _, p := range []string{`(Mobile|Tablet)`, `(mobile|tablet)`, `-12-25$`, `/???***[)`, `^hello`, `^ping`,
		`(?i)(MOBILE|TABLET)`, `(?i)(mobile|tablet)`} {
		f.Add(p, "Mobile tablet hello ping 1980-12-25")
	}
	for _, tc := range regexMatchCases {
		for _, s := range append(tc.match, tc.noMatch...) {
			f.Add(tc.pattern, s)
		}
	}
	for _, tc := range regexRejectCases {
		if len(tc.pattern) < 100 {
			f.Add(tc.pattern, "abc")
		}
	}
	f.Fuzz(func(t *testing.T, pattern, s string) {
		re, err := Compile(pattern)
		goRE, goErr := regexp.Compile(pattern)
		switch {
		case err != nil && goErr == nil:
			if !strings.Contains(err.Error(), `\p{...}`) && !strings.Contains(err.Error(), "too large") &&
				!strings.Contains(err.Error(), "too deeply") {
				t.Fatalf("Compile(%q): %v; Go accepts it", pattern, err)
			}
		case err == nil && goErr != nil:
			t.Fatalf("Compile(%q) accepted; Go: %v", pattern, goErr)
		case err == nil:
			if got, want := re.MatchString(s), goRE.MatchString(s); got != want {
				t.Fatalf("%q on %q: got %v, Go %v", pattern, s, got, want)
			}
		}
	})
}
