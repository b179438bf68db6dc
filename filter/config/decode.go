package config

import (
	"bytes"
	"encoding/base64"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/allotmesh/allot/filter/engine"
	"github.com/allotmesh/allot/filter/internal/jsonx"
)

// The decoder follows protojson (google.golang.org/protobuf/encoding/protojson,
// Unmarshal with default options) field by field, as FuzzDecodeMatchesProtojson
// checks:
//
//   - a field is named by its proto3 JSON name or its proto field name,
//     exactly; any other name is an unknown field, and a field given twice
//     (under either name) is an error;
//   - null leaves a field unset, except a field of google.protobuf.Values
//     (variations: protojson reads null as a Value, which a repeated field
//     cannot take);
//   - int32 and int64 fields take integral numbers (1, 1.0, 1e2) or strings
//     holding one, in range; double fields numbers, numeric strings, "NaN",
//     "Infinity" and "-Infinity"; bool fields true and false; the enum its
//     value names or an int32 number (unknown numbers are kept for Check);
//   - repeated fields take an array without nulls (except of Values), a map
//     an object; Struct an object, ListValue an array, Value any JSON, none
//     with duplicate keys or numbers beyond a double, nested at most
//     recursionLimit messages deep.
//
// Deliberately unlike protojson, it reads JSON text by RFC 8259 (protojson's
// tokenizer takes an exponent without digits before a delimiter, {"cacheSize":1e},
// as 1), and it rejects an experiment field the control
// plane keeps for itself (experimentFields' reject) when it carries a value,
// and ranges that are not arrays of numbers (the engine's type).

// recursionLimit is protojson's bound on nested messages
// (protowire.DefaultRecursionLimit): the FilterConfig is at depth 1, an
// experiment at 2, its condition at 3 and every google.protobuf.Value one
// deeper than the Struct or ListValue holding it.
const recursionLimit = 10000

// maxNesting bounds the parsers' nesting (JSON containers, Struct encoding
// levels) just above anything recursionLimit admits, so that the mapping,
// not a parser, reports a configuration nested too deep, with its field.
const maxNesting = recursionLimit + 2

// wrapped is an error with context, as fmt.Errorf("%s: %w", msg, err) makes
// it (the filter does not link fmt).
type wrapped struct {
	msg string
	err error
}

func (e *wrapped) Error() string { return e.msg + ": " + e.err.Error() }
func (e *wrapped) Unwrap() error { return e.err }

// decode decodes FilterConfig from either form Decode accepts:
// the Struct's protobuf encoding, or JSON text. Empty input is the empty
// configuration.
func decode(data []byte) (Filter, error) {
	var obj jsonx.Object
	if o, err := decodeStructLazy(data); err == nil {
		obj = o
	} else if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return Filter{}, &wrapped{"decode filter configuration: neither a google.protobuf.Struct nor JSON", err}
	} else {
		v, err := jsonx.ParseStrict(data, maxNesting)
		if err != nil {
			return Filter{}, &wrapped{"decode filter configuration", err}
		}
		obj = v.(jsonx.Object) // the text starts with '{'
	}
	return mapFilter(obj)
}

// mapFilter maps a parsed FilterConfig onto Filter.
func mapFilter(obj jsonx.Object) (Filter, error) {
	var d decoder
	var f Filter
	d.message(obj, filterFields, &f)
	return f, errors.Join(d.errs...)
}

// kind is the type of a field's value, as the descriptor test compares it
// with the proto's.
type kind uint8

const (
	kindString kind = iota
	kindBool
	kindInt32
	kindInt64
	kindDouble
	kindEnum
	kindMessage   // Experiment, Attribute, StickyCookie or SigningKey
	kindValue     // google.protobuf.Value
	kindStruct    // google.protobuf.Struct
	kindList      // google.protobuf.ListValue
	kindTimestamp // google.protobuf.Timestamp
	kindBytes     // bytes: base64 text
)

// field is one field of a message: its two names, its type and, when the
// filter configuration must leave it at its default value, why. The
// message's setter (filterField, attributeField, experimentField) decodes
// the others, by JSON name.
type field struct {
	json, proto string
	kind        kind
	repeated    bool // a repeated field; with kindList in savedGroups, a map's values
	oneof       bool // in Attribute's oneof source
	reject      string
}

// Why an Experiment field is not part of the filter configuration.
const (
	controlPlaneOnly = "the control plane's field; proxies receive running experiments without it"
	outputOnly       = "output-only metadata the control plane keeps; proxies receive experiments without it"
)

// filterFields are FilterConfig's fields.
var filterFields = []field{
	{json: "version", proto: "version"},
	{json: "unitHeader", proto: "unit_header"},
	{json: "headerPrefix", proto: "header_prefix"},
	{json: "experiments", proto: "experiments", kind: kindMessage, repeated: true},
	{json: "savedGroups", proto: "saved_groups", kind: kindList, repeated: true},
	{json: "attributes", proto: "attributes", kind: kindMessage, repeated: true},
	{json: "dictionaryHeader", proto: "dictionary_header"},
	{json: "versionHeader", proto: "version_header"},
	{json: "cacheSize", proto: "cache_size", kind: kindInt32},
	{json: "disableExposureState", proto: "disable_exposure_state", kind: kindBool},
	{json: "assignmentHeaders", proto: "assignment_headers", kind: kindEnum},
	{json: "cacheMaxBytes", proto: "cache_max_bytes", kind: kindInt32},
	{json: "stickyCookie", proto: "sticky_cookie", kind: kindMessage},
}

// stickyCookieFields are StickyCookie's fields.
var stickyCookieFields = []field{
	{json: "name", proto: "name"},
	{json: "keys", proto: "keys", kind: kindMessage, repeated: true},
	{json: "path", proto: "path"},
	{json: "domain", proto: "domain"},
	{json: "maxAgeSeconds", proto: "max_age_seconds", kind: kindInt32},
	{json: "sameSite", proto: "same_site"},
	{json: "insecure", proto: "insecure", kind: kindBool},
	{json: "scriptReadable", proto: "script_readable", kind: kindBool},
}

// signingKeyFields are SigningKey's fields.
var signingKeyFields = []field{
	{json: "id", proto: "id"},
	{json: "secret", proto: "secret", kind: kindBytes},
}

// attributeFields are Attribute's fields.
var attributeFields = []field{
	{json: "name", proto: "name"},
	{json: "header", proto: "header", oneof: true},
	{json: "cookie", proto: "cookie", oneof: true},
	{json: "query", proto: "query", oneof: true},
	{json: "property", proto: "property", oneof: true},
}

// experimentFields are Experiment's fields: those the engine evaluates, then
// those the control plane keeps for itself and strips before any proxy sees
// them (experiment.Definition in the control plane).
var experimentFields = []field{
	{json: "key", proto: "key"},
	{json: "variations", proto: "variations", kind: kindValue, repeated: true},
	{json: "weights", proto: "weights", kind: kindDouble, repeated: true},
	{json: "coverage", proto: "coverage", kind: kindDouble},
	{json: "hashAttribute", proto: "hash_attribute"},
	{json: "fallbackAttribute", proto: "fallback_attribute"},
	{json: "hashVersion", proto: "hash_version", kind: kindInt32},
	{json: "seed", proto: "seed"},
	{json: "namespace", proto: "namespace", kind: kindList},
	{json: "condition", proto: "condition", kind: kindStruct},
	{json: "force", proto: "force", kind: kindInt32},
	{json: "filters", proto: "filters", kind: kindList},
	{json: "ranges", proto: "ranges", kind: kindList},
	{json: "bucketVersion", proto: "bucket_version", kind: kindInt32},
	{json: "minBucketVersion", proto: "min_bucket_version", kind: kindInt32},
	{json: "disableStickyBucketing", proto: "disable_sticky_bucketing", kind: kindBool},
	{json: "observe", proto: "observe", kind: kindBool},
	{json: "assignmentRevision", proto: "assignment_revision", kind: kindInt64},

	{json: "status", proto: "status", reject: controlPlaneOnly},
	{json: "description", proto: "description", reject: controlPlaneOnly},
	{json: "owner", proto: "owner", reject: controlPlaneOnly},
	{json: "services", proto: "services", repeated: true, reject: controlPlaneOnly},
	{json: "startTime", proto: "start_time", kind: kindTimestamp, reject: controlPlaneOnly},
	{json: "endTime", proto: "end_time", kind: kindTimestamp, reject: controlPlaneOnly},
	{json: "guardrails", proto: "guardrails", kind: kindMessage, repeated: true, reject: controlPlaneOnly},
	{json: "ramp", proto: "ramp", kind: kindMessage, reject: controlPlaneOnly},
	{json: "revision", proto: "revision", kind: kindInt64, reject: outputOnly},
	{json: "createTime", proto: "create_time", kind: kindTimestamp, reject: outputOnly},
	{json: "updateTime", proto: "update_time", kind: kindTimestamp, reject: outputOnly},
	{json: "createdBy", proto: "created_by", reject: outputOnly},
	{json: "updatedBy", proto: "updated_by", reject: outputOnly},
	{json: "rampState", proto: "ramp_state", kind: kindMessage, reject: outputOnly},
	{json: "rollback", proto: "rollback", kind: kindMessage, reject: outputOnly},
}

// set decodes v into the field of message m (a *Filter, *Attribute or
// *engine.Experiment) whose JSON name is name, and reports whether the
// message's setter knows the field. One setter per message, rather than a
// function per field or a generic decoder per message type, keeps the Wasm
// module small.
func (d *decoder) set(m any, name string, v any) bool {
	switch m := m.(type) {
	case *Filter:
		return d.filterField(m, name, v)
	case *Attribute:
		return d.attributeField(m, name, v)
	case *engine.Experiment:
		return d.experimentField(m, name, v)
	case *StickyCookie:
		return d.stickyCookieField(m, name, v)
	case *SigningKey:
		return d.signingKeyField(m, name, v)
	}
	return false
}

func (d *decoder) stickyCookieField(c *StickyCookie, name string, v any) bool {
	switch name {
	case "name":
		c.Name = d.str(v)
	case "keys":
		if n := arrayLen(v); n > 0 {
			c.Keys = make([]SigningKey, n)
		}
		d.list(v, func(i int, x any) { d.message(x, signingKeyFields, &c.Keys[i]) })
	case "path":
		c.Path = d.str(v)
	case "domain":
		c.Domain = d.str(v)
	case "maxAgeSeconds":
		c.MaxAgeSeconds = int(d.integer(v, 32))
	case "sameSite":
		c.SameSite = d.str(v)
	case "insecure":
		c.Insecure = d.boolean(v)
	case "scriptReadable":
		c.ScriptReadable = d.boolean(v)
	default:
		return false
	}
	return true
}

func (d *decoder) signingKeyField(k *SigningKey, name string, v any) bool {
	switch name {
	case "id":
		k.ID = d.str(v)
	case "secret":
		k.Secret = d.bytes(v)
	default:
		return false
	}
	return true
}

// bytes decodes a bytes field: base64 text, standard or URL-safe, padded
// or not, as protojson reads it.
func (d *decoder) bytes(v any) []byte {
	s := d.str(v)
	enc := base64.StdEncoding
	if strings.ContainsAny(s, "-_") {
		enc = base64.URLEncoding
	}
	if len(s)%4 != 0 {
		enc = enc.WithPadding(base64.NoPadding)
	}
	b, err := enc.DecodeString(s)
	if err != nil {
		d.fail("not base64")
	}
	return b
}

func (d *decoder) filterField(f *Filter, name string, v any) bool {
	switch name {
	case "version":
		f.Version = d.str(v)
	case "unitHeader":
		f.UnitHeader = d.str(v)
	case "headerPrefix":
		f.HeaderPrefix = d.str(v)
	case "experiments":
		if n := arrayLen(v); n > 0 {
			f.Experiments = make([]engine.Experiment, n)
		}
		d.list(v, func(i int, x any) { d.message(x, experimentFields, &f.Experiments[i]) })
	case "savedGroups":
		f.SavedGroups = d.savedGroups(v)
	case "attributes":
		if n := arrayLen(v); n > 0 {
			f.Attributes = make([]Attribute, n)
		}
		d.list(v, func(i int, x any) { d.message(x, attributeFields, &f.Attributes[i]) })
	case "dictionaryHeader":
		f.DictionaryHeader = d.str(v)
	case "versionHeader":
		f.VersionHeader = d.str(v)
	case "cacheSize":
		f.CacheSize = int(d.integer(v, 32))
	case "disableExposureState":
		f.DisableExposureState = d.boolean(v)
	case "assignmentHeaders":
		f.AssignmentHeaders = d.enum(v)
	case "cacheMaxBytes":
		f.CacheMaxBytes = int(d.integer(v, 32))
	case "stickyCookie":
		f.StickyCookie = &StickyCookie{}
		d.message(v, stickyCookieFields, f.StickyCookie)
	default:
		return false
	}
	return true
}

func (d *decoder) attributeField(a *Attribute, name string, v any) bool {
	switch name {
	case "name":
		a.Name = d.str(v)
	case "header":
		a.Header = d.str(v)
	case "cookie":
		a.Cookie = d.str(v)
	case "query":
		a.Query = d.str(v)
	case "property":
		a.Property = d.str(v)
	default:
		return false
	}
	return true
}

func (d *decoder) experimentField(e *engine.Experiment, name string, v any) bool {
	switch name {
	case "key":
		e.Key = d.str(v)
	case "variations":
		if n := arrayLen(v); n > 0 {
			e.Variations = make([]engine.RawMessage, 0, n)
		}
		d.list(v, func(_ int, x any) { e.Variations = append(e.Variations, d.value(x, 3)) })
	case "weights":
		if n := arrayLen(v); n > 0 {
			e.Weights = make([]float64, 0, n)
		}
		d.list(v, func(_ int, x any) { e.Weights = append(e.Weights, d.double(x)) })
	case "coverage":
		c := d.double(v)
		e.Coverage = &c
	case "hashAttribute":
		e.HashAttribute = d.str(v)
	case "fallbackAttribute":
		e.FallbackAttribute = d.str(v)
	case "hashVersion":
		e.HashVersion = int(d.integer(v, 32))
	case "seed":
		e.Seed = d.str(v)
	case "namespace":
		e.Namespace = d.listValue(v, 3)
	case "condition":
		e.Condition = d.structValue(v, 3)
	case "force":
		f := int(d.integer(v, 32))
		e.Force = &f
	case "filters":
		e.Filters = d.listValue(v, 3)
	case "ranges":
		e.Ranges = d.ranges(v)
	case "bucketVersion":
		e.BucketVersion = int(d.integer(v, 32))
	case "minBucketVersion":
		e.MinBucketVersion = int(d.integer(v, 32))
	case "disableStickyBucketing":
		e.DisableStickyBucketing = d.boolean(v)
	case "observe":
		e.Observe = d.boolean(v)
	case "assignmentRevision":
		if e.AssignmentRevision = d.integer(v, 64); e.AssignmentRevision < 0 {
			d.fail("at least 0")
		}
	default:
		return false
	}
	return true
}

// assignmentHeadersNames are the AssignmentHeaders values by number.
var assignmentHeadersNames = []string{AssignmentHeadersUnspecified, AssignmentHeadersAll, AssignmentHeadersDictionary}

// decoder collects every problem as an *engine.FieldError, with the path
// of the value being decoded, which it keeps as a stack of steps and
// renders only for an error.
type decoder struct {
	errs []error
	path []step
	buf  []byte // value's scratch: each value is then copied out at its size
}

// step is one step of a field path: an object member's name, or, at >= 0,
// an array index.
type step struct {
	name string
	at   int
}

// push enters an object member (at -1) or an array element (name ""),
// pop leaves it. Not inlined: inlined at its eight calls, the append costs
// the Wasm module 3 KB.
//
//go:noinline
func (d *decoder) push(name string, at int) { d.path = append(d.path, step{name, at}) }
func (d *decoder) pop()                     { d.path = d.path[:len(d.path)-1] }

func (d *decoder) fail(msg string) {
	d.errs = append(d.errs, &engine.FieldError{Path: d.pathString(), Message: msg})
}

// pathString renders the path, as experiments[2].condition."a b": members
// by name, quoted unless a plain identifier, indexes in brackets.
func (d *decoder) pathString() string {
	var b []byte
	for i, s := range d.path {
		if s.at >= 0 {
			b = append(strconv.AppendInt(append(b, '['), int64(s.at), 10), ']')
			continue
		}
		if i > 0 {
			b = append(b, '.')
		}
		b = appendName(b, s.name)
	}
	return string(b)
}

// appendName appends a member name, quoted unless it is a plain identifier.
func appendName(b []byte, name string) []byte {
	plain := name != ""
	for i := 0; i < len(name); i++ {
		if c := name[i]; !(c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			plain = false
		}
	}
	if !plain {
		return strconv.AppendQuote(b, name)
	}
	return append(b, name...)
}

// message decodes the members of an object into m (see set) by fields.
func (d *decoder) message(v any, fields []field, m any) {
	obj, ok := v.(jsonx.Object)
	if !ok {
		d.fail("want an object")
		return
	}
	var seen uint64 // by field index
	oneof := ""     // the oneof member set
	for _, mem := range obj {
		i := 0
		for i < len(fields) && mem.Key != fields[i].json && mem.Key != fields[i].proto {
			i++
		}
		if i == len(fields) {
			msg := "unknown field"
			for _, f := range fields {
				if strings.EqualFold(mem.Key, f.json) || strings.EqualFold(mem.Key, f.proto) {
					msg += " (names are case-sensitive: " + strconv.Quote(f.json) + ")"
					break
				}
			}
			d.push(mem.Key, -1)
			d.fail(msg)
			d.pop()
			continue
		}
		f := &fields[i]
		dup := seen&(1<<i) != 0
		seen |= 1 << i
		d.push(f.json, -1)
		switch {
		case dup:
			d.fail("given twice")
		case mem.Value == nil && f.kind != kindValue:
			// null: unset, except for a google.protobuf.Value (variations, where it is an error)
		case f.oneof && oneof != "":
			d.fail("only one of header, cookie, query or property may be set, and " + oneof + " is")
		default:
			if f.oneof {
				oneof = f.json
			}
			if f.reject != "" {
				d.rejectSet(f, mem.Value)
			} else {
				d.set(m, f.json, mem.Value) // known: TestDecoderCoversDescriptors
			}
		}
		d.pop()
	}
}

// arrayLen is the length of an array, as list reads it; 0 for anything
// else.
func arrayLen(v any) int {
	switch x := v.(type) {
	case []any:
		return len(x)
	case lazyList:
		return len(x.items)
	}
	return 0
}

// list calls each with every element of an array, its index on the path:
// a []any, or a lazyList whose items are decoded one at a time.
func (d *decoder) list(v any, each func(i int, x any)) {
	switch x := v.(type) {
	case []any:
		for i, e := range x {
			d.push("", i)
			each(i, e)
			d.pop()
		}
	case lazyList:
		for i := range x.items {
			d.push("", i)
			if e, err := x.item(i); err != nil { // validated already: not expected
				d.errs = append(d.errs, &wrapped{d.pathString(), err})
			} else {
				each(i, e)
			}
			d.pop()
		}
	default:
		d.fail("want an array")
	}
}

// rejectSet checks a field the filter configuration must leave at its
// default value: it must have its type, and any other value is an error
// naming the field. A timestamp or a message is rejected without parsing
// it.
func (d *decoder) rejectSet(f *field, v any) {
	n := len(d.errs)
	set := true
	switch {
	case f.repeated: // of strings or messages: any element is a value
		set = false
		d.list(v, func(_ int, x any) {
			if f.kind == kindString {
				d.str(x)
			}
			set = true
		})
	case f.kind == kindString:
		set = d.str(v) != ""
	case f.kind == kindInt64:
		set = d.integer(v, 64) != 0
	}
	if set && len(d.errs) == n {
		d.fail("not part of the filter configuration (" + f.reject + ")")
	}
}

func (d *decoder) str(v any) string {
	s, ok := v.(string)
	if !ok {
		d.fail("want a string")
	}
	return s
}

func (d *decoder) boolean(v any) bool {
	b, ok := v.(bool)
	if !ok {
		d.fail("want true or false")
	}
	return b
}

// integer decodes an int32 or int64 field (bits 32 or 64): a number, or a
// string holding exactly one JSON number, with an integral value in range.
// Numbers from a Struct are doubles; JSON numbers are read exactly, as
// protojson reads them.
func (d *decoder) integer(v any, bits int) int64 {
	var n int64
	var err error
	switch x := v.(type) {
	case float64:
		lim := math.Ldexp(1, bits-1)
		switch {
		case x != math.Trunc(x):
			err = strconv.ErrSyntax
		case x < -lim || x >= lim:
			err = strconv.ErrRange
		default:
			n = int64(x)
		}
	case jsonx.Number:
		n, err = intLiteral(string(x), bits)
	case string:
		err = strconv.ErrSyntax
		if jsonx.ValidNumber(x) {
			n, err = intLiteral(x, bits)
		}
	default:
		err = strconv.ErrSyntax
	}
	switch err {
	case nil:
		return n
	case strconv.ErrRange:
		d.fail("out of the int" + strconv.Itoa(bits) + " range")
	default:
		d.fail("want an integer")
	}
	return 0
}

// intLiteral reads a valid JSON number literal as an integer of bits bits
// the way protojson does (internal/encoding/json's normalizeToIntString):
// in decimal, exactly, so 1e2 and 1.50e1 are integers and
// 1.0000000000000000001 is not. The error is strconv.ErrSyntax for a value
// that is not integral, strconv.ErrRange for one out of range.
func intLiteral(lit string, bits int) (int64, error) {
	s, neg := strings.CutPrefix(lit, "-")
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intp, s := strings.TrimPrefix(s[:i], "0"), s[i:] // a leading 0 is the whole part
	frac := ""
	if strings.HasPrefix(s, ".") {
		i = 1
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		frac, s = strings.TrimRight(s[1:i], "0"), s[i:]
	}
	if intp == "" && frac == "" {
		return 0, nil
	}
	exp := 0
	if s != "" { // e or E, then the exponent
		e, err := strconv.ParseInt(s[1:], 10, 32)
		if err != nil {
			if s[1] == '-' {
				return 0, strconv.ErrSyntax
			}
			return 0, strconv.ErrRange
		}
		exp = int(e)
	}
	var digits string
	if exp >= 0 {
		if len(frac) > exp {
			return 0, strconv.ErrSyntax
		}
		if len(intp)+exp > 20 { // beyond any uint64
			return 0, strconv.ErrRange
		}
		digits = intp + frac + strings.Repeat("0", exp-len(frac))
	} else {
		at := len(intp) + exp
		if frac != "" || at < 0 || strings.TrimRight(intp[at:], "0") != "" {
			return 0, strconv.ErrSyntax
		}
		digits = intp[:at]
	}
	if neg {
		digits = "-" + digits
	}
	n, err := strconv.ParseInt(digits, 10, bits)
	if err != nil {
		return 0, strconv.ErrRange
	}
	return n, nil
}

// double decodes a double field: a number, a string holding exactly one
// JSON number, "NaN", "Infinity" or "-Infinity".
func (d *decoder) double(v any) float64 {
	lit := ""
	switch x := v.(type) {
	case float64:
		return x
	case jsonx.Number:
		lit = string(x)
	case string:
		switch x {
		case "NaN":
			return math.NaN()
		case "Infinity":
			return math.Inf(1)
		case "-Infinity":
			return math.Inf(-1)
		}
		if jsonx.ValidNumber(x) {
			lit = x
		}
	}
	if lit == "" {
		d.fail("want a number")
		return 0
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		d.fail(lit + " is out of a double's range")
	}
	return f
}

// enum decodes assignmentHeaders: a value name, or an int32 number. Known
// numbers become names, unknown ones their decimal form (proto3 enums are
// open), which Check rejects. The zero value is "", as when unset.
func (d *decoder) enum(v any) string {
	if s, ok := v.(string); ok {
		switch i := slices.Index(assignmentHeadersNames, s); {
		case i == 0:
			return ""
		case i > 0:
			return s
		}
		d.fail(strconv.Quote(s) + " is not " + AssignmentHeadersAll + ", " + AssignmentHeadersDictionary + " or " + AssignmentHeadersUnspecified)
		return ""
	}
	switch v.(type) {
	case float64, jsonx.Number:
	default:
		d.fail("want an enum value name or number")
		return ""
	}
	n := d.integer(v, 32)
	switch {
	case n == 0:
		return ""
	case n > 0 && n < int64(len(assignmentHeadersNames)):
		return assignmentHeadersNames[n]
	}
	return strconv.FormatInt(n, 10)
}

// savedGroups decodes the map<string, ListValue> of saved groups.
func (d *decoder) savedGroups(v any) map[string]engine.RawMessage {
	obj, ok := v.(jsonx.Object)
	if !ok {
		d.fail("want an object")
		return nil
	}
	var out map[string]engine.RawMessage
	for _, m := range obj {
		d.push(m.Key, -1)
		if _, dup := out[m.Key]; dup {
			d.fail("given twice")
		} else {
			if out == nil {
				out = make(map[string]engine.RawMessage, len(obj))
			}
			out[m.Key] = d.listValue(m.Value, 2)
		}
		d.pop()
	}
	return out
}

// ranges decodes the ListValue of ranges into the engine's type: arrays of
// numbers.
func (d *decoder) ranges(v any) [][]float64 {
	out := [][]float64{}
	d.list(v, func(_ int, x any) {
		var r []float64
		if _, ok := x.([]any); !ok {
			d.fail("want an array of numbers")
		} else {
			d.list(x, func(_ int, n any) {
				switch n.(type) {
				case float64, jsonx.Number:
					r = append(r, d.double(n))
				default:
					d.fail("want a number")
				}
			})
		}
		out = append(out, r)
	})
	return out
}

// structValue is a google.protobuf.Struct at message depth depth, as JSON.
func (d *decoder) structValue(v any, depth int) engine.RawMessage {
	if _, ok := v.(jsonx.Object); !ok {
		d.fail("want an object")
		return nil
	}
	return d.value(v, depth)
}

// listValue is a google.protobuf.ListValue at message depth depth, as JSON.
func (d *decoder) listValue(v any, depth int) engine.RawMessage {
	if _, ok := v.([]any); !ok {
		d.fail("want an array")
		return nil
	}
	return d.value(v, depth)
}

// value is a google.protobuf.Value (or the Struct or ListValue it holds)
// at message depth depth, as JSON; nil when invalid.
func (d *decoder) value(v any, depth int) engine.RawMessage {
	n := len(d.errs)
	d.buf = d.appendValue(d.buf[:0], v, depth)
	if len(d.errs) > n {
		return nil
	}
	return bytes.Clone(d.buf)
}

func (d *decoder) appendValue(b []byte, v any, depth int) []byte {
	if depth > recursionLimit {
		d.fail("nested deeper than " + strconv.Itoa(recursionLimit) + " messages")
		return b
	}
	switch x := v.(type) {
	case jsonx.Number:
		f, err := strconv.ParseFloat(string(x), 64)
		if err != nil {
			d.fail(string(x) + " is out of a double's range")
			return b
		}
		v = f
	case jsonx.Object:
		var seen map[string]bool // for large objects; small ones are searched
		if len(x) > 16 {
			seen = make(map[string]bool, len(x))
		}
		b = append(b, '{')
		for i, m := range x {
			d.push(m.Key, -1)
			if dup := seen[m.Key] || seen == nil && slices.ContainsFunc(x[:i], func(o jsonx.Member) bool { return o.Key == m.Key }); dup {
				d.fail("given twice")
			} else if seen != nil {
				seen[m.Key] = true
			}
			if i > 0 {
				b = append(b, ',')
			}
			b = append(jsonx.AppendString(b, m.Key), ':')
			b = d.appendValue(b, m.Value, depth+1)
			d.pop()
		}
		return append(b, '}')
	case []any:
		b = append(b, '[')
		for i, e := range x {
			if i > 0 {
				b = append(b, ',')
			}
			d.push("", i)
			b = d.appendValue(b, e, depth+1)
			d.pop()
		}
		return append(b, ']')
	}
	b, err := jsonx.Append(b, v)
	if err != nil { // parsed values always encode
		d.errs = append(d.errs, &wrapped{d.pathString(), err})
	}
	return b
}
