// Package floor is the write script of the benchmark's floor variants: the
// header and property writes Allot makes for one typical unit, replayed by
// the minimal Go filter (bench/minwasm) with the same host calls, so that
// what Envoy charges for those writes is measured apart from Allot's own
// work. The script travels as the filter's plugin configuration (a
// google.protobuf.StringValue), in a text form the filter parses without
// encoding/json.
package floor

import (
	"errors"
	"strings"
)

// Magic starts a script, so that no other configuration is mistaken for one.
const Magic = "minwasm-script\n"

// Var stands for the unit's variation in a value (its first occurrence).
const Var = "$v"

// Script is a list of writes. Text form, one line each after Magic:
//
//	rewrite | add                    how headers are written: one
//	                                 proxy_set_header_map_pairs with the
//	                                 request's headers and the listed ones,
//	                                 or one proxy_add_header_map_value each
//	header <TAB> name <TAB> value    a header to write
//	property <TAB> path <TAB> value  a proxy_set_property
type Script struct {
	Rewrite bool
	Headers []Write
	Props   []Write
}

// Write is one header or property.
type Write struct{ Name, Value string }

// Parse reads a script's text form.
func Parse(text string) (*Script, error) {
	body, ok := strings.CutPrefix(text, Magic)
	if !ok {
		return nil, errors.New("floor script: missing magic line")
	}
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	sc := &Script{}
	switch lines[0] {
	case "rewrite":
		sc.Rewrite = true
	case "add":
	default:
		return nil, errors.New("floor script: mode " + lines[0] + ": want rewrite or add")
	}
	for _, line := range lines[1:] {
		f := strings.Split(line, "\t")
		if len(f) != 3 || f[1] == "" {
			return nil, errors.New("floor script: line " + line + ": want kind, name and value separated by tabs")
		}
		w := Write{Name: f[1], Value: f[2]}
		switch f[0] {
		case "header":
			sc.Headers = append(sc.Headers, w)
		case "property":
			sc.Props = append(sc.Props, w)
		default:
			return nil, errors.New("floor script: kind " + f[0] + ": want header or property")
		}
	}
	return sc, nil
}

// String is the script's text form.
func (sc *Script) String() string {
	var b strings.Builder
	b.WriteString(Magic)
	if sc.Rewrite {
		b.WriteString("rewrite\n")
	} else {
		b.WriteString("add\n")
	}
	for _, w := range sc.Headers {
		b.WriteString("header\t" + w.Name + "\t" + w.Value + "\n")
	}
	for _, w := range sc.Props {
		b.WriteString("property\t" + w.Name + "\t" + w.Value + "\n")
	}
	return b.String()
}

// Apply is what replaying sc does to a request with headers in for a unit
// of variation v: the request's headers afterwards and the properties set.
// (Both write modes give the same headers; they differ in host calls.) The
// floor filter's tests and the benchmark's derivation of a script from
// Allot's writes are checked against it.
func Apply(sc *Script, in [][2]string, v string) (out [][2]string, props map[string]string) {
	out = append([][2]string(nil), in...)
	for _, w := range sc.Headers {
		out = append(out, [2]string{w.Name, strings.Replace(w.Value, Var, v, 1)})
	}
	props = map[string]string{}
	for _, w := range sc.Props {
		props[w.Name] = strings.Replace(w.Value, Var, v, 1)
	}
	return out, props
}

// Replay is a Script compiled for replaying per request: each value is
// split around its Var once, at configuration time.
type Replay struct {
	Rewrite        bool
	Headers, Props []Value
}

// Value is one write of a Replay.
type Value struct {
	Name          string
	before, after string
	subst         bool
}

// Compile prepares sc for replaying.
func (sc *Script) Compile() *Replay {
	conv := func(ws []Write) []Value {
		var c []Value
		for _, w := range ws {
			x := Value{Name: w.Name, before: w.Value}
			if b, a, ok := strings.Cut(w.Value, Var); ok {
				x.before, x.after, x.subst = b, a, true
			}
			c = append(c, x)
		}
		return c
	}
	return &Replay{Rewrite: sc.Rewrite, Headers: conv(sc.Headers), Props: conv(sc.Props)}
}

// Append appends w's value for variation v to buf.
func (w *Value) Append(buf []byte, v string) []byte {
	if !w.subst {
		return append(buf, w.before...)
	}
	return append(append(append(buf, w.before...), v...), w.after...)
}
