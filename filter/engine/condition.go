package engine

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/allotmesh/allot/filter/internal/jsonx"
	"github.com/allotmesh/allot/filter/internal/regex"
)

// Condition is a compiled GrowthBook targeting condition (a MongoDB-style
// query over attributes). It is parsed once — operators resolved, regular
// expressions compiled, version strings padded, $in lists indexed — so
// matching never touches JSON. A Condition is immutable and safe for
// concurrent use.
type Condition struct {
	root *objCond
	refs []string
}

// CompileCondition compiles a condition against savedGroups (the groups
// $inGroup and $notInGroup may name). Like Compile it rejects what the
// reference tolerates: unknown operators, invalid regular expressions,
// operands of the wrong type, unknown saved groups. Every problem is
// reported as a *FieldError under the path "condition".
func CompileCondition(raw RawMessage, savedGroups map[string]RawMessage) (*Condition, error) {
	groups, gerrs := compileGroups(savedGroups)
	c, errs := compileCondition("condition", raw, groups, newSlots())
	errs = append(gerrs, errs...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// Match reports whether attrs satisfy the condition.
func (c *Condition) Match(attrs Attributes) bool {
	return c.root.eval(map[string]any(attrs), nil)
}

// Referenced returns the sorted top-level attribute names the condition
// reads ("a" for the path "a.b").
func (c *Condition) Referenced() []string { return slices.Clone(c.refs) }

// compileGroups decodes saved groups; each must be a JSON array.
func compileGroups(raw map[string]RawMessage) (map[string][]any, []error) {
	var errs []error
	groups := make(map[string][]any, len(raw))
	names := make([]string, 0, len(raw))
	for name := range raw {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		v, err := decodeOrdered(raw[name])
		arr, ok := v.([]any)
		if err != nil || !ok {
			errs = append(errs, &FieldError{"savedGroups." + name, "must be an array of values"})
			groups[name] = nil
			continue
		}
		groups[name] = arr
	}
	return groups, errs
}

// compileCondition compiles raw (JSON null or empty means no condition,
// returned as nil). It always returns a usable condition: parts that are
// invalid evaluate as the reference evaluates them (mostly to false), and
// are reported in errs. Compile refuses the set when errs is non-empty; the
// conformance test uses the lenient result.
//
// Top-level attribute names get indexes in slots: Set.Assign looks each
// attribute up once per call and conditions read it by index.
func compileCondition(path string, raw RawMessage, groups map[string][]any, slots *slotTable) (*Condition, []error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	v, err := decodeOrdered(raw)
	if err != nil {
		return nil, []error{&FieldError{path, "invalid JSON: " + err.Error()}}
	}
	if v == nil {
		return nil, nil
	}
	cc := &condCompiler{groups: groups, refs: map[string]bool{}, slots: slots}
	root := cc.object(path, v, true)
	c := &Condition{root: root}
	for r := range cc.refs {
		c.refs = append(c.refs, r)
	}
	slices.Sort(c.refs)
	return c, cc.errs
}

// slotTable numbers the top-level attributes a Set reads. Assign resolves
// them once per call (one map lookup each) into a slice that conditions,
// hash attributes and filters index, instead of looking them up per
// experiment.
type slotTable struct {
	ids   map[string]int
	names []string
}

func newSlots() *slotTable { return &slotTable{ids: map[string]int{}} }

// index returns name's slot, adding it if new.
func (t *slotTable) index(name string) int {
	if i, ok := t.ids[name]; ok {
		return i
	}
	t.ids[name] = len(t.names)
	t.names = append(t.names, name)
	return len(t.names) - 1
}

// object is a JSON object with its members in document order.
type object = jsonx.Object

// decodeOrdered decodes JSON keeping object member order (so errors come
// out in document order): objects become object, arrays []any, numbers
// float64.
func decodeOrdered(raw []byte) (any, error) { return jsonx.ParseOrdered(raw) }

// isOperatorObject is the reference's test: a non-empty object whose keys
// all start with "$".
func isOperatorObject(v any) bool {
	obj, ok := v.(object)
	if !ok || len(obj) == 0 {
		return false
	}
	for _, kv := range obj {
		if !strings.HasPrefix(kv.Key, "$") {
			return false
		}
	}
	return true
}

type condCompiler struct {
	groups map[string][]any
	refs   map[string]bool
	slots  *slotTable
	errs   []error
	depth  int // > 0 inside $elemMatch, whose paths are not attributes
}

func (cc *condCompiler) fail(path, msg string) {
	cc.errs = append(cc.errs, &FieldError{path, msg})
}

// objCond is evalCondition: every clause must pass.
type objCond struct {
	clauses []clause
}

type clauseKind uint8

const (
	clausePath clauseKind = iota
	clauseOr
	clauseNor
	clauseAnd
	clauseNot
)

type clause struct {
	kind clauseKind
	path []string  // clausePath
	slot int       // clausePath: index of path[0] in the slot table, or -1
	val  valueCond // clausePath
	subs []*objCond
}

// eval evaluates the condition on obj. slots, when not nil, holds the
// pre-resolved top-level attributes of obj (see slotTable).
func (o *objCond) eval(obj any, slots []any) bool {
	for i := range o.clauses {
		c := &o.clauses[i]
		switch c.kind {
		case clausePath:
			var v any
			if slots != nil && c.slot >= 0 {
				v = slots[c.slot]
				if len(c.path) > 1 {
					v = getPath(v, c.path[1:])
				}
			} else {
				v = getPath(obj, c.path)
			}
			if !c.val.match(v) {
				return false
			}
		case clauseOr, clauseNor:
			any := len(c.subs) == 0
			for _, s := range c.subs {
				if s.eval(obj, slots) {
					any = true
					break
				}
			}
			if any == (c.kind == clauseNor) {
				return false
			}
		case clauseAnd:
			for _, s := range c.subs {
				if !s.eval(obj, slots) {
					return false
				}
			}
		case clauseNot:
			if c.subs[0].eval(obj, slots) {
				return false
			}
		}
	}
	return true
}

// getPath is the reference's getPath: the value at a dotted path, or nil.
func getPath(obj any, path []string) any {
	cur := obj
	for _, p := range path {
		switch m := cur.(type) {
		case map[string]any:
			v, ok := m[p]
			if !ok {
				return nil
			}
			cur = v
		case Attributes:
			v, ok := m[p]
			if !ok {
				return nil
			}
			cur = v
		case []any:
			if p == "length" {
				cur = float64(len(m))
				continue
			}
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(m) || strconv.Itoa(i) != p {
				return nil
			}
			cur = m[i]
		default:
			return nil
		}
	}
	return cur
}

// object compiles evalCondition's argument.
func (cc *condCompiler) object(path string, v any, top bool) *objCond {
	obj, ok := v.(object)
	if !ok {
		cc.fail(path, "must be an object")
		return &objCond{}
	}
	o := &objCond{}
	for _, kv := range obj {
		p := path + "." + kv.Key
		switch kv.Key {
		case "$or", "$nor", "$and":
			kind := map[string]clauseKind{"$or": clauseOr, "$nor": clauseNor, "$and": clauseAnd}[kv.Key]
			arr, ok := kv.Value.([]any)
			if !ok {
				cc.fail(p, "must be an array of conditions")
				// The reference reads .length of a non-array as undefined:
				// $or and $and pass, $nor fails.
				if kind == clauseNor {
					o.clauses = append(o.clauses, clause{kind: clauseNot, subs: []*objCond{{}}})
				}
				continue
			}
			c := clause{kind: kind}
			for i, e := range arr {
				c.subs = append(c.subs, cc.object(p+"["+strconv.Itoa(i)+"]", e, top))
			}
			o.clauses = append(o.clauses, c)
		case "$not":
			o.clauses = append(o.clauses, clause{kind: clauseNot, subs: []*objCond{cc.object(p, kv.Value, top)}})
		default:
			if strings.HasPrefix(kv.Key, "$") && valueOperators[kv.Key] {
				cc.fail(p, "operator "+kv.Key+" needs an attribute path before it")
			}
			if kv.Key == "" {
				cc.fail(p, "empty attribute path")
			}
			parts := strings.Split(kv.Key, ".")
			slot := -1
			if top && cc.depth == 0 {
				cc.refs[parts[0]] = true
				slot = cc.slots.index(parts[0])
			}
			o.clauses = append(o.clauses, clause{kind: clausePath, path: parts, slot: slot, val: cc.value(p, kv.Value, false)})
		}
	}
	return o
}

// valueOperators are the operators evalOperatorCondition knows.
var valueOperators = map[string]bool{
	"$eq": true, "$ne": true, "$lt": true, "$lte": true, "$gt": true, "$gte": true,
	"$exists": true, "$in": true, "$nin": true, "$ini": true, "$nini": true,
	"$inGroup": true, "$notInGroup": true, "$not": true, "$size": true,
	"$elemMatch": true, "$all": true, "$alli": true, "$regex": true, "$regexi": true,
	"$type": true, "$veq": true, "$vne": true, "$vgt": true, "$vgte": true,
	"$vlt": true, "$vlte": true,
}

// valueCond is evalConditionValue for one compiled condition value.
type valueCond interface {
	match(v any) bool
}

// value compiles evalConditionValue's condition argument.
func (cc *condCompiler) value(path string, v any, insensitive bool) valueCond {
	switch x := v.(type) {
	case string:
		if insensitive {
			return strFoldCond(lowerString(x))
		}
		return strCond(x)
	case float64:
		return numCond(x)
	case bool:
		return boolCond(x)
	case nil:
		return nullCond{}
	case []any:
		return jsonCond{jsonx.Plain(x)}
	case object:
		if !isOperatorObject(x) {
			for _, kv := range x {
				if strings.HasPrefix(kv.Key, "$") {
					cc.fail(path+"."+kv.Key, "operators cannot be mixed with plain fields in one object")
					break
				}
			}
			return jsonCond{jsonx.Plain(x)}
		}
		ops := make(allCond, 0, len(x))
		for _, kv := range x {
			ops = append(ops, cc.operator(path+"."+kv.Key, kv.Key, kv.Value))
		}
		if len(ops) == 1 {
			return ops[0]
		}
		return ops
	}
	return falseCond{}
}

func isPrimitive(v any) bool {
	switch v.(type) {
	case nil, string, float64, bool:
		return true
	}
	return false
}

// operator compiles evalOperatorCondition for one operator and its operand.
func (cc *condCompiler) operator(path, op string, arg any) valueCond {
	switch op {
	case "$eq", "$ne":
		if !isPrimitive(arg) {
			cc.fail(path, "must be a string, number, boolean or null")
		}
		return eqCond{want: jsonx.Plain(arg), ne: op == "$ne"}
	case "$lt", "$lte", "$gt", "$gte":
		switch arg.(type) {
		case string, float64:
		default:
			cc.fail(path, "must be a string or a number")
		}
		kind := map[string]byte{"$lt": opLT, "$lte": opLTE, "$gt": opGT, "$gte": opGTE}[op]
		return cmpCond{op: kind, want: jsonx.Plain(arg)}
	case "$exists":
		if _, ok := arg.(bool); !ok {
			cc.fail(path, "must be true or false")
		}
		return existsCond(truthy(arg))
	case "$in", "$nin", "$ini", "$nini":
		arr, ok := arg.([]any)
		if !ok {
			cc.fail(path, "must be an array")
			return falseCond{} // the reference fails both $in and $nin
		}
		cc.checkList(path, arr)
		fold := op == "$ini" || op == "$nini"
		return newInCond(arr, fold, op == "$nin" || op == "$nini")
	case "$inGroup", "$notInGroup":
		name, ok := arg.(string)
		if !ok {
			cc.fail(path, "must be a saved group name")
		}
		arr, found := cc.groups[name]
		if ok && !found {
			cc.fail(path, "unknown saved group "+strconv.Quote(name))
		}
		return newInCond(arr, false, op == "$notInGroup")
	case "$not":
		return notCond{cc.value(path, arg, false)}
	case "$size":
		return sizeCond{cc.value(path, arg, false)}
	case "$elemMatch":
		if _, ok := arg.(object); !ok {
			cc.fail(path, "must be an object")
			return falseCond{}
		}
		if isOperatorObject(arg) {
			return elemMatchCond{val: cc.value(path, arg, false)}
		}
		cc.depth++
		o := cc.object(path, arg, false)
		cc.depth--
		return elemMatchCond{obj: o}
	case "$all", "$alli":
		arr, ok := arg.([]any)
		if !ok {
			cc.fail(path, "must be an array")
			return falseCond{}
		}
		c := allElemCond{}
		for i, e := range arr {
			c = append(c, cc.value(path+"["+strconv.Itoa(i)+"]", e, op == "$alli"))
		}
		return c
	case "$regex", "$regexi":
		s, ok := arg.(string)
		if !ok {
			cc.fail(path, "must be a string")
			return falseCond{}
		}
		expr := s
		if op == "$regexi" {
			expr = "(?i)" + s
		}
		re, err := regex.Compile(expr)
		if err != nil {
			cc.fail(path, "invalid regex: "+err.Error())
			return falseCond{}
		}
		return regexCond{re}
	case "$type":
		s, _ := arg.(string)
		switch s {
		case "string", "number", "boolean", "object", "array", "null":
		default:
			cc.fail(path, "must be one of string, number, boolean, object, array, null")
		}
		return typeCond(s)
	case "$veq", "$vne", "$vgt", "$vgte", "$vlt", "$vlte":
		if s, ok := arg.(string); !ok || s == "" {
			cc.fail(path, "must be a version string")
		}
		kind := map[string]byte{"$veq": opEQ, "$vne": opNE, "$vgt": opGT, "$vgte": opGTE, "$vlt": opLT, "$vlte": opLTE}[op]
		return versionCond{op: kind, want: string(appendPaddedVersion(nil, arg))}
	}
	cc.fail(path, "unknown operator "+op)
	return falseCond{}
}

func (cc *condCompiler) checkList(path string, arr []any) {
	for i, e := range arr {
		if !isPrimitive(e) {
			cc.fail(path+"["+strconv.Itoa(i)+"]", "must be a string, number, boolean or null")
		}
	}
}

// Condition values.

type strCond string // value + "" === condition

func (c strCond) match(v any) bool {
	if s, ok := v.(string); ok {
		return s == string(c)
	}
	return jsString(v) == string(c)
}

type strFoldCond string // String(value).toLowerCase() === condition.toLowerCase()

func (c strFoldCond) match(v any) bool { return lowerEquals(jsString(v), string(c)) }

type numCond float64 // value * 1 === condition

func (c numCond) match(v any) bool { return jsNumber(v) == float64(c) }

type boolCond bool // value !== null && !!value === condition

func (c boolCond) match(v any) bool { return v != nil && truthy(v) == bool(c) }

type nullCond struct{} // value === null

func (nullCond) match(v any) bool { return v == nil }

type jsonCond struct{ want any } // JSON.stringify(value) === JSON.stringify(condition)

func (c jsonCond) match(v any) bool { return jsonEqual(v, c.want) }

type falseCond struct{}

func (falseCond) match(any) bool { return false }

type allCond []valueCond // an operator object: every operator must pass

func (c allCond) match(v any) bool {
	for _, op := range c {
		if !op.match(v) {
			return false
		}
	}
	return true
}

type eqCond struct {
	want any
	ne   bool
}

func (c eqCond) match(v any) bool { return strictEqual(v, c.want) != c.ne }

type cmpCond struct {
	op   byte
	want any
}

func (c cmpCond) match(v any) bool {
	// Fast paths for the common same-type cases.
	switch w := c.want.(type) {
	case float64:
		if x, ok := v.(float64); ok {
			return cmpFloat(c.op, x, w)
		}
	case string:
		if x, ok := v.(string); ok {
			return cmpString(c.op, x, w)
		}
	}
	return compare(c.op, v, c.want)
}

func cmpFloat(op byte, x, y float64) bool {
	switch op {
	case opLT:
		return x < y
	case opLTE:
		return x <= y
	case opGT:
		return x > y
	}
	return x >= y
}

// cmpString is JavaScript's x < y (or <=, >, >=) on strings: by UTF-16
// code units.
func cmpString(op byte, x, y string) bool {
	d := compareUTF16(x, y)
	switch op {
	case opLT:
		return d < 0
	case opLTE:
		return d <= 0
	case opGT:
		return d > 0
	}
	return d >= 0
}

type existsCond bool // expected ? actual != null : actual == null

func (c existsCond) match(v any) bool { return (v != nil) == bool(c) }

// inCond is isIn(actual, expected) (negated for $nin): strict equality
// against the listed primitives; an array attribute matches when any of its
// elements does. With fold, strings compare lower-cased as JavaScript's
// toLowerCase does.
type inCond struct {
	strs      []string
	strSet    map[string]struct{} // strs, when the list is long
	nums      []float64
	hasTrue   bool
	hasFalse  bool
	hasNull   bool
	fold, neg bool
}

func newInCond(arr []any, fold, neg bool) *inCond {
	c := &inCond{fold: fold, neg: neg}
	for _, e := range arr {
		switch x := e.(type) {
		case string:
			if fold {
				x = lowerString(x)
			}
			c.strs = append(c.strs, x)
		case float64:
			c.nums = append(c.nums, x)
		case bool:
			if x {
				c.hasTrue = true
			} else {
				c.hasFalse = true
			}
		case nil:
			c.hasNull = true
		}
	}
	if len(c.strs) > 8 {
		c.strSet = make(map[string]struct{}, len(c.strs))
		for _, s := range c.strs {
			c.strSet[s] = struct{}{}
		}
	}
	return c
}

func (c *inCond) has(v any) bool {
	switch x := v.(type) {
	case string:
		if c.fold && !lowerEquals(x, x) {
			// Lower-case into a stack buffer: neither the map index
			// nor the comparisons below copy string(l).
			var buf [64]byte
			l := appendLower(buf[:0], x)
			if c.strSet != nil {
				_, ok := c.strSet[string(l)]
				return ok
			}
			for _, s := range c.strs {
				if s == string(l) {
					return true
				}
			}
			return false
		}
		if c.strSet != nil {
			_, ok := c.strSet[x]
			return ok
		}
		for _, s := range c.strs {
			if s == x {
				return true
			}
		}
	case float64:
		for _, n := range c.nums {
			if n == x || (!c.fold && math.IsNaN(n) && math.IsNaN(x)) {
				return true
			}
		}
	case bool:
		return (x && c.hasTrue) || (!x && c.hasFalse)
	case nil:
		return c.hasNull
	}
	return false
}

func (c *inCond) match(v any) bool {
	found := false
	if arr, ok := v.([]any); ok {
		for _, e := range arr {
			if c.has(e) {
				found = true
				break
			}
		}
	} else {
		found = c.has(v)
	}
	return found != c.neg
}

type notCond struct{ c valueCond }

func (c notCond) match(v any) bool { return !c.c.match(v) }

type sizeCond struct{ c valueCond }

func (c sizeCond) match(v any) bool {
	arr, ok := v.([]any)
	return ok && c.c.match(float64(len(arr)))
}

type elemMatchCond struct {
	val valueCond // operator object: evalConditionValue per element
	obj *objCond  // otherwise evalCondition per element
}

func (c elemMatchCond) match(v any) bool {
	arr, ok := v.([]any)
	if !ok {
		return false
	}
	for _, e := range arr {
		if !truthy(e) {
			continue // the reference skips falsy elements
		}
		if c.val != nil && c.val.match(e) || c.obj != nil && c.obj.eval(e, nil) {
			return true
		}
	}
	return false
}

type allElemCond []valueCond // every condition matches some element

func (c allElemCond) match(v any) bool {
	arr, ok := v.([]any)
	if !ok {
		return false
	}
	for _, want := range c {
		passed := false
		for _, e := range arr {
			if want.match(e) {
				passed = true
				break
			}
		}
		if !passed {
			return false
		}
	}
	return true
}

type regexCond struct{ re *regex.Regexp }

func (c regexCond) match(v any) bool {
	if s, ok := v.(string); ok {
		return c.re.MatchString(s)
	}
	return c.re.MatchString(jsString(v)) // RegExp.test coerces with String()
}

type typeCond string

func (c typeCond) match(v any) bool { return typeName(v) == string(c) }

type versionCond struct {
	op   byte
	want string // padded
}

func (c versionCond) match(v any) bool {
	d := comparePaddedVersion(v, c.want)
	switch c.op {
	case opEQ:
		return d == 0
	case opNE:
		return d != 0
	case opLT:
		return d < 0
	case opLTE:
		return d <= 0
	case opGT:
		return d > 0
	}
	return d >= 0
}

// comparePaddedVersion compares paddedVersionString(v) with want (already
// padded) without building the padded string: part by part, stopping at the
// first difference — usually within the major version.
func comparePaddedVersion(v any, want string) int {
	s, ok := v.(string)
	if !ok || s == "" || s[0] == 'v' || len(s) > 48 {
		return comparePaddedVersionSlow(v, want)
	}
	if i := strings.IndexByte(s, '+'); i >= 0 {
		s = s[:i]
	}
	parts := 1
	for i := 0; i < len(s); i++ {
		if s[i] == '-' || s[i] == '.' {
			parts++
		}
	}
	w := 0 // bytes of want consumed
	var chunk [56]byte
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '-' && s[i] != '.' {
			continue
		}
		b := appendVersionPart(chunk[:0], s[start:i], start > 0)
		if i == len(s) && parts == 3 {
			b = append(b, '-', '~')
		}
		if d := compareChunk(b, want, &w); d == chunkNonASCII {
			return comparePaddedVersionSlow(v, want)
		} else if d != 0 {
			return d
		}
		start = i + 1
	}
	if w < len(want) {
		if want[w]&0xC0 == 0x80 {
			return comparePaddedVersionSlow(v, want) // invalid UTF-8 may decode differently
		}
		return -1
	}
	return 0
}

// comparePaddedVersionSlow builds paddedVersionString(v) and compares it
// with want by UTF-16 code units, as JavaScript's < does.
func comparePaddedVersionSlow(v any, want string) int {
	var buf [64]byte
	return compareUTF16(string(appendPaddedVersion(buf[:0], v)), want)
}

// chunkNonASCII is compareChunk's answer when the first difference involves
// a non-ASCII byte: byte order is not UTF-16 order there, so the caller
// compares the whole strings.
const chunkNonASCII = 2

// compareChunk compares b with want[*w:] over len(b) bytes and advances *w.
func compareChunk(b []byte, want string, w *int) int {
	rest := want[*w:]
	n := min(len(b), len(rest))
	for i := 0; i < n; i++ {
		if b[i] != rest[i] {
			if b[i] >= utf8.RuneSelf || rest[i] >= utf8.RuneSelf {
				return chunkNonASCII
			}
			if b[i] < rest[i] {
				return -1
			}
			return 1
		}
	}
	if len(rest) < len(b) {
		if b[len(rest)]&0xC0 == 0x80 {
			return chunkNonASCII // invalid UTF-8 may decode differently
		}
		return 1 // want is a proper prefix
	}
	*w += len(b)
	return 0
}
