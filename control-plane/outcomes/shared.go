package outcomes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/allotmesh/allot/control-plane/store"
	"github.com/allotmesh/allot/filter/wire"
)

// Shared is where the replicas of a mesh share their outcome records
// (outcomes/etcd.Records): each replica's totals of an experiment and its
// tallies per minute, written by compare-and-swap.
type Shared interface {
	// Replica is the id of this replica, whose records it writes.
	Replica() string
	// Read reads key's total records, its minute records of Unix minutes
	// from to to (at most MaxWindowMinutes+1 of them) and the live
	// replicas, as the store held them at one revision, in pages of a
	// bounded number of records (outcomes/etcd.MaxPage), however many
	// there are: it calls page with the live replicas and each page in
	// turn — the retired record, if there is one, first of the first —
	// and returns page's first error.
	Read(ctx context.Context, key string, from, to int64, page func(live map[string]bool, recs []store.OutcomeRecord) error) error
	// Own returns, in one read, this replica's records of key: its total
	// and its minute records of Unix minutes from to to (at most
	// MaxWindowMinutes+1 of them).
	Own(ctx context.Context, key string, from, to int64) ([]store.OutcomeRecord, error)
	// Commit writes recs (a nil Value deletes) in one transaction if each
	// record's revision is still its Mod, and returns the revision of the
	// written records; ok false, nothing written, otherwise.
	Commit(ctx context.Context, recs []store.OutcomeRecord) (rev int64, ok bool, err error)
	// Sweep deletes every minute record older than minute before and, if
	// the store is still at revision rev, the records of experiments not in
	// keep.
	Sweep(ctx context.Context, keep map[string]bool, rev int64, before int64) error
}

// WithShared makes the Aggregator one replica's share of the mesh's
// outcomes: Publish writes its figures to sh, and Report sums every
// replica's.
func WithShared(sh Shared) Option { return func(a *Aggregator) { a.shared = sh } }

// Publishing (docs/operators.md, "Outcomes across replicas").
const (
	// PublishInterval is how often a replica writes its figures to the
	// shared records (Run): at most one transaction per MaxCommitRecords
	// records, for the experiments whose figures changed.
	PublishInterval = 2 * time.Second
	// SweepInterval is how often a replica folds the totals of dead
	// replicas, deletes the records of older revisions and of experiments
	// no longer observed, and the minute records out of the window.
	SweepInterval = time.Minute
	// FoldAfter is how long a replica that is not live must have left its
	// totals unwritten before another folds them into the retired record:
	// longer than a lease (10 s by default), so that a replica starting up,
	// which writes before its registry record, is not folded.
	FoldAfter = 30 * time.Second
	// MaxCommitRecords bounds the records of one transaction
	// (outcomes/etcd.MaxCommit).
	MaxCommitRecords = 50
	// MaxCommitBytes bounds the values of one transaction, under etcd's
	// default --max-request-bytes (1.5 MiB): a record is at most about
	// 35 KB (64 variations), so an experiment's total and at least 28 of
	// its minutes fit in one.
	MaxCommitBytes = 960 << 10
)

// ownRecords are this replica's records of an experiment as the shared
// store holds them (after this replica's last commit, or read back).
type ownRecords struct {
	total   []tally
	since   time.Time
	mod     int64
	minutes map[int64]ownMinute
}

type ownMinute struct {
	vars []tally
	mod  int64
}

// attempt is a commit of an experiment's records whose outcome is not
// known yet: if the total record read back is the one written, it
// committed.
type attempt struct {
	total   []byte
	sent    []tally
	sentMin map[int64][]tally
}

// record is an outcome record's value.
type record struct {
	Revision string `json:"revision"`
	// Stored is the store revision of the experiment's document the
	// writer read the assignment revision from: a record of another
	// assignment revision is older than the reader's if its Stored is
	// lower, and newer (the reader has not read the experiment since) if
	// it is higher.
	Stored int64       `json:"stored"`
	Since  int64       `json:"since,omitempty"` // Unix ms, totals only
	At     int64       `json:"at,omitempty"`    // Unix ms of the write, totals only
	Vars   []tallyJSON `json:"vars"`
}

type tallyJSON struct {
	C []uint64 `json:"c"`
	B []uint64 `json:"b,omitempty"`
}

func encodeRecord(e *expState, since, at time.Time, ts []tally) []byte {
	r := record{Revision: e.revision, Stored: e.stored, Vars: make([]tallyJSON, len(ts))}
	if !since.IsZero() {
		r.Since, r.At = since.UnixMilli(), at.UnixMilli()
	}
	for i, t := range ts {
		r.Vars[i] = tallyJSON{C: t.counts[:], B: t.buckets}
	}
	b, err := json.Marshal(r)
	if err != nil { // numbers and strings always encode
		panic(fmt.Sprintf("encode outcome record: %v", err))
	}
	return b
}

// decodeRecord decodes a record of experiment e; ok is false for a
// record of another revision, or one that does not fit e's variations
// and wire.LatencyBounds.
func decodeRecord(b []byte, e *expState) (r record, ts []tally, ok bool) {
	if err := json.Unmarshal(b, &r); err != nil || r.Revision != e.revision || len(r.Vars) != len(e.total) {
		return r, nil, false
	}
	ts = make([]tally, len(r.Vars))
	for i, v := range r.Vars {
		if len(v.C) != numClasses || len(v.B) > len(wire.LatencyBounds)+1 {
			return r, nil, false
		}
		copy(ts[i].counts[:], v.C)
		ts[i].buckets = v.B
	}
	return r, ts, true
}

// stale reports whether a record that is not of e's revision is of an
// older one (or undecodable), which its readers may delete; a newer one
// (written by a replica that read the experiment after this one did) is
// left alone.
func stale(b []byte, e *expState) bool {
	var r record
	return json.Unmarshal(b, &r) != nil || r.Stored < e.stored
}

// sub subtracts o, a past snapshot of t (so no count goes below zero).
func (t *tally) sub(o tally) {
	for c := range t.counts {
		t.counts[c] -= o.counts[c]
	}
	grow(t, len(o.buckets))
	for i, n := range o.buckets {
		t.buckets[i] -= n
	}
}

func (t tally) zero() bool {
	for _, n := range t.counts {
		if n != 0 {
			return false
		}
	}
	for _, n := range t.buckets {
		if n != 0 {
			return false
		}
	}
	return true
}

// sum is a fresh copy of the sum of each variation's tallies in every
// list (nil lists are none).
func sum(n int, lists ...[]tally) []tally {
	out := make([]tally, n)
	for _, l := range lists {
		for v := range min(n, len(l)) {
			out[v].add(l[v])
		}
	}
	return out
}

// diff is a − b per variation (b is a past snapshot of a).
func diff(a, b []tally) []tally {
	out := sum(len(a), a)
	for v := range min(len(a), len(b)) {
		out[v].sub(b[v])
	}
	return out
}

func allZero(ts []tally) bool {
	for _, t := range ts {
		if !t.zero() {
			return false
		}
	}
	return true
}

// minuteAt is e's tallies of Unix minute stamp; nil if none.
func (e *expState) minuteAt(stamp int64) []tally {
	m := e.minutes[stamp%int64(len(e.minutes))]
	if m.stamp != stamp {
		return nil
	}
	return m.vars
}

// window returns the first and last Unix minute of the tallies kept at
// now (MaxWindowMinutes+1 of them: the current one and the full minutes
// of the window before it).
func window(now time.Time) (from, to int64) {
	to = now.Unix() / 60
	return to - MaxWindowMinutes, to
}

// ownPart is what this replica counted of e: its records (as the store
// holds them: own, or read in recs when own is not known) and what it has
// not published. e is held under a.mu.
func (e *expState) ownPart(me string, recs []store.OutcomeRecord, from, to int64) (total []tally, minutes map[int64][]tally, since time.Time) {
	n := len(e.total)
	since = e.since
	var ownTotal []tally
	ownMin := map[int64][]tally{}
	switch {
	case e.own != nil:
		ownTotal = e.own.total
		if !e.own.since.IsZero() && e.own.since.Before(since) {
			since = e.own.since
		}
		for m, om := range e.own.minutes {
			ownMin[m] = om.vars
		}
	default:
		for _, r := range recs {
			if r.Replica != me {
				continue
			}
			if rec, ts, ok := decodeRecord(r.Value, e); ok {
				if r.Minute == 0 {
					ownTotal = ts
					if s := time.UnixMilli(rec.Since); rec.Since > 0 && s.Before(since) {
						since = s
					}
				} else {
					ownMin[r.Minute] = ts
				}
			}
		}
	}
	total = sum(n, ownTotal, diff(e.total, e.sent))
	minutes = map[int64][]tally{}
	for m := from; m <= to; m++ {
		local := e.minuteAt(m)
		if ownMin[m] == nil && local == nil {
			continue
		}
		minutes[m] = sum(n, ownMin[m], diff(sum(n, local), e.sentMin[m]))
	}
	return total, minutes, since
}

// merged returns a copy of e whose total and minutes from from to to are
// the mesh's: the other replicas' records at e's revision, as sh summed
// them, and this replica's part (ownPart, from its records in sh). e is
// held under a.mu.
func (e *expState) merged(me string, sh *shares, from, to int64) *expState {
	total, minutes, since := e.ownPart(me, sh.own, from, to)
	if sh.revision == e.revision { // else e was read again since the read began: none of its figures
		total = sum(len(total), total, sh.total)
		if !sh.since.IsZero() && sh.since.Before(since) {
			since = sh.since
		}
		for stamp, vars := range sh.minutes {
			if stamp >= from && stamp <= to {
				minutes[stamp] = sum(len(total), minutes[stamp], vars)
			}
		}
	}
	m := &expState{key: e.key, revision: e.revision, weights: e.weights, guardrails: e.guardrails, def: e.def, since: since, total: total}
	for stamp, vars := range minutes {
		m.minutes[stamp%int64(len(m.minutes))] = minute{stamp: stamp, vars: vars}
	}
	return m
}

// shares is what a read of an experiment's shared records keeps of them
// (read): the other replicas' figures at one assignment revision, summed
// as the pages come, and this replica's own records. It keeps no other
// record, so a read holds at once one page (outcomes/etcd.MaxPage
// records of at most outcomes/etcd.MaxRecordBytes: 4 MiB), this replica's
// records (its total and one a minute: at most MaxWindowMinutes+2, as
// large), a tally per variation and minute and the ids of the live
// replicas — however many replicas ever wrote records.
type shares struct {
	revision string                // the assignment revision summed; "" if none
	total    []tally               // the other replicas' totals, the retired record's included
	since    time.Time             // the earliest since of those totals; zero if none
	minutes  map[int64][]tally     // the other replicas' tallies of each minute read
	own      []store.OutcomeRecord // this replica's records, of any revision
	// tidied is what tidying the records failed on; the read itself
	// succeeded.
	tidied error
}

// add takes r, a record read (decodeRecord: rec, ts, ok): this
// replica's own is kept, another replica's of the revision summed.
func (sh *shares) add(me string, r store.OutcomeRecord, rec record, ts []tally, ok bool) {
	if r.Replica == me && me != store.RetiredReplica {
		sh.own = append(sh.own, r)
		return
	}
	switch {
	case !ok:
	case r.Minute == 0:
		sh.total = sum(len(sh.total), sh.total, ts)
		if s := time.UnixMilli(rec.Since); rec.Since > 0 && (sh.since.IsZero() || s.Before(sh.since)) {
			sh.since = s
		}
	default:
		sh.minutes[r.Minute] = sum(len(sh.total), sh.minutes[r.Minute], ts)
	}
}

// read reads the shared records of key — its totals and its minutes from
// from to to — page by page, summing the other replicas' at key's
// assignment revision as the read begins and keeping this replica's
// (shares), and tidies the totals as the pages come (tidier). Without a
// shared store, or for an experiment not observed, it reads nothing.
func (a *Aggregator) read(ctx context.Context, key string, from, to int64, now time.Time) (*shares, error) {
	sh := &shares{minutes: map[int64][]tally{}}
	if a.shared == nil {
		return sh, nil
	}
	a.mu.Lock()
	var e *expState // what decoding, encoding and tidying key's records take of its state, copied under a.mu
	if cur := a.exps[key]; cur != nil {
		e = &expState{key: key, revision: cur.revision, stored: cur.stored, total: make([]tally, len(cur.total))}
	}
	a.mu.Unlock()
	if e == nil {
		return sh, nil
	}
	sh.revision, sh.total = e.revision, make([]tally, len(e.total))
	me := a.shared.Replica()
	t := &tidier{a: a, e: e, me: me, now: now}
	err := a.shared.Read(ctx, key, from, to, func(live map[string]bool, recs []store.OutcomeRecord) error {
		for _, r := range recs {
			rec, ts, ok := decodeRecord(r.Value, e)
			t.see(ctx, r, rec, ts, ok, live)
			sh.add(me, r, rec, ts, ok)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sh.tidied = t.finish(ctx)
	return sh, nil
}

// Publish writes what this replica counted since its last publish to its
// shared records: for each experiment whose figures changed, its total
// and the minutes that changed, each a compare-and-swap on the record as
// this replica last wrote or read it. An experiment whose records are not
// known (the first publish, after a failed one, a new revision) has them
// read first; a record that changed meanwhile (folded into the retired
// record by another replica) is read back and the unpublished figures
// added to what it holds then. Without a shared store it does nothing.
func (a *Aggregator) Publish(ctx context.Context) error {
	if a.shared == nil {
		return nil
	}
	a.publishing.Lock()
	defer a.publishing.Unlock()
	now := a.now()
	from, to := window(now)
	me := a.shared.Replica()
	a.mu.Lock()
	var unknown []*expState
	for _, e := range a.exps {
		if e.own == nil && (e.tried != nil || e.dirty()) {
			unknown = append(unknown, e)
		}
	}
	a.mu.Unlock()
	var errs []error
	for _, e := range unknown {
		recs, err := a.shared.Own(ctx, e.key, from, to)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		a.mu.Lock()
		e.adopt(me, recs)
		a.mu.Unlock()
	}

	a.mu.Lock()
	writes := a.writesLocked(me, now, from, to)
	a.mu.Unlock()
	errs = append(errs, a.commitWrites(ctx, writes)...)
	a.forgetBefore(from)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("publish outcomes: %w", err)
	}
	return nil
}

// ownWrite is what one publish writes of an experiment: its records (own
// total and minutes), with their values' bytes, and what they hold once
// committed.
type ownWrite struct {
	e       *expState
	recs    []store.OutcomeRecord
	bytes   int // of the values
	own     *ownRecords
	attempt *attempt
}

// writesLocked returns the writes of every experiment whose own records
// are known and that counted since its last commit, at now, of the
// minutes from to to; a.mu is held.
func (a *Aggregator) writesLocked(me string, now time.Time, from, to int64) []ownWrite {
	var writes []ownWrite
	for _, e := range a.exps {
		if e.own == nil || !e.dirty() {
			continue
		}
		w := ownWrite{e: e, own: &ownRecords{since: e.own.since, minutes: map[int64]ownMinute{}},
			attempt: &attempt{sent: sum(len(e.total), e.total), sentMin: map[int64][]tally{}}}
		if w.own.since.IsZero() || e.since.Before(w.own.since) {
			w.own.since = e.since
		}
		w.own.total = sum(len(e.total), e.own.total, diff(e.total, e.sent))
		w.attempt.total = encodeRecord(e, w.own.since, now, w.own.total)
		w.recs = append(w.recs, store.OutcomeRecord{Key: e.key, Replica: me, Value: w.attempt.total, Mod: e.own.mod})
		w.bytes = len(w.attempt.total)
		// The minutes that do not fit are written at the next publish.
		for m := to; m >= from && len(w.recs) < MaxCommitRecords; m-- {
			local := e.minuteAt(m)
			if local == nil {
				continue
			}
			d := diff(local, e.sentMin[m])
			if allZero(d) {
				continue
			}
			vars := sum(len(e.total), e.own.minutes[m].vars, d)
			value := encodeRecord(e, time.Time{}, now, vars)
			if w.bytes+len(value) > MaxCommitBytes {
				break
			}
			w.bytes += len(value)
			w.own.minutes[m] = ownMinute{vars: vars}
			w.attempt.sentMin[m] = sum(len(local), local)
			w.recs = append(w.recs, store.OutcomeRecord{Key: e.key, Replica: me, Minute: m, Value: value, Mod: e.own.minutes[m].mod})
		}
		e.tried = w.attempt
		writes = append(writes, w)
	}
	return writes
}

// commitWrites commits writes and returns the errors of the commits that
// failed.
func (a *Aggregator) commitWrites(ctx context.Context, writes []ownWrite) []error {
	var errs []error
	// Experiments are packed into transactions of at most
	// MaxCommitRecords records and MaxCommitBytes; a failed comparison
	// fails its transaction's experiments alone, which read their records
	// back next time.
	for len(writes) > 0 {
		n, size, bytes := 0, 0, 0
		for n < len(writes) && (n == 0 || (size+len(writes[n].recs) <= MaxCommitRecords && bytes+writes[n].bytes <= MaxCommitBytes)) {
			size += len(writes[n].recs)
			bytes += writes[n].bytes
			n++
		}
		batch := writes[:n]
		writes = writes[n:]
		var recs []store.OutcomeRecord
		for _, w := range batch {
			recs = append(recs, w.recs...)
		}
		rev, ok, err := a.shared.Commit(ctx, recs)
		if err != nil {
			errs = append(errs, err)
		}
		a.mu.Lock()
		for _, w := range batch {
			e := w.e
			if err != nil || !ok { // read back at the next publish (err: with the attempt, to learn whether it committed)
				e.own = nil
				if err == nil {
					e.tried = nil
				}
				continue
			}
			e.tried = nil
			e.sent = w.attempt.sent
			for m, vars := range w.attempt.sentMin {
				e.sentMin[m] = vars
			}
			e.own.total, e.own.since, e.own.mod = w.own.total, w.own.since, rev
			for m, om := range w.own.minutes {
				e.own.minutes[m] = ownMinute{vars: om.vars, mod: rev}
			}
		}
		a.mu.Unlock()
	}
	return errs
}

// forgetBefore forgets what was sent and written of the minutes before
// from, out of the window.
func (a *Aggregator) forgetBefore(from int64) {
	a.mu.Lock()
	for _, e := range a.exps {
		for m := range e.sentMin {
			if m < from {
				delete(e.sentMin, m)
			}
		}
		if e.own != nil {
			for m := range e.own.minutes {
				if m < from {
					delete(e.own.minutes, m)
				}
			}
		}
	}
	a.mu.Unlock()
}

// dirty reports whether e counted something it has not published.
func (e *expState) dirty() bool { return !allZero(diff(e.total, e.sent)) }

// adopt takes recs (read from the shared store) as e's own records: its
// records at e's revision as the base of its next writes, and the
// revision of each (of whatever revision) for the comparison. If the
// total record is the one an attempt of unknown outcome wrote, the attempt
// committed. a.mu is held.
func (e *expState) adopt(me string, recs []store.OutcomeRecord) {
	own := &ownRecords{total: make([]tally, len(e.total)), minutes: map[int64]ownMinute{}}
	committed := false
	for _, r := range recs {
		if r.Replica != me {
			continue
		}
		rec, ts, ok := decodeRecord(r.Value, e)
		if r.Minute == 0 {
			own.mod = r.Mod
			if ok {
				own.total = ts
				if rec.Since > 0 {
					own.since = time.UnixMilli(rec.Since)
				}
			}
			committed = e.tried != nil && string(r.Value) == string(e.tried.total)
			continue
		}
		om := ownMinute{mod: r.Mod}
		if ok {
			om.vars = ts
		}
		own.minutes[r.Minute] = om
	}
	if committed {
		e.sent = e.tried.sent
		for m, vars := range e.tried.sentMin {
			e.sentMin[m] = vars
		}
	}
	e.tried = nil
	e.own = own
}

// Run publishes this replica's figures every PublishInterval and sweeps
// the shared records every SweepInterval until ctx is done, then
// publishes once more (within PublishInterval), so that a replica that
// stops leaves what it counted. Failures are logged and tried again at
// the next interval. Without a shared store it returns at once.
func (a *Aggregator) Run(ctx context.Context) {
	if a.shared == nil {
		return
	}
	tick := time.NewTicker(PublishInterval)
	defer tick.Stop()
	lastSweep := time.Time{}
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), PublishInterval)
			if err := a.Publish(fctx); err != nil {
				a.log.Warn("outcomes: last publish", "error", err)
			}
			cancel()
			return
		case <-tick.C:
		}
		if err := a.Publish(ctx); err != nil {
			a.log.Warn("outcomes: publish", "error", err)
		}
		if now := a.now(); now.Sub(lastSweep) >= SweepInterval {
			lastSweep = now
			if err := a.Sweep(ctx); err != nil {
				a.log.Warn("outcomes: sweep", "error", err)
			}
		}
	}
}

// Sweep tidies the shared records: for each observed experiment it folds
// the totals of replicas no longer live and deletes the records of older
// revisions (tidy); then it deletes the minute records out of every
// window, and the records of experiments no longer observed if the store
// has not changed since the experiments were read.
func (a *Aggregator) Sweep(ctx context.Context) error {
	if a.shared == nil {
		return nil
	}
	if err := a.maybeRefresh(ctx, true); err != nil {
		return fmt.Errorf("sweep outcomes: %w", err)
	}
	a.reading.Lock()
	rev := a.storeRev
	a.reading.Unlock()
	now := a.now()
	a.mu.Lock()
	keep := make(map[string]bool, len(a.exps))
	for key := range a.exps {
		keep[key] = true
	}
	a.mu.Unlock()
	var errs []error
	from, to := window(now)
	for key := range keep {
		sh, err := a.read(ctx, key, to, to, now) // the totals (and this minute's records), tidied
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if sh.tidied != nil {
			errs = append(errs, sh.tidied)
		}
	}
	if rev >= 0 {
		if err := a.shared.Sweep(ctx, keep, rev, from); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// tidier tidies an experiment's total records as the pages of a read
// come (read): it folds into the retired record the totals at
// the experiment's revision of replicas that are not live and wrote
// nothing for FoldAfter, MaxCommitRecords-1 of them at a time, and
// deletes the totals of older revisions, MaxCommitRecords at a time —
// each a compare-and-swap on the records as the read found them, the
// retired record as the read found it or this read's last fold wrote it.
// Another replica may fold at once: one wins, the others' comparisons
// fail and they fold nothing more in that read, so no total is folded
// twice nor lost. Records of a newer revision (this replica has not read
// the experiment's update yet) are left alone, and nothing is folded
// into a retired record of one. It holds one batch of each, however many
// records the read finds.
type tidier struct {
	a   *Aggregator
	e   *expState // the experiment as the read began (read)
	me  string
	now time.Time

	retired      store.OutcomeRecord // its deletion; Mod as read or last folded (0: absent)
	retiredTotal []tally             // its figures, if of e's revision
	retiredSince time.Time
	retiredOld   bool // of an older revision: overwritten by a fold, else deleted
	newer        bool // the retired record is of a newer revision: nothing is folded
	stopped      bool // a fold failed: no more folds in this read

	dead      []store.OutcomeRecord // deletions of dead replicas' totals to fold next
	deadTotal []tally
	deadSince time.Time
	old       []store.OutcomeRecord // deletions of totals of older revisions
	errs      []error
}

// see takes r, a record read (decodeRecord: rec, ts, ok) while the
// replicas in live were. The retired record must come before the records
// folded into it (outcomes/etcd's Read gives it first): a fold before it
// would find its comparison failing, and write nothing.
func (t *tidier) see(ctx context.Context, r store.OutcomeRecord, rec record, ts []tally, ok bool, live map[string]bool) {
	if r.Minute != 0 {
		return
	}
	switch {
	case r.Replica == store.RetiredReplica:
		t.retired = store.OutcomeRecord{Key: t.e.key, Replica: r.Replica, Mod: r.Mod}
		switch {
		case ok:
			t.retiredTotal = ts
			if rec.Since > 0 {
				t.retiredSince = time.UnixMilli(rec.Since)
			}
		case stale(r.Value, t.e):
			t.retiredOld = true
		default:
			t.newer = true
		}
	case !ok && !stale(r.Value, t.e): // of a newer revision: this replica is behind
	case !ok:
		if t.old = append(t.old, store.OutcomeRecord{Key: t.e.key, Replica: r.Replica, Mod: r.Mod}); len(t.old) == MaxCommitRecords {
			t.deleteOld(ctx)
		}
	case r.Replica != t.me && !live[r.Replica] && t.now.Sub(time.UnixMilli(rec.At)) >= FoldAfter:
		t.dead = append(t.dead, store.OutcomeRecord{Key: t.e.key, Replica: r.Replica, Mod: r.Mod})
		t.deadTotal = sum(len(t.e.total), t.deadTotal, ts)
		if s := time.UnixMilli(rec.Since); rec.Since > 0 && (t.deadSince.IsZero() || s.Before(t.deadSince)) {
			t.deadSince = s
		}
		if len(t.dead) == MaxCommitRecords-1 {
			t.fold(ctx)
		}
	}
}

// fold folds the dead replicas' totals seen since the last fold into the
// retired record: one compare-and-swap on all of them.
func (t *tidier) fold(ctx context.Context) {
	dead, total, since := t.dead, sum(len(t.e.total), t.retiredTotal, t.deadTotal), t.retiredSince
	if !t.deadSince.IsZero() && (since.IsZero() || t.deadSince.Before(since)) {
		since = t.deadSince
	}
	t.dead, t.deadTotal, t.deadSince = nil, nil, time.Time{}
	if len(dead) == 0 || t.newer || t.stopped {
		return
	}
	// A retired record of an older revision is overwritten, not deleted.
	put := store.OutcomeRecord{Key: t.e.key, Replica: store.RetiredReplica, Value: encodeRecord(t.e, since, t.now, total), Mod: t.retired.Mod}
	rev, ok, err := t.a.shared.Commit(ctx, append(dead, put))
	switch {
	case err != nil:
		t.errs, t.stopped = append(t.errs, err), true
	case !ok:
		t.stopped = true
	default:
		t.retired.Mod, t.retiredTotal, t.retiredSince, t.retiredOld = rev, total, since, false
	}
}

// deleteOld deletes the totals of older revisions seen since the last
// deletion: one compare-and-swap on all of them.
func (t *tidier) deleteOld(ctx context.Context) {
	old := t.old
	t.old = nil
	if len(old) == 0 {
		return
	}
	if _, _, err := t.a.shared.Commit(ctx, old); err != nil {
		t.errs = append(t.errs, err)
	}
}

// finish folds and deletes what is left once the read is over, and
// returns what failed.
func (t *tidier) finish(ctx context.Context) error {
	t.fold(ctx)
	if t.retiredOld { // not overwritten by a fold
		t.old = append(t.old, t.retired)
	}
	t.deleteOld(ctx)
	return errors.Join(t.errs...)
}
