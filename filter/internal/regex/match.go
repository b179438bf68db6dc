package regex

import (
	"strings"
	"unicode/utf8"
)

// Matching.

// MatchString reports whether s contains a match of re. It runs the threads
// of all match attempts in lock step over s, keeping for each input position
// the list of instructions waiting to consume a rune there.
func (re *Regexp) MatchString(s string) bool {
	from := 0
	if re.prefix != "" { // most inputs fail here, before any state is set up
		if from = strings.Index(s, re.prefix); from < 0 {
			return false
		}
	}
	if len(re.prog) > smallProg {
		return re.matchLarge(s, from)
	}
	var seen [smallProg]uint32
	var lists [4*smallProg + 1]int32
	return re.match(s, from, seen[:], lists[:])
}

// matchLarge is MatchString for a program too large for the stack.
//
//go:noinline
func (re *Regexp) matchLarge(s string, from int) bool {
	n := len(re.prog)
	st := re.large.Swap(nil)
	if st == nil {
		st = &matchState{seen: make([]uint32, n), lists: make([]int32, 4*n+1)}
	} else {
		clear(st.seen)
	}
	matched := re.match(s, from, st.seen, st.lists)
	re.large.Store(st)
	return matched
}

// match runs the program over s from byte from, which is at or before the
// first possible match, with seen (one zero per instruction) and lists
// (4 per instruction, plus one) as working memory.
func (re *Regexp) match(s string, from int, seen []uint32, lists []int32) bool {
	n := len(re.prog)
	// seen[pc] is the step in which instruction pc last joined a list.
	cur, next, stack := lists[:0:n], lists[n:n:2*n], lists[2*n:2*n]
	step := uint32(1)
	matched := false
	for pos := from; ; {
		if len(cur) == 0 {
			// No thread is running: skip to where a match can start.
			if re.anchored && pos > 0 {
				return false
			}
			if re.prefix != "" {
				i := strings.Index(s[pos:], re.prefix)
				if i < 0 {
					return false
				}
				pos += i
			}
		}
		if !re.anchored || pos == 0 {
			if cur, stack, matched = re.add(cur, stack, seen, step, re.start, s, pos); matched {
				return true
			}
		}
		if pos == len(s) {
			return false
		}
		r, w := rune(s[pos]), 1
		if r >= utf8.RuneSelf {
			r, w = utf8.DecodeRuneInString(s[pos:])
		}
		if step++; step == 0 { // after 2^32 steps
			clear(seen)
			step = 1
		}
		for _, pc := range cur {
			if re.accepts(&re.prog[pc], r) {
				if next, stack, matched = re.add(next, stack, seen, step, re.prog[pc].out, s, pos+w); matched {
					return true
				}
			}
		}
		cur, next = next, cur[:0]
		pos += w
	}
}

// add appends to list the instructions waiting for a rune that pc leads to
// at pos without consuming input, and reports whether it leads to a match.
func (re *Regexp) add(list, stack []int32, seen []uint32, step uint32, pc int32, s string, pos int) ([]int32, []int32, bool) {
	stack = append(stack[:0], pc)
	for len(stack) > 0 {
		pc, stack = stack[len(stack)-1], stack[:len(stack)-1]
		if seen[pc] == step {
			continue
		}
		seen[pc] = step
		switch in := &re.prog[pc]; in.op {
		case opMatch:
			return list, stack, true
		case opSplit:
			stack = append(stack, in.alt, in.out)
		case opAssert:
			if assert(uint8(in.arg), s, pos) {
				stack = append(stack, in.out)
			}
		default:
			list = append(list, pc)
		}
	}
	return list, stack, false
}

// accepts reports whether the instruction in, waiting for a rune, takes r.
func (re *Regexp) accepts(in *inst, r rune) bool {
	if in.op != opClass {
		return in.op == opAny || r != '\n'
	}
	rs := re.runes[in.alt:in.end]
	// Binary search for the first range ending at or after r.
	i, j := 0, len(rs)/2
	for i < j {
		if m := int(uint(i+j) >> 1); rs[2*m+1] < r {
			i = m + 1
		} else {
			j = m
		}
	}
	return i < len(rs)/2 && rs[2*i] <= r
}

// assert reports whether the empty-width assertion kind holds at pos in s.
// Only ASCII bytes matter to it, so it need not decode runes.
func assert(kind uint8, s string, pos int) bool {
	switch kind {
	case assertBeginText:
		return pos == 0
	case assertEndText:
		return pos == len(s)
	case assertBeginLine:
		return pos == 0 || s[pos-1] == '\n'
	case assertEndLine:
		return pos == len(s) || s[pos] == '\n'
	}
	before := pos > 0 && isWordByte(s[pos-1])
	after := pos < len(s) && isWordByte(s[pos])
	return (before != after) == (kind == assertWordBoundary)
}

func isWordByte(c byte) bool {
	return '0' <= c && c <= '9' || 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || c == '_'
}
