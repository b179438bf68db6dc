package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/allotmesh/allot/control-plane/experiment"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

// connHelp explains the connection flags in every online command's usage.
const connHelp = `
The server and token come from --server/--token, then $ALLOT_SERVER and
$ALLOT_TOKEN, then the config file (--config, default
~/.config/allot/config.json: {"server": "http://127.0.0.1:8080", "token": "..."}).

Flags:
`

// newFlagSet returns a subcommand's flag set whose -h prints usage, then
// connHelp and the flags.
func newFlagSet(env *Env, name, usage string, output bool) (*flag.FlagSet, *connFlags) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage+connHelp)
		fs.PrintDefaults()
	}
	return fs, addConnFlags(fs, output)
}

// ---------------------------------------------------------------- apply

const applyUsage = `Usage: allotctl apply -f FILE

Creates or updates the experiments in FILE (JSON or YAML: one experiment, a
list, or {"experiments": [...]}) so that the server holds exactly these
definitions. Unknown fields, a key given twice and any other top-level key
(savedGroups are mesh settings: allotd -mesh) reject the whole file before
anything is sent; "allotctl eval -f FILE" accepts exactly the files apply
accepts. Apply is idempotent: an absent experiment is created, a
different one is updated with the revision just read (a concurrent change
fails with a conflict instead of being overwritten), an identical one is left
alone. An empty owner keeps the stored owner (or, on create, defaults to the
token's only namespace). Prints one line per experiment:
created, configured or unchanged.
`

func runApply(ctx context.Context, env *Env, args []string) error {
	fs, conn := newFlagSet(env, "apply", applyUsage, true)
	file := fs.String("f", "", "experiment definitions `FILE` (JSON or YAML)")
	wait := waitFlag(fs)
	if _, ok, err := parseFlags(fs, args, 0, 0); !ok {
		return err
	}
	if *file == "" {
		return fmt.Errorf("%w: apply needs -f FILE", ErrUsage)
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	exps, err := readExperiments(*file)
	if err != nil {
		return err
	}
	var errs []error
	var results []applyResult
	var rollouts []*adminv1.Rollout
	for _, e := range exps {
		r, ro, err := apply(ctx, c, e, *wait)
		if err != nil {
			errs = append(errs, fmt.Errorf("apply %s: %w", e.GetKey(), err))
			continue
		}
		results = append(results, r)
		rollouts = append(rollouts, ro)
	}
	if err := writeApply(env.Stdout, conn.output, results); err != nil {
		return err
	}
	for i, ro := range rollouts {
		if err := reportRollout(env.Stderr, "experiment/"+results[i].Key, ro); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// applyResult is what apply did to one experiment.
type applyResult struct {
	Key      string `json:"key"`
	Action   string `json:"action"`
	Revision int64  `json:"revision,string"`
}

// apply makes the server hold e: create, update or nothing. With wait, a
// create or update waits for the proxies and returns how it rolled out.
func apply(ctx context.Context, c *client, e *experimentv1.Experiment, wait time.Duration) (applyResult, *adminv1.Rollout, error) {
	body, err := protojson.Marshal(e)
	if err != nil {
		return applyResult{}, nil, err
	}
	cur, err := c.do(ctx, "GET", "/v1/experiments/"+url.PathEscape(e.GetKey()), nil)
	if isStatus(err, http.StatusNotFound) {
		b, err := c.do(ctx, "POST", withWait("/v1/experiments", wait), body)
		if err != nil {
			return applyResult{}, nil, err
		}
		created, ro, err := decodeWritten(b, wait)
		return applyResult{e.GetKey(), "created", created.GetRevision()}, ro, err
	}
	if err != nil {
		return applyResult{}, nil, err
	}
	stored, err := decodeExperiment(cur)
	if err != nil {
		return applyResult{}, nil, err
	}
	if sameDefinition(e, stored) {
		return applyResult{e.GetKey(), "unchanged", stored.GetRevision()}, nil, nil
	}
	want := proto.Clone(e).(*experimentv1.Experiment)
	want.Revision = stored.GetRevision()
	updated, ro, err := putExperiment(ctx, c, want, wait)
	if err != nil {
		return applyResult{}, nil, err
	}
	return applyResult{e.GetKey(), "configured", updated.GetRevision()}, ro, nil
}

// putExperiment writes e over the stored experiment on the condition that it is
// still at e's revision (the API answers a conflict otherwise), and
// returns what the server stored and, with wait, how it rolled out.
func putExperiment(ctx context.Context, c *client, e *experimentv1.Experiment, wait time.Duration) (*experimentv1.Experiment, *adminv1.Rollout, error) {
	body, err := protojson.Marshal(e)
	if err != nil {
		return nil, nil, err
	}
	b, err := c.do(ctx, "PUT", withWait("/v1/experiments/"+url.PathEscape(e.GetKey()), wait), body)
	if err != nil {
		return nil, nil, err
	}
	return decodeWritten(b, wait)
}

// sameDefinition reports whether the file's definition equals the stored
// one, ignoring output-only metadata and state (and the owner when the file
// has none, and the coverage when the file has a ramp and no coverage), as
// the admin API would store the file.
func sameDefinition(file, stored *experimentv1.Experiment) bool {
	a, b := experiment.Spec(file), experiment.Spec(stored)
	experiment.CopyState(a, b)
	experiment.FillRampCoverage(a)
	if a.Owner == "" {
		a.Owner = b.Owner
	}
	return proto.Equal(a, b)
}

func decodeExperiment(b []byte) (*experimentv1.Experiment, error) {
	e := &experimentv1.Experiment{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, e); err != nil {
		return nil, fmt.Errorf("decode experiment: %w", err)
	}
	return e, nil
}

// readExperiments reads a definitions file, the one reader of apply and
// eval: one experiment, a list, or {"experiments": [...]} as JSON or YAML.
// Each experiment is decoded as the admin API decodes it (protojson: unknown
// fields rejected); a wrapper with any other key, an experiment without a
// key and a key given twice are rejected too, every problem with its path.
func readExperiments(path string) ([]*experimentv1.Experiment, error) {
	data, err := readDefinitions(path)
	if err != nil {
		return nil, err
	}
	var items []json.RawMessage
	var errs []error
	trimmed := bytes.TrimSpace(data)
	switch {
	case len(trimmed) > 0 && trimmed[0] == '[':
		err = json.Unmarshal(trimmed, &items)
	case len(trimmed) > 0 && trimmed[0] == '{':
		var top map[string]json.RawMessage
		if top, err = topLevel(trimmed); err != nil {
			break
		}
		list, wrapped := top["experiments"]
		if !wrapped {
			items = []json.RawMessage{trimmed}
			break
		}
		if err = json.Unmarshal(list, &items); err != nil {
			err = fmt.Errorf("experiments: want a list of experiments: %w", err)
			break
		}
		for _, k := range slices.Sorted(maps.Keys(top)) {
			switch k {
			case "experiments":
			case "savedGroups", "saved_groups":
				errs = append(errs, fmt.Errorf("%s: %s: not accepted here: saved groups are mesh settings (allotd -mesh; allotctl eval --mesh)", path, k))
			default:
				errs = append(errs, fmt.Errorf("%s: %s: unknown field: want {\"experiments\": [...]} alone", path, k))
			}
		}
	default:
		err = errors.New("want an experiment object, a list of experiments, or {\"experiments\": [...]}")
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []*experimentv1.Experiment
	seen := map[string]int{}
	for i, raw := range items {
		e := &experimentv1.Experiment{}
		if err := protojson.Unmarshal(raw, e); err != nil {
			errs = append(errs, fmt.Errorf("%s: experiments[%d]: %v", path, i, protoError(err)))
			continue
		}
		if e.GetKey() == "" {
			errs = append(errs, fmt.Errorf("%s: experiments[%d].key: required", path, i))
			continue
		}
		if j, dup := seen[e.GetKey()]; dup {
			errs = append(errs, fmt.Errorf("%s: experiments[%d].key: duplicate key %q (also experiments[%d])", path, i, e.GetKey(), j))
			continue
		}
		seen[e.GetKey()] = i
		out = append(out, e)
	}
	return out, errors.Join(errs...)
}

// topLevel returns an object's members by name, refusing a name given
// twice (json.Unmarshal would keep the last silently).
func topLevel(data []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	top := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if _, dup := top[k]; dup {
			return nil, fmt.Errorf("%s: given twice", k)
		}
		top[k] = v
	}
	if _, err := dec.Token(); err != nil { // }
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the top-level object")
	}
	return top, nil
}

func writeApply(w io.Writer, format string, results []applyResult) error {
	if format != "table" {
		b, err := json.Marshal(map[string]any{"results": results})
		if err != nil {
			return err
		}
		return writeData(w, format, b)
	}
	for _, r := range results {
		fmt.Fprintf(w, "experiment/%s %s (revision %d)\n", r.Key, r.Action, r.Revision)
	}
	return nil
}

// ---------------------------------------------------------------- get, list

const getUsage = `Usage: allotctl get KEY [-o table|json|yaml]

Prints one experiment: a table row by default, the whole resource with -o.
`

func runGet(ctx context.Context, env *Env, args []string) error {
	fs, conn := newFlagSet(env, "get", getUsage, true)
	pos, ok, err := parseFlags(fs, args, 1, 1)
	if !ok {
		return err
	}
	b, err := conn.get(ctx, env, "get "+pos[0], "/v1/experiments/"+url.PathEscape(pos[0]))
	if b == nil {
		return err
	}
	e, err := decodeExperiment(b)
	if err != nil {
		return err
	}
	if err := writeTable(env.Stdout, []*experimentv1.Experiment{e}); err != nil {
		return err
	}
	writeGuards(env.Stdout, e)
	return nil
}

// writeGuards prints, below get's table, a line each for the experiment's
// guardrails, ramp and rollback when it has them.
func writeGuards(w io.Writer, e *experimentv1.Experiment) {
	var gs []string
	for _, g := range e.GetGuardrails() {
		var limit string
		switch {
		case g.MaxIncrease != nil:
			limit = "+" + strconv.FormatFloat(g.GetMaxIncrease(), 'g', -1, 64)
		case g.MaxRatio != nil:
			limit = "x" + strconv.FormatFloat(g.GetMaxRatio(), 'g', -1, 64)
		}
		gs = append(gs, fmt.Sprintf("%s %s (control %d, min %d requests)", g.GetMetric(), limit, g.GetControl(), experiment.GuardrailRequests(g)))
	}
	if len(gs) > 0 {
		fmt.Fprintf(w, "guardrails: %s\n", strings.Join(gs, "; "))
	}
	if steps := e.GetRamp().GetSteps(); len(steps) > 0 {
		var ss []string
		for i, st := range steps {
			s := strconv.FormatFloat(st.GetCoverage()*100, 'g', -1, 64) + "%/" + st.GetMinHold().AsDuration().String()
			if i == experiment.RampStep(e) {
				s = "[" + s + "]"
			}
			ss = append(ss, s)
		}
		since := ""
		if t := e.GetRampState().GetStepStartTime(); t != nil {
			since = " since " + t.AsTime().UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(w, "ramp: %s (at step %d%s)\n", strings.Join(ss, " -> "), experiment.RampStep(e), since)
	}
	if rb := e.GetRollback(); rb != nil {
		ack := "not acknowledged (allotctl start --acknowledge-rollback)"
		if rb.GetAcknowledgedBy() != "" {
			ack = "acknowledged by " + rb.GetAcknowledgedBy() + " at " + rb.GetAcknowledgeTime().AsTime().UTC().Format(time.RFC3339)
		}
		applied := "its proxies not yet counted"
		switch {
		case rb.GetAppliedTime() != nil:
			applied = fmt.Sprintf("applied by %d/%d proxies at %s", rb.GetApplied(), rb.GetProxies(), rb.GetAppliedTime().AsTime().UTC().Format(time.RFC3339))
		case rb.GetProxies() > 0:
			applied = fmt.Sprintf("applied by %d/%d proxies", rb.GetApplied(), rb.GetProxies())
		}
		fmt.Fprintf(w, "rolled back by guardrail %d (%s) at %s: variation %d %g against control %d %g (%d/%d requests, statistic %g, p %g); revision %d %s; %s\n",
			rb.GetGuardrail(), rb.GetMetric(), rb.GetTime().AsTime().UTC().Format(time.RFC3339), rb.GetVariation(), rb.GetTreatmentValue(),
			rb.GetControl(), rb.GetControlValue(), rb.GetTreatmentRequests(), rb.GetControlRequests(), rb.GetStatistic(), rb.GetPValue(),
			rb.GetRevision(), applied, ack)
	}
}

const listUsage = `Usage: allotctl list [--owner NS] [--status STATUS] [--service CLUSTER] [-o table|json|yaml]

Lists experiments sorted by key. --service keeps those that apply to the
proxies of that cluster (targeted at it or at every service).
`

func runList(ctx context.Context, env *Env, args []string) error {
	fs, conn := newFlagSet(env, "list", listUsage, true)
	owner := fs.String("owner", "", "only experiments of this owner `namespace`")
	status := fs.String("status", "", "only experiments with this `status`: draft, running, paused, stopped")
	service := fs.String("service", "", "only experiments that apply to this `cluster`")
	if _, ok, err := parseFlags(fs, args, 0, 0); !ok {
		return err
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	q := url.Values{}
	for k, v := range map[string]string{"owner": *owner, "status": *status, "service": *service} {
		if v != "" {
			q.Set(k, v)
		}
	}
	path := "/v1/experiments"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	b, err := c.do(ctx, "GET", path, nil)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	if conn.output != "table" {
		return writeData(env.Stdout, conn.output, b)
	}
	var l struct {
		Experiments []json.RawMessage `json:"experiments"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return fmt.Errorf("decode list: %w", err)
	}
	var exps []*experimentv1.Experiment
	for _, raw := range l.Experiments {
		e, err := decodeExperiment(raw)
		if err != nil {
			return err
		}
		exps = append(exps, e)
	}
	if len(exps) == 0 {
		fmt.Fprintln(env.Stdout, "No experiments.")
		return nil
	}
	return writeTable(env.Stdout, exps)
}

// writeTable prints experiments as a table.
func writeTable(w io.Writer, exps []*experimentv1.Experiment) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tOWNER\tSTATUS\tSERVICES\tVARIATIONS\tBUCKETS\tSCHEDULE\tREVISION\tUPDATED\tBY")
	for _, e := range exps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n",
			e.GetKey(), dash(e.GetOwner()), experiment.Status(e), dash(strings.Join(e.GetServices(), ",")),
			variations(e), buckets(e), schedule(e), e.GetRevision(), e.GetUpdateTime().AsTime().UTC().Format(time.RFC3339), dash(e.GetUpdatedBy()))
	}
	return tw.Flush()
}

// buckets renders the sticky bucketing of an experiment in one word (a
// column scripts can split on spaces): "v2" (bucketVersion), then
// ",min=v2" when minBucketVersion is set and ",sticky=off" when
// disableStickyBucketing is.
func buckets(e *experimentv1.Experiment) string {
	s := "v" + strconv.Itoa(int(e.GetBucketVersion()))
	if m := e.GetMinBucketVersion(); m != 0 {
		s += ",min=v" + strconv.Itoa(int(m))
	}
	if e.GetDisableStickyBucketing() {
		s += ",sticky=off"
	}
	return s
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// variations renders "control=0.5,treatment=0.5" (values with weights when
// set).
func variations(e *experimentv1.Experiment) string {
	var parts []string
	for i, v := range e.GetVariations() {
		b, _ := protojson.Marshal(v)
		s := strings.Trim(string(b), `"`)
		if i < len(e.GetWeights()) {
			s += "=" + strconv.FormatFloat(e.GetWeights()[i], 'g', -1, 64)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}

// schedule renders "START..END" with "-" for an open side.
func schedule(e *experimentv1.Experiment) string {
	if e.GetStartTime() == nil && e.GetEndTime() == nil {
		return "-"
	}
	side := func(ok bool, t time.Time) string {
		if !ok {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	}
	return side(e.GetStartTime() != nil, e.GetStartTime().AsTime()) + ".." + side(e.GetEndTime() != nil, e.GetEndTime().AsTime())
}

// ---------------------------------------------------------------- delete, start, pause, stop

const deleteUsage = `Usage: allotctl delete KEY [--revision N]

Deletes an experiment; with --revision only if it is still at that revision.
`

func runDelete(ctx context.Context, env *Env, args []string) error {
	fs, conn := newFlagSet(env, "delete", deleteUsage, true)
	rev := fs.Int64("revision", 0, "delete only at this `revision` (0: any)")
	wait := waitFlag(fs)
	pos, ok, err := parseFlags(fs, args, 1, 1)
	if !ok {
		return err
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	path := "/v1/experiments/" + url.PathEscape(pos[0])
	if *rev != 0 {
		path += "?revision=" + strconv.FormatInt(*rev, 10)
	}
	b, err := c.do(ctx, "DELETE", withWait(path, *wait), nil)
	if err != nil {
		return fmt.Errorf("delete %s: %w", pos[0], err)
	}
	_, ro, err := unwrapWaited(b, *wait)
	if err != nil {
		return err
	}
	if conn.output != "table" {
		if err := writeData(env.Stdout, conn.output, []byte(`{"key":`+strconv.Quote(pos[0])+`,"action":"deleted"}`)); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(env.Stdout, "experiment/%s deleted\n", pos[0])
	}
	return reportRollout(env.Stderr, "experiment/"+pos[0], ro)
}

// transitionUsage is the usage of start, pause and stop.
const transitionUsage = `Usage: allotctl %s KEY [--revision N]

%s
Allowed: draft → running|stopped, running → paused|stopped,
paused → running|stopped; stopped is final. With --revision the change
applies only if the experiment is still at that revision.
`

// transition returns the start, pause or stop subcommand.
func transition(action, summary string) func(context.Context, *Env, []string) error {
	return func(ctx context.Context, env *Env, args []string) error {
		fs, conn := newFlagSet(env, action, fmt.Sprintf(transitionUsage, action, summary), true)
		rev := fs.Int64("revision", 0, "change only at this `revision` (0: any)")
		ack := new(bool)
		if action == "start" {
			fs.BoolVar(ack, "acknowledge-rollback", false, "acknowledge the experiment's guardrail rollback and start it again")
		}
		wait := waitFlag(fs)
		pos, ok, err := parseFlags(fs, args, 1, 1)
		if !ok {
			return err
		}
		c, err := conn.client()
		if err != nil {
			return err
		}
		var body []byte
		if *rev != 0 || *ack {
			body, err = protojson.Marshal(&adminv1.StartExperimentRequest{Revision: *rev, AcknowledgeRollback: *ack})
			if err != nil {
				return err
			}
		}
		b, err := c.do(ctx, "POST", withWait("/v1/experiments/"+url.PathEscape(pos[0])+":"+action, *wait), body)
		if err != nil {
			return fmt.Errorf("%s %s: %w", action, pos[0], err)
		}
		b, ro, err := unwrapWaited(b, *wait)
		if err != nil {
			return err
		}
		if conn.output != "table" {
			if err := writeData(env.Stdout, conn.output, b); err != nil {
				return err
			}
			return reportRollout(env.Stderr, "experiment/"+pos[0], ro)
		}
		e, err := decodeExperiment(b)
		if err != nil {
			return err
		}
		fmt.Fprintf(env.Stdout, "experiment/%s %s (revision %d)\n", e.GetKey(), experiment.Status(e), e.GetRevision())
		return reportRollout(env.Stderr, "experiment/"+e.GetKey(), ro)
	}
}

// ---------------------------------------------------------------- history

const historyUsage = `Usage: allotctl history [KEY] [-o table|json|yaml]

Prints the audit history, oldest first: one experiment's, or every change
without KEY. The table lists the definition fields each change touched;
-o json|yaml has the whole experiment before and after.
`

func runHistory(ctx context.Context, env *Env, args []string) error {
	fs, conn := newFlagSet(env, "history", historyUsage, true)
	pos, ok, err := parseFlags(fs, args, 0, 1)
	if !ok {
		return err
	}
	c, err := conn.client()
	if err != nil {
		return err
	}
	path := "/v1/history"
	if len(pos) == 1 {
		path = "/v1/experiments/" + url.PathEscape(pos[0]) + "/history"
	}
	b, err := c.do(ctx, "GET", path, nil)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	if conn.output != "table" {
		return writeData(env.Stdout, conn.output, b)
	}
	var h struct {
		Changes []struct {
			Revision string          `json:"revision"`
			Key      string          `json:"key"`
			Op       string          `json:"op"`
			Actor    string          `json:"actor"`
			Time     time.Time       `json:"time"`
			Before   json.RawMessage `json:"before"`
			After    json.RawMessage `json:"after"`
		} `json:"changes"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("decode history: %w", err)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tTIME\tKEY\tOP\tACTOR\tCHANGED")
	for _, ch := range h.Changes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ch.Revision, ch.Time.UTC().Format(time.RFC3339), ch.Key, ch.Op, ch.Actor, changed(ch.Before, ch.After))
	}
	return tw.Flush()
}

// changed lists the definition fields (by JSON name) that differ between
// two experiment JSON documents, ignoring output-only metadata
// (experiment.Spec).
func changed(before, after json.RawMessage) string {
	if len(before) == 0 || len(after) == 0 {
		return "-"
	}
	eb, err1 := decodeExperiment(before)
	ea, err2 := decodeExperiment(after)
	if err1 != nil || err2 != nil {
		return "-"
	}
	a, b := experiment.Spec(eb).ProtoReflect(), experiment.Spec(ea).ProtoReflect()
	var out []string
	fields := a.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if a.Has(fd) == b.Has(fd) && a.Get(fd).Equal(b.Get(fd)) {
			continue
		}
		d := fd.JSONName()
		if fd.Name() == "status" {
			d = fmt.Sprintf("status %s→%s", experiment.Status(eb), experiment.Status(ea))
		}
		out = append(out, d)
	}
	slices.Sort(out)
	if len(out) == 0 {
		return "-"
	}
	return strings.Join(out, ",")
}

// protoError is a protojson error without its "proto:" prefix, which
// protojson deliberately spells with a random space (U+0020 or U+00A0).
func protoError(err error) string {
	return strings.TrimLeft(strings.TrimPrefix(err.Error(), "proto:"), " \u00a0")
}
