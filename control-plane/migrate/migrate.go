// Package migrate copies a store — every experiment and its whole audit
// history, revisions, timestamps and actors unchanged — into an empty store
// that can import a history, and proves the copy equal by reading both
// back through the store.Store interface.
//
// It imports only store; allotd migrate (control-plane/cmd/allotd) wires a
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
	// revision; from names the source. It calls verify once everything is
	// written, and serves the copy (to other processes) only if verify
	// returns nil.
	Import(ctx context.Context, from string, history []store.Change, verify func(context.Context) error) error
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
	return fmt.Sprintf("%s, %s of %s, revision %d",
		count(s.Experiments, "experiment"), count(s.Changes, "change"), count(s.Keys, "key"), s.Revision)
}

func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Copy imports src's complete history into dst and, before dst finishes
// the import, Verifies that dst answers exactly as src does. Nothing may
// write src meanwhile (allotd migrate holds the bbolt file's lock). from
// names src in dst's marker and in errors.
func Copy(ctx context.Context, src store.Store, dst Importer, from string) (Summary, error) {
	history, err := src.History(ctx, "")
	if err != nil {
		return Summary{}, fmt.Errorf("read %s: %w", from, err)
	}
	var sum Summary
	err = dst.Import(ctx, from, history, func(ctx context.Context) error {
		var err error
		sum, err = Verify(ctx, src, dst)
		return err
	})
	return sum, err
}

// Verify reads src and dst through the store.Store interface — Revision,
// List, the global History and the History of every key either one has
// written — and compares every value: each experiment and each change
// field by field, byte for byte. It returns src's Summary, and an error
// listing the mismatches (up to MaxMismatches, then their count).
func Verify(ctx context.Context, src, dst store.Store) (Summary, error) {
	var m mismatches
	ra, rb, err := both(src, dst, func(s store.Store) (int64, error) { return s.Revision(ctx) })
	if err != nil {
		return Summary{}, err
	}
	m.value("revision", ra, rb)

	type listed struct {
		list []*store.Experiment
		rev  int64
	}
	la, lb, err := both(src, dst, func(s store.Store) (listed, error) {
		list, rev, err := s.List(ctx)
		return listed{list, rev}, err
	})
	if err != nil {
		return Summary{}, err
	}
	m.value("revision of the list", la.rev, lb.rev)
	m.value("experiments", len(la.list), len(lb.list))
	diffExperiments(&m, la.list, lb.list)

	ha, hb, err := both(src, dst, func(s store.Store) ([]store.Change, error) { return s.History(ctx, "") })
	if err != nil {
		return Summary{}, err
	}
	m.value("changes", len(ha), len(hb))
	diffChanges(&m, "history", ha, hb)
	sum := Summary{Experiments: len(la.list), Changes: len(ha), Keys: len(keys(ha)) - 1, Revision: ra}
	// Each key's history is read and compared on its own (the global ones
	// are dead by then), so that memory holds one key's at a time.
	for _, k := range keys(ha, hb)[1:] {
		ka, kb, err := both(src, dst, func(s store.Store) ([]store.Change, error) { return s.History(ctx, k) })
		if err != nil {
			return Summary{}, err
		}
		what := fmt.Sprintf("history of %q", k)
		m.value(what+": changes", len(ka), len(kb))
		diffChanges(&m, what, ka, kb)
	}
	return sum, m.err()
}

// both reads src and dst with read.
func both[T any](src, dst store.Store, read func(store.Store) (T, error)) (T, T, error) {
	a, err := read(src)
	if err != nil {
		return a, a, fmt.Errorf("read the source: %w", err)
	}
	b, err := read(dst)
	if err != nil {
		return a, b, fmt.Errorf("read the target: %w", err)
	}
	return a, b, nil
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
