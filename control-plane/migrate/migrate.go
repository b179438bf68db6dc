// Package migrate copies a store — every experiment and its whole audit
// history, revisions, timestamps and actors unchanged — into an empty store
// that can import a history, and proves the copy equal by reading both
// back through the store.Store interface.
//
// It imports only store; allotd migrate (control-plane/server) wires a
// read-only bbolt file to an etcd prefix.
package migrate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/allotmesh/allot/control-plane/store"
)

// MaxMismatches bounds the mismatches a failed Verify lists one by one;
// the rest are counted.
const MaxMismatches = 20

// Importer is a store that can be filled with another store's complete
// history, such as etcd.Store.
type Importer interface {
	store.Store
	// Import writes history, a store's History(ctx, "") oldest first, into
	// the empty store, with the experiments it leaves behind and its
	// revision; from names the source.
	Import(ctx context.Context, from string, history []store.Change) error
}

// Summary counts what a store holds.
type Summary struct {
	// Experiments is the number of experiments stored now.
	Experiments int
	// Changes is the length of the global history.
	Changes int
	// Keys is the number of keys with a history, deleted ones included.
	Keys int
	// Revision is the store revision.
	Revision int64
}

// String reads "12 experiments, 57 changes of 15 keys, revision 57".
func (s Summary) String() string {
	return fmt.Sprintf("%d experiments, %d changes of %d keys, revision %d", s.Experiments, s.Changes, s.Keys, s.Revision)
}

// Copy imports src's complete history into dst, then Verifies that dst
// answers exactly as src does. Nothing may write src meanwhile (allotd
// migrate holds the bbolt file's lock). from names src in dst's marker and
// in errors.
func Copy(ctx context.Context, src store.Store, dst Importer, from string) (Summary, error) {
	history, err := src.History(ctx, "")
	if err != nil {
		return Summary{}, fmt.Errorf("read %s: %w", from, err)
	}
	if err := dst.Import(ctx, from, history); err != nil {
		return Summary{}, err
	}
	sum, err := Verify(ctx, src, dst)
	if err != nil {
		return sum, fmt.Errorf("the copy differs from %s: %w", from, err)
	}
	return sum, nil
}

// Verify reads src and dst through the store.Store interface — Revision,
// List, the global History and the History of every key either one has
// written — and compares every value: each experiment and each change
// field by field, byte for byte. It returns src's Summary, and an error
// listing the mismatches (up to MaxMismatches, then their count).
func Verify(ctx context.Context, src, dst store.Store) (Summary, error) {
	a, err := read(ctx, src)
	if err != nil {
		return Summary{}, fmt.Errorf("read the source: %w", err)
	}
	b, err := read(ctx, dst)
	if err != nil {
		return Summary{}, fmt.Errorf("read the target: %w", err)
	}
	var m mismatches
	m.value("revision", a.rev, b.rev)
	m.value("revision of the list", a.listRev, b.listRev)
	m.value("experiments", len(a.list), len(b.list))
	m.value("changes", len(a.history[""]), len(b.history[""]))
	diffExperiments(&m, a.list, b.list)
	srcKeys := keys(a.history[""])
	for _, k := range keys(a.history[""], b.history[""]) {
		what := "history"
		if k != "" {
			what = fmt.Sprintf("history of %q", k)
		}
		diffChanges(&m, what, a.history[k], b.history[k])
	}
	sum := Summary{Experiments: len(a.list), Changes: len(a.history[""]), Keys: len(srcKeys) - 1, Revision: a.rev}
	return sum, m.err()
}

// contents is what Verify reads of one store.
type contents struct {
	rev, listRev int64
	list         []*store.Experiment
	history      map[string][]store.Change // by key; "" is the global history
}

func read(ctx context.Context, s store.Store) (*contents, error) {
	c := &contents{history: map[string][]store.Change{}}
	var err error
	if c.rev, err = s.Revision(ctx); err != nil {
		return nil, err
	}
	if c.list, c.listRev, err = s.List(ctx); err != nil {
		return nil, err
	}
	if c.history[""], err = s.History(ctx, ""); err != nil {
		return nil, err
	}
	for _, ch := range c.history[""] {
		if _, ok := c.history[ch.Key]; !ok {
			if c.history[ch.Key], err = s.History(ctx, ch.Key); err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

// keys returns "" and every key the histories change, in the order of
// their first change.
func keys(histories ...[]store.Change) []string {
	out := []string{""}
	seen := map[string]bool{"": true}
	for _, h := range histories {
		for _, c := range h {
			if !seen[c.Key] {
				seen[c.Key] = true
				out = append(out, c.Key)
			}
		}
	}
	return out
}

func diffExperiments(m *mismatches, src, dst []*store.Experiment) {
	byKey := map[string]*store.Experiment{}
	for _, e := range dst {
		byKey[e.Key] = e
	}
	for _, e := range src {
		d, ok := byKey[e.Key]
		delete(byKey, e.Key)
		if !ok {
			m.add("experiment %q: missing in the target", e.Key)
			continue
		}
		m.fields(fmt.Sprintf("experiment %q", e.Key), e, d)
	}
	for _, e := range dst {
		if _, extra := byKey[e.Key]; extra {
			m.add("experiment %q: in the target only", e.Key)
		}
	}
}

func diffChanges(m *mismatches, what string, src, dst []store.Change) {
	if what != "history" {
		m.value(what+": changes", len(src), len(dst))
	}
	for i := range min(len(src), len(dst)) {
		m.fields(fmt.Sprintf("%s[%d] (revision %d)", what, i, src[i].Revision), src[i], dst[i])
	}
}

// mismatches collects what Verify finds.
type mismatches struct {
	list []error
	more int
}

func (m *mismatches) add(format string, args ...any) {
	if len(m.list) == MaxMismatches {
		m.more++
		return
	}
	m.list = append(m.list, fmt.Errorf(format, args...))
}

func (m *mismatches) value(what string, src, dst any) {
	if src != dst {
		m.add("%s: %v in the source, %v in the target", what, src, dst)
	}
}

// fields compares src and dst as the stores encode them (store.Marshal)
// and names each JSON field whose bytes differ, inside nested objects
// (a change's before and after) too.
func (m *mismatches) fields(what string, src, dst any) {
	a, errA := store.Marshal(src)
	b, errB := store.Marshal(dst)
	if err := errors.Join(errA, errB); err != nil {
		m.add("%s: %v", what, err)
		return
	}
	m.json(what, "", a, b)
}

func (m *mismatches) json(what, path string, a, b json.RawMessage) {
	if bytes.Equal(a, b) {
		return
	}
	var oa, ob map[string]json.RawMessage
	if json.Unmarshal(a, &oa) != nil || json.Unmarshal(b, &ob) != nil || oa == nil || ob == nil {
		m.add("%s: %s is %s in the source, %s in the target", what, path, clip(a), clip(b))
		return
	}
	var names []string
	for name := range oa {
		names = append(names, name)
	}
	for name := range ob {
		if _, ok := oa[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		m.json(what, strings.TrimPrefix(path+"."+name, "."), oa[name], ob[name])
	}
}

// clip shortens a JSON value for a message.
func clip(v json.RawMessage) string {
	const limit = 80
	switch {
	case v == nil:
		return "absent"
	case len(v) > limit:
		return string(v[:limit]) + "…"
	}
	return string(v)
}

func (m *mismatches) err() error {
	if len(m.list) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d mismatches", len(m.list)+m.more)
	for _, e := range m.list {
		fmt.Fprintf(&b, "\n  %v", e)
	}
	if m.more > 0 {
		fmt.Fprintf(&b, "\n  … and %d more", m.more)
	}
	return errors.New(b.String())
}
