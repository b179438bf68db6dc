package regex

import (
	"errors"
	"strconv"
	"sync/atomic"
	"unicode/utf8"
)

const (
	maxRepeat  = 1000    // RE2's limit on a repetition count
	maxHeight  = 1000    // RE2's limit on the height of a parse tree
	maxProgram = 10000   // ours; RE2 allows about 3.3M instructions
	maxRunes   = 1 << 20 // ours; RE2 allows 2^25 class runes
	smallProg  = 128     // programs whose match state fits on the stack

	// No rune outside [minFold, maxFold] folds to another.
	minFold = 0x0041
	maxFold = 0x1e943
)

// Parse flags.
const (
	flagFold      uint8 = 1 << iota // (?i)
	flagDotNL                       // (?s)
	flagMultiLine                   // (?m)
	flagUngreedy                    // (?U), which does not change whether a pattern matches
)

// Empty-width assertions.
const (
	assertBeginText uint8 = iota
	assertEndText
	assertBeginLine
	assertEndLine
	assertWordBoundary
	assertNoWordBoundary
)

// Operations of parse-tree nodes and program instructions; the first five
// are both.
const (
	opMatch    = iota
	opClass    // one rune of a class
	opAny      // any rune
	opAnyNotNL // any rune but "\n"
	opAssert   // an empty-width assertion
	opSplit    // continue at both out and alt
	opEmpty
	opCapture
	opConcat
	opAlt
	opRepeat
)

// Regexp is a compiled regular expression: a program for the Pike VM.
type Regexp struct {
	prog     []inst
	runes    []rune // class ranges, indexed by inst
	start    int32
	anchored bool   // the pattern starts with \A (or ^ without (?m))
	prefix   string // literal text every match starts with
	// large holds MatchString's state for a program of more than
	// smallProg instructions, so that matching does not allocate; a
	// concurrent call that finds it taken makes its own.
	large atomic.Pointer[matchState]
}

// matchState is MatchString's working memory for a large program.
type matchState struct {
	seen  []uint32
	lists []int32
}

type inst struct {
	op  uint16 // 16 bits: no padding, so Go needs no generated equality function
	arg uint16 // opAssert: the assertion
	out int32  // the next instruction
	alt int32  // opSplit: the other next instruction; opClass: start of its ranges in Regexp.runes
	end int32  // opClass: end of its ranges in Regexp.runes
}

// Compile compiles pattern. Errors are plain messages such as
// `missing closing ): "(ab"`.
func Compile(pattern string) (*Regexp, error) {
	if !utf8.ValidString(pattern) {
		return nil, syntaxError("invalid UTF-8", pattern)
	}
	p := parser{whole: pattern, t: pattern}
	root, err := p.alternate()
	if err != nil {
		return nil, err
	}
	if p.t != "" {
		return nil, syntaxError("unexpected )", pattern)
	}
	re := &Regexp{prog: []inst{{op: opMatch}}}
	re.start = re.compile(root, 0)
	subs := []*node{root}
	if root.op == opConcat {
		subs = root.subs
	}
	re.anchored = subs[0].op == opAssert && subs[0].arg == assertBeginText
	// The prefix's runes are single-rune classes other than U+FFFD (which
	// invalid UTF-8 also reads as) and surrogates (which never match).
	var prefix []byte
	for _, n := range subs {
		if n.op != opClass || len(n.runes) != 2 || n.runes[0] != n.runes[1] ||
			n.runes[0] == utf8.RuneError || !utf8.ValidRune(n.runes[0]) {
			break
		}
		prefix = utf8.AppendRune(prefix, n.runes[0])
	}
	re.prefix = string(prefix)
	return re, nil
}

func syntaxError(code, expr string) error {
	return errors.New(code + ": " + strconv.Quote(expr))
}

// Compiling.

// compile emits n followed by the instruction next and returns n's entry.
func (re *Regexp) compile(n *node, next int32) int32 {
	switch n.op {
	case opClass, opAny, opAnyNotNL, opAssert:
		if n.op == opClass && n.off < 0 {
			n.off = int32(len(re.runes))
			re.runes = append(re.runes, n.runes...)
		}
		return re.emit(inst{op: uint16(n.op), arg: uint16(n.arg), out: next, alt: n.off, end: n.off + int32(len(n.runes))})
	case opCapture:
		return re.compile(n.subs[0], next)
	case opConcat:
		for i := len(n.subs) - 1; i >= 0; i-- {
			next = re.compile(n.subs[i], next)
		}
		return next
	case opAlt:
		pc := re.compile(n.subs[len(n.subs)-1], next)
		for i := len(n.subs) - 2; i >= 0; i-- {
			pc = re.emit(inst{op: opSplit, out: re.compile(n.subs[i], next), alt: pc})
		}
		return pc
	case opRepeat:
		sub, end := n.subs[0], next
		copies := n.min
		if n.max < 0 {
			// x* loops through a split; x{n,} is n-1 copies of x, then x+.
			loop := re.emit(inst{op: opSplit, alt: next})
			next = re.compile(sub, loop)
			re.prog[loop].out = next
			if n.min == 0 {
				next = loop
			} else {
				copies--
			}
		} else {
			// x{n,m} is n copies of x, then m-n nested optional copies.
			for i := n.min; i < n.max; i++ {
				next = re.emit(inst{op: opSplit, out: re.compile(sub, next), alt: end})
			}
		}
		for i := 0; i < copies; i++ {
			next = re.compile(sub, next)
		}
	}
	return next // opEmpty and the rest of opRepeat
}

// emit appends i to the program and returns its index. It is not inlined:
// one copy of its append keeps the Wasm module smaller.
//
//go:noinline
func (re *Regexp) emit(i inst) int32 {
	re.prog = append(re.prog, i)
	return int32(len(re.prog) - 1)
}
