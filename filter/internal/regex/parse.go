package regex

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Parsing.

// node is a parse-tree node. height and size bound the height and the size
// estimate of the tree RE2 parses from the same text, so that we reject what
// RE2 rejects for its limits; size also bounds our program's length.
type node struct {
	op       uint8
	arg      uint8 // opAssert: the assertion; opRepeat: 1 if written {n,m}
	min, max int   // opRepeat; max -1 is unbounded
	runes    []rune
	subs     []*node
	height   int
	size     int
	copies   int   // RE2's product of the counts of nested {n,m} repetitions
	off      int32 // opClass: the start of runes in Regexp.runes once compiled, else -1
}

type parser struct {
	whole string
	t     string // the unparsed rest of whole
	flags uint8
	depth int // of group nesting
	runes int // bound on RE2's count of class runes
}

// node returns a new node with its bounds on RE2's height, size and
// repetition product.
func (p *parser) node(op, arg uint8, subs []*node, lo, hi int) (*node, error) {
	n := &node{op: op, arg: arg, subs: subs, min: lo, max: hi, height: 1, off: -1}
	longest, second := 0, 0
	for _, s := range subs {
		n.height = max(n.height, s.height+1)
		n.copies = max(n.copies, s.copies)
		n.size += s.size
		if s.size > longest {
			longest, second = s.size, longest
		} else if s.size > second {
			second = s.size
		}
	}
	switch op {
	case opAlt:
		// RE2 factors common leading items out of adjacent branches, two
		// levels for each; the second longest branch bounds how many.
		n.height += 2 + 2*second
		n.size += len(subs) - 1
	case opCapture:
		n.size += 2
	case opRepeat:
		// RE2 (repeatIsValid) limits counts m of {n,m} (or n of {n,}) nested
		// in one another to at most 1000 copies: it divides 1000 by each
		// count in turn, outermost first.
		if m := max(hi, lo); arg == 1 && hi != 0 && m > 0 {
			n.copies = max(m, m*n.copies)
		} else if hi == 0 {
			n.copies = 0
		}
		s := n.size
		switch {
		case hi == -1 && lo == 0:
			n.size = 2 + s
		case arg == 0: // + or ?
			n.size = 1 + s
		case hi == -1:
			n.size = 1 + lo*s
		default:
			n.size = hi*s + hi - lo
		}
	}
	n.size = max(n.size, 1)
	if n.height > maxHeight {
		return nil, syntaxError("expression nests too deeply", p.whole)
	}
	if n.size > maxProgram {
		return nil, syntaxError("expression too large", p.whole)
	}
	return n, nil
}

// class returns a node matching one rune of set. RE2 counts a class's
// runes again each time it pushes it: up to three times per enclosing group.
func (p *parser) class(set runeSet) (*node, error) {
	if p.runes += len(set) * (3*p.depth + 3); p.runes > maxRunes {
		return nil, syntaxError("expression too large", p.whole)
	}
	n, err := p.node(opClass, 0, nil, 0, 0)
	if n != nil {
		n.runes = set
	}
	return n, err
}

func (p *parser) literal(r rune) (*node, error) {
	set := runeSet{r, r}
	if p.flags&flagFold != 0 {
		set.addFolded(r, r)
	}
	return p.class(set)
}

// alternate parses branches up to an unmatched ')' or the end.
func (p *parser) alternate() (*node, error) {
	var branches []*node
	for {
		b, err := p.concat()
		if err != nil {
			return nil, err
		}
		branches = append(branches, b)
		if p.t == "" || p.t[0] == ')' {
			break
		}
		p.t = p.t[1:] // '|'
	}
	if len(branches) == 1 {
		return branches[0], nil
	}
	return p.node(opAlt, 0, branches, 0, 0)
}

// concat parses items up to '|', an unmatched ')' or the end.
func (p *parser) concat() (*node, error) {
	var items []*node
	lastRepeat := "" // the text from the repetition operator just parsed
	for p.t != "" && p.t[0] != '|' && p.t[0] != ')' {
		t := p.t
		repeat := ""
		var n *node
		var err error
		switch t[0] {
		case '(':
			n, err = p.group()
		case '[':
			n, err = p.parseClass()
		case '.', '^', '$':
			p.t = t[1:]
			op, arg := uint8(opAssert), uint8(0) // ^
			switch {
			case t[0] == '.' && p.flags&flagDotNL != 0:
				op = opAny
			case t[0] == '.':
				op = opAnyNotNL
			case t[0] == '$':
				arg = assertEndText
			}
			if op == opAssert && p.flags&flagMultiLine != 0 {
				arg += assertBeginLine // BeginText → BeginLine, EndText → EndLine
			}
			n, err = p.node(op, arg, nil, 0, 0)
		case '{', '*', '+', '?':
			lo, hi, after, ok := 0, -1, t[1:], true
			switch t[0] {
			case '{':
				lo, hi, after, ok = parseBraces(t)
			case '+':
				lo = 1
			case '?':
				hi = 1
			}
			if !ok { // a literal '{'
				p.t = t[1:]
				n, err = p.literal('{')
				break
			}
			if n, err = p.repeat(items, t, after, lastRepeat, lo, hi); err != nil {
				return nil, err
			}
			items[len(items)-1], n = n, nil
			repeat = t
		case '\\':
			n, err = p.escape(&items)
		default:
			r, w := utf8.DecodeRuneInString(t)
			p.t = t[w:]
			n, err = p.literal(r)
		}
		if err != nil {
			return nil, err
		}
		if n != nil {
			items = append(items, n)
		}
		lastRepeat = repeat
	}
	switch len(items) {
	case 0:
		return p.node(opEmpty, 0, nil, 0, 0)
	case 1:
		return items[0], nil
	}
	return p.node(opConcat, 0, items, 0, 0)
}

// repeat returns the last of items repeated lo to hi times (hi -1: no
// limit), for the operator at the start of t and followed by after.
func (p *parser) repeat(items []*node, t, after, lastRepeat string, lo, hi int) (*node, error) {
	brace := t[0] == '{'
	op := t[:len(t)-len(after)]
	if brace && (lo < 0 || lo > maxRepeat || hi > maxRepeat || hi >= 0 && lo > hi) {
		return nil, syntaxError("invalid repeat count", op)
	}
	if after != "" && after[0] == '?' {
		after = after[1:] // lazy
	}
	p.t = after
	if lastRepeat != "" {
		return nil, syntaxError("invalid nested repetition operator", lastRepeat[:len(lastRepeat)-len(after)])
	}
	if len(items) == 0 {
		return nil, syntaxError("missing argument to repetition operator", t[:len(t)-len(after)])
	}
	var arg uint8
	if brace {
		arg = 1
	}
	n, err := p.node(opRepeat, arg, []*node{items[len(items)-1]}, lo, hi)
	if err == nil && brace && (lo >= 2 || hi >= 2) && n.copies > maxRepeat {
		return nil, syntaxError("invalid repeat count", op)
	}
	return n, err
}

// parseBraces parses {n}, {n,} or {n,m} at the start of s. ok is false when
// s does not have that form (then '{' is a literal); lo is -1 when a count
// is too large.
func parseBraces(s string) (lo, hi int, rest string, ok bool) {
	lo, s, ok = parseCount(s[1:])
	hi = lo
	if ok && s != "" && s[0] == ',' {
		if s = s[1:]; s != "" && s[0] == '}' {
			hi = -1
		} else if hi, s, ok = parseCount(s); hi < 0 {
			lo = -1
		}
	}
	if !ok || s == "" || s[0] != '}' {
		return 0, 0, "", false
	}
	return lo, hi, s[1:], true
}

// parseCount parses a decimal number without leading zeros; n is -1 when it
// is 10^8 or more.
func parseCount(s string) (n int, rest string, ok bool) {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		if n >= 0 {
			if n = n*10 + int(s[i]-'0'); n >= 1e8 {
				n = -1
			}
		}
		i++
	}
	return n, s[i:], i == 1 || i > 1 && s[0] != '0'
}

// group parses a parenthesized group, or a flag setting (?flags), for which
// it returns a nil node.
func (p *parser) group() (*node, error) {
	t := p.t
	flags, capture := p.flags, true
	p.t = t[1:]
	if len(t) > 1 && t[1] == '?' {
		if len(t) > 4 && t[2] == 'P' && t[3] == '<' || len(t) > 3 && t[2] == '<' {
			end := strings.IndexByte(t, '>')
			if end < 0 {
				return nil, syntaxError("invalid named capture", t)
			}
			name := strings.TrimPrefix(t[3:end], "<")
			if t[2] == '<' {
				name = t[3:end]
			}
			for i := 0; i < len(name); i++ {
				if !isWordByte(name[i]) {
					name = ""
				}
			}
			if name == "" {
				return nil, syntaxError("invalid named capture", t[:end+1])
			}
			p.t = t[end+1:]
		} else {
			var closed bool
			var err error
			if flags, closed, err = p.perlFlags(t); err != nil || closed {
				p.flags = flags
				return nil, err
			}
			capture = false
		}
	}
	if p.depth >= maxHeight {
		return nil, syntaxError("expression nests too deeply", p.whole)
	}
	saved := p.flags
	p.flags = flags
	p.depth++
	n, err := p.alternate()
	if err != nil {
		return nil, err
	}
	if p.t == "" {
		return nil, syntaxError("missing closing )", p.whole)
	}
	p.t = p.t[1:]
	p.depth--
	p.flags = saved
	if capture {
		return p.node(opCapture, 0, []*node{n}, 0, 0)
	}
	return n, nil
}

// perlFlags parses "(?flags)" (closed) or "(?flags:" at the start of t and
// returns the flags in effect after it.
func (p *parser) perlFlags(t string) (flags uint8, closed bool, err error) {
	flags = p.flags
	neg, sawFlag := false, false
	for i := 2; i < len(t); i++ {
		c := t[i]
		if bit := strings.IndexByte("ismU", c); bit >= 0 { // in the order of the flag bits
			if neg {
				flags &^= 1 << bit
			} else {
				flags |= 1 << bit
			}
			sawFlag = true
			continue
		}
		if c == '-' && !neg {
			neg, sawFlag = true, false
			continue
		}
		if (c == ':' || c == ')') && (!neg || sawFlag) {
			p.t = t[i+1:]
			return flags, c == ')', nil
		}
		_, w := utf8.DecodeRuneInString(t[i:])
		return p.flags, false, syntaxError("invalid or unsupported Perl syntax", t[:i+w])
	}
	return p.flags, false, syntaxError("invalid or unsupported Perl syntax", t)
}

// escape parses a backslash escape outside a class. \Q...\E appends its
// literals to items itself and returns a nil node.
func (p *parser) escape(items *[]*node) (*node, error) {
	t := p.t
	var set runeSet
	if ok, err := p.perlClass(&set, t); ok || err != nil {
		p.t = t[2:]
		if err != nil {
			return nil, err
		}
		return p.class(set)
	}
	if len(t) > 1 {
		p.t = t[2:]
		switch c := t[1]; c {
		case 'A', 'z', 'b', 'B':
			// The assertions in the order of their constants.
			return p.node(opAssert, uint8(strings.IndexByte("Az..bB", c)), nil, 0, 0)
		case 'Q':
			lit, rest, _ := strings.Cut(t[2:], `\E`)
			p.t = rest
			for _, r := range lit {
				n, err := p.literal(r)
				if err != nil {
					return nil, err
				}
				*items = append(*items, n)
			}
			return nil, nil
		case 'C':
			return nil, syntaxError("invalid escape sequence", t[:2])
		}
	}
	r, rest, err := parseEscape(t)
	if err != nil {
		return nil, err
	}
	p.t = rest
	return p.literal(r)
}

// perlClass adds to set the class \d, \s, \w, \D, \S or \W at the start of t
// and reports whether there was one. It rejects Unicode classes \p and \P.
func (p *parser) perlClass(set *runeSet, t string) (bool, error) {
	if len(t) < 2 || t[0] != '\\' {
		return false, nil
	}
	switch c := t[1]; c {
	case 'p', 'P':
		n := min(len(t), 3)
		if i := strings.IndexByte(t, '}'); n == 3 && t[2] == '{' && i > 0 {
			n = i + 1
		}
		return false, syntaxError(`unsupported \p{...} class`, t[:n])
	case 'd', 's', 'w', 'D', 'S', 'W':
		set.addGroup(asciiClass(string(c|0x20)), c < 'a', p.flags&flagFold != 0)
		return true, nil
	}
	return false, nil
}

// parseClass parses a bracketed character class.
func (p *parser) parseClass() (*node, error) {
	whole := p.t
	t := whole[1:]
	negated := t != "" && t[0] == '^'
	if negated {
		t = t[1:]
	}
	fold := p.flags&flagFold != 0
	var set runeSet
	for first := true; t == "" || t[0] != ']' || first; first = false {
		// [:alpha:]; RE2 looks for the closing ":]" anywhere after.
		if len(t) > 2 && t[0] == '[' && t[1] == ':' {
			if i := strings.Index(t[2:], ":]"); i >= 0 {
				name := strings.TrimPrefix(t[2:i+2], "^")
				g := asciiClass(name)
				if len(name) < 2 || g == "" { // not \d \s \w
					return nil, syntaxError("invalid character class range", t[:i+4])
				}
				set.addGroup(g, t[2] == '^', fold)
				t = t[i+4:]
				continue
			}
		}
		if ok, err := p.perlClass(&set, t); ok || err != nil {
			if err != nil {
				return nil, err
			}
			t = t[2:]
			continue
		}
		rng := t
		lo, rest, err := classChar(t, whole)
		if err != nil {
			return nil, err
		}
		t = rest
		hi := lo
		if len(t) > 1 && t[0] == '-' && t[1] != ']' {
			if hi, t, err = classChar(t[1:], whole); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, syntaxError("invalid character class range", rng[:len(rng)-len(t)])
			}
		}
		if fold {
			set.addFolded(lo, hi)
		} else {
			set.add(lo, hi)
		}
	}
	p.t = t[1:]
	if negated {
		set = set.negate()
	}
	return p.class(set)
}

func classChar(t, whole string) (rune, string, error) {
	if t == "" {
		return 0, "", syntaxError("missing closing ]", whole)
	}
	if t[0] == '\\' {
		return parseEscape(t)
	}
	r, w := utf8.DecodeRuneInString(t)
	return r, t[w:], nil
}

// parseEscape parses a single-rune escape at the start of t (t[0] is '\').
func parseEscape(t string) (r rune, rest string, err error) {
	if len(t) < 2 {
		return 0, "", errors.New("trailing backslash at end of expression")
	}
	c, w := utf8.DecodeRuneInString(t[1:])
	rest = t[1+w:]
	switch {
	case c == '0' || '1' <= c && c <= '7' && rest != "" && '0' <= rest[0] && rest[0] <= '7':
		r = c - '0'
		for i := 1; i < 3 && rest != "" && '0' <= rest[0] && rest[0] <= '7'; i++ {
			r = r*8 + rune(rest[0]-'0')
			rest = rest[1:]
		}
		return r, rest, nil
	case c == 'x' && rest != "" && rest[0] == '{':
		// One or more hex digits, at most 10FFFF.
		i := 1
		for ; i < len(rest) && unhex(rest[i]) >= 0 && r <= unicode.MaxRune; i++ {
			r = r*16 + unhex(rest[i])
		}
		if i > 1 && i < len(rest) && rest[i] == '}' && r <= unicode.MaxRune {
			return r, rest[i+1:], nil
		}
	case c == 'x':
		if len(rest) > 1 && unhex(rest[0]) >= 0 && unhex(rest[1]) >= 0 {
			return unhex(rest[0])<<4 | unhex(rest[1]), rest[2:], nil
		}
	case c < utf8.RuneSelf && !isWordByte(byte(c)) || c == '_':
		return c, rest, nil // escaped punctuation
	default:
		if i := strings.IndexRune("a\af\fn\nr\rt\tv\v", c); i >= 0 && i%2 == 0 {
			return rune("a\af\fn\nr\rt\tv\v"[i+1]), rest, nil
		}
	}
	return 0, "", syntaxError("invalid escape sequence", t[:1+w])
}

func unhex(c byte) rune {
	switch {
	case '0' <= c && c <= '9':
		return rune(c - '0')
	case 'a' <= c && c <= 'f':
		return rune(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return rune(c-'A') + 10
	}
	return -1
}

// asciiClasses lists RE2's Perl (\d \s \w) and POSIX ASCII classes: after
// each name and ':', its ranges as pairs of bytes lo, hi.
const asciiClasses = ";d:09;s:\t\n\f\r  ;w:09AZ__az;alnum:09AZaz;alpha:AZaz;ascii:\x00\x7f;" +
	"blank:\t\t  ;cntrl:\x00\x1f\x7f\x7f;digit:09;graph:!~;lower:az;print: ~;" +
	"punct:!/:@[`{~;space:\t\r  ;upper:AZ;word:09AZ__az;xdigit:09AFaf;"

// asciiClass returns the ranges of the class name in asciiClasses, or "".
func asciiClass(name string) string {
	i := strings.Index(asciiClasses, ";"+name+":")
	if i < 0 || strings.ContainsAny(name, ";:") {
		return ""
	}
	r := asciiClasses[i+len(name)+2:]
	return r[:strings.IndexByte(r, ';')]
}
