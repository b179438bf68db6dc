package engine

import (
	"bytes"
	"errors"
	"slices"
	"strconv"
	"strings"

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
