package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// rebucket and weights are GrowthBook's release plans for a running
// experiment as one-line edits of the stored definition: each reads the
// experiment, changes bucketVersion, minBucketVersion, seed or weights,
// and writes it back with the revision it read.

const rebucketUsage = `Usage: allotctl rebucket KEY [--exclude-previous] [--keep-seed] [--revision N] [--wait DURATION]

Re-randomizes every unit of an experiment (GrowthBook's "new phase,
re-randomize traffic"). It raises bucketVersion by one, so that the
assignments units hold from earlier versions (sticky bucketing) are no
longer reused, and sets the seed to KEY:<bucketVersion> (the seed
defaults to the key), so that every unit is hashed afresh: with the old
seed, hashing would put most units back in the variation they had.

--exclude-previous also raises minBucketVersion to the new bucketVersion
(GrowthBook's "re-randomize traffic, block bucketed users"): a unit that
holds an assignment of an older version gets none from then on, so units
that saw the experiment before stay out of the new results, and only units
new to it are assigned. It needs sticky bucketing, which records those
assignments (refused with disableStickyBucketing).

--keep-seed keeps the seed (GrowthBook's "same phase, apply changes to
everyone"): stored assignments are no longer reused and every unit is
assigned by its hash under the current definition, so units move only
where weights, coverage or targeting changed since they were assigned.

To change weights and keep assigned units where they are, use
"allotctl weights". The write carries the revision just read (or
--revision): if the experiment changed meanwhile, it fails with a conflict
and nothing changes.
` + stickyNote

// stickyNote ends the usage of rebucket and weights.
const stickyNote = `
A unit holds assignments only where the mesh settings set a sticky cookie
and its browser returned the cookie (docs/services.md, "The sticky
cookie"); a unit holding none is assigned by its hash. A definitions file applied later with "allotctl apply" sets
bucketVersion, minBucketVersion, seed and weights back to the file's:
copy them from "allotctl get KEY -o yaml" into the file.
`

const weightsUsage = `Usage: allotctl weights KEY W1,W2,... [--rebucket | --exclude-previous] [--keep-seed] [--revision N] [--wait DURATION]

Sets an experiment's weights: one per variation, in order, summing to 1
(e.g. 0.1,0.9).

By default units keep their variation (GrowthBook's "same phase, apply
changes to new traffic only"): bucketVersion stays, so every unit that
holds an assignment (sticky bucketing) keeps it, and only units new to the
experiment are split by the new weights. Moving assigned units instead
would mix, in each variation, units that saw another one before. An
experiment with disableStickyBucketing holds no assignments: every unit is
assigned by its hash under the new weights, and those whose hash falls
where the weights moved change variation.

--rebucket also re-randomizes every unit, as "allotctl rebucket" does;
--exclude-previous as "allotctl rebucket --exclude-previous" does (units
assigned before get no assignment); --keep-seed with either keeps the seed.
The write carries the revision just read (or --revision): if the
experiment changed meanwhile, it fails with a conflict and nothing changes.
` + stickyNote

// rebucketing is how rebucket changes an experiment: it always raises
// bucketVersion, so that stored assignments are not reused.
type rebucketing struct {
	// excludePrevious raises minBucketVersion with it, so that units
	// holding an older assignment are excluded.
	excludePrevious bool
	// keepSeed keeps the seed instead of setting the new version's.
	keepSeed bool
}

// addFlags registers the flags rebucket and weights share: r's, --revision
// and --wait.
func (r *rebucketing) addFlags(fs *flag.FlagSet) (rev *int64, wait *time.Duration) {
	fs.BoolVar(&r.excludePrevious, "exclude-previous", false, "also raise minBucketVersion to the new bucketVersion: units assigned under an older version get no assignment")
	fs.BoolVar(&r.keepSeed, "keep-seed", false, "keep the seed: units are reassigned by their hash under the current definition")
	return fs.Int64("revision", 0, "change only at this `revision` (0: the one just read)"), waitFlag(fs)
}

func runRebucket(ctx context.Context, env *Env, args []string) error {
	fs, conn := newFlagSet(env, "rebucket", rebucketUsage, true)
	var r rebucketing
	rev, wait := r.addFlags(fs)
	pos, ok, err := parseFlags(fs, args, 1, 1)
	if !ok {
		return err
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	return edit(ctx, env, c, conn.output, "rebucket", "rebucketed", pos[0], *rev, *wait, r.apply)
}

func runWeights(ctx context.Context, env *Env, args []string) error {
	fs, conn := newFlagSet(env, "weights", weightsUsage, true)
	var r rebucketing
	rebucket := fs.Bool("rebucket", false, "also re-randomize every unit (as allotctl rebucket; implied by --exclude-previous)")
	rev, wait := r.addFlags(fs)
	pos, ok, err := parseFlags(fs, args, 2, 2)
	if !ok {
		return err
	}
	weights, err := parseWeights(pos[1])
	if err != nil {
		return err
	}
	*rebucket = *rebucket || r.excludePrevious
	if r.keepSeed && !*rebucket {
		return fmt.Errorf("%w: --keep-seed goes with --rebucket or --exclude-previous", ErrUsage)
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	return edit(ctx, env, c, conn.output, "weights", "configured", pos[0], *rev, *wait, func(e *experimentv1.Experiment) error {
		e.Weights = weights
		if *rebucket {
			return r.apply(e)
		}
		return nil
	})
}

// parseWeights reads "0.1,0.9".
func parseWeights(arg string) ([]float64, error) {
	var out []float64
	var errs []error
	for i, s := range strings.Split(arg, ",") {
		w, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("weights[%d]: %q is not a number", i, s))
			continue
		}
		out = append(out, w)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return out, nil
}

// apply raises e's bucketVersion by one; with excludePrevious,
// minBucketVersion to it; unless keepSeed, sets the new version's seed.
// It refuses, naming the field, what would not do what it says.
func (r rebucketing) apply(e *experimentv1.Experiment) error {
	if e.GetBucketVersion() == math.MaxInt32 {
		return fmt.Errorf("bucketVersion: %d is the largest version; it cannot be raised", e.GetBucketVersion())
	}
	if e.GetDisableStickyBucketing() {
		switch {
		case r.excludePrevious:
			return errors.New("disableStickyBucketing: true: the experiment records no assignments, so --exclude-previous has none to exclude units by")
		case r.keepSeed:
			return errors.New("disableStickyBucketing: true: the experiment holds no assignments to forget, so with --keep-seed no unit would change")
		}
	}
	e.BucketVersion++
	if r.excludePrevious {
		e.MinBucketVersion = e.BucketVersion
	}
	if !r.keepSeed {
		next := versionSeed(e.GetKey(), e.GetBucketVersion())
		if next == seed(e) {
			return fmt.Errorf("seed: already %q, the seed rebucket would set; set another with apply, or rebucket with --keep-seed", next)
		}
		e.Seed = next
	}
	return nil
}

// versionSeed is the seed rebucket gives bucket version v of experiment
// key: "key:v". It differs for every version, and from every key's
// default seed (a key has no colon).
func versionSeed(key string, v int32) string { return key + ":" + strconv.Itoa(int(v)) }

// seed is the seed the experiment is hashed with: its key by default.
func seed(e *experimentv1.Experiment) string {
	if e.GetSeed() != "" {
		return e.GetSeed()
	}
	return e.GetKey()
}

// edit reads experiment key, lets change modify it and writes it back on
// the condition that it is still at the revision read (rev instead, when
// not 0). It prints what changed and what that does to units. When change
// leaves the experiment as it was (weights set to the ones it has), nothing
// is written.
func edit(ctx context.Context, env *Env, c *client, output, op, done, key string, rev int64, wait time.Duration,
	change func(*experimentv1.Experiment) error) error {
	b, err := c.do(ctx, "GET", "/v1/experiments/"+url.PathEscape(key), nil)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	before, err := decodeExperiment(b)
	if err != nil {
		return err
	}
	want := proto.Clone(before).(*experimentv1.Experiment)
	if err := change(want); err != nil {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	if rev != 0 {
		want.Revision = rev
	}
	if len(changeList(before, want)) == 0 {
		if output != "table" {
			return writeData(env.Stdout, output, b)
		}
		fmt.Fprintf(env.Stdout, "experiment/%s unchanged (revision %d): weights already %s\n", key, before.GetRevision(), variations(before))
		return nil
	}
	after, ro, err := putExperiment(ctx, c, want, wait)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	if output != "table" {
		js, err := protojson.Marshal(after)
		if err != nil {
			return err
		}
		if err := writeData(env.Stdout, output, js); err != nil {
			return err
		}
		return reportRollout(env.Stderr, "experiment/"+key, ro)
	}
	fmt.Fprintf(env.Stdout, "experiment/%s %s (revision %d): %s\n  %s\n", key, done, after.GetRevision(),
		strings.Join(changeList(before, after), ", "), effect(before, after))
	return reportRollout(env.Stderr, "experiment/"+key, ro)
}

// changeList describes what differs between two versions of an
// experiment's weights and sticky buckets: "weights a=0.5,b=0.5 → a=0,b=1",
// "bucketVersion 0→1" (or "bucketVersion 0 kept"), "minBucketVersion 0→1",
// "seed k→k:1". It is empty when nothing does.
func changeList(before, after *experimentv1.Experiment) []string {
	var out []string
	if !slices.Equal(before.GetWeights(), after.GetWeights()) {
		out = append(out, "weights "+variations(before)+" → "+variations(after))
	}
	if b, a := before.GetBucketVersion(), after.GetBucketVersion(); b != a {
		out = append(out, fmt.Sprintf("bucketVersion %d→%d", b, a))
	} else if len(out) > 0 {
		out = append(out, fmt.Sprintf("bucketVersion %d kept", b))
	}
	if b, a := before.GetMinBucketVersion(), after.GetMinBucketVersion(); b != a {
		out = append(out, fmt.Sprintf("minBucketVersion %d→%d", b, a))
	}
	if b, a := seed(before), seed(after); b != a {
		out = append(out, "seed "+b+"→"+a)
	}
	return out
}

// effect says what a written change does to units, from the versions
// before and after it.
func effect(before, after *experimentv1.Experiment) string {
	rebucketed := after.GetBucketVersion() != before.GetBucketVersion()
	reseeded := seed(after) != seed(before)
	switch {
	case after.GetMinBucketVersion() > before.GetMinBucketVersion() && reseeded:
		return fmt.Sprintf("units holding an assignment of a version below %d get none (excluded); units new to the experiment are assigned afresh under the new seed",
			after.GetMinBucketVersion())
	case after.GetMinBucketVersion() > before.GetMinBucketVersion():
		return fmt.Sprintf("units holding an assignment of a version below %d get none (excluded); units new to the experiment are assigned by their hash",
			after.GetMinBucketVersion())
	case after.GetDisableStickyBucketing() && reseeded:
		return "every unit is assigned afresh under the new seed (sticky bucketing is disabled: nothing is stored)"
	case after.GetDisableStickyBucketing():
		return "sticky bucketing is disabled (disableStickyBucketing): every unit is assigned by its hash under the new definition; units whose hash falls where the weights moved change variation"
	case rebucketed && reseeded:
		return "every unit is assigned afresh under the new seed: assignments held from older versions are no longer reused"
	case rebucketed:
		return "assignments held from older versions are no longer reused: every unit is assigned by its hash under the current definition"
	}
	return "units already assigned keep their variation (sticky bucketing); units new to the experiment are split by the new weights"
}
