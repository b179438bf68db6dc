package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/allotmesh/allot/control-plane/translate"
	"github.com/allotmesh/allot/filter/engine"
	experimentv1 "github.com/allotmesh/allot/proto/allot/experiment/v1"
)

const evalUsage = `Usage: allotctl eval -f FILE [--service CLUSTER] [--time RFC3339] [--mesh FILE] [--attributes JSON] [--attributes-file JSONL] [--summary]

Evaluates experiment definitions offline, exactly as the proxies of
--service would with FILE's experiments stored. FILE is what "allotctl
apply" takes and is checked as apply's server checks it: JSON or YAML, one
experiment, a list of experiments, or {"experiments": [...]}; unknown fields
are rejected, and each experiment is validated by the admin API's own rules.
Then, as allotd does, the experiments running at --time (default now) that
target --service (empty: untargeted experiments only) are built into the
filter configuration the proxies receive, decoded and compiled by the
filter's own decoder and engine. Experiments the proxies do not receive
(draft, paused, stopped, outside their schedule, for another service) are
not listed.

--mesh FILE holds the mesh settings allotd runs with (its -mesh file: saved
groups, header names, attributes), decoded and checked as allotd decodes
them; saved groups for $inGroup conditions go there, not in FILE.

Attribute sets come from --attributes (one JSON object) and/or
--attributes-file (one JSON object per line; "-" reads standard input).

For each attribute set eval prints one JSON line:
  {"attributes": {...}, "assignments": [{"experiment", "variationId", "value", "inExperiment", "hashUsed"}, ...]}
with --summary it prints the distribution per experiment and variation instead.
Invalid definitions print every validation error, one per line, and fail.

Flags:
`

// evalAssignment is one assignment in eval's JSON output.
type evalAssignment struct {
	Experiment   string `json:"experiment"`
	VariationID  int    `json:"variationId"`
	Value        string `json:"value"`
	InExperiment bool   `json:"inExperiment"`
	HashUsed     bool   `json:"hashUsed"`
}

type evalLine struct {
	Attributes  engine.Attributes `json:"attributes"`
	Assignments []evalAssignment  `json:"assignments"`
}

func runEval(ctx context.Context, env *Env, args []string) error {
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), evalUsage)
		fs.PrintDefaults()
	}
	file := fs.String("f", "", "experiment definitions `FILE` (JSON or YAML, as apply takes)")
	service := fs.String("service", "", "emulate the proxies of this `cluster` (empty: untargeted experiments only)")
	atFlag := fs.String("time", "", "evaluate schedules at this `RFC3339` time instead of now")
	meshFile := fs.String("mesh", "", "mesh settings `FILE` (allotd's -mesh: saved groups, header names, attributes)")
	attrsJSON := fs.String("attributes", "", "one attribute set as a `JSON` object")
	attrsFile := fs.String("attributes-file", "", "attribute sets, one JSON object per line (`JSONL`; - for stdin)")
	summary := fs.Bool("summary", false, "print the distribution per experiment and variation instead of one line per attribute set")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", ErrUsage, fs.Args())
	}
	if *file == "" {
		return fmt.Errorf("%w: eval needs -f FILE", ErrUsage)
	}
	if *attrsJSON == "" && *attrsFile == "" {
		return fmt.Errorf("%w: eval needs --attributes or --attributes-file", ErrUsage)
	}
	at := time.Now()
	if *atFlag != "" {
		t, err := time.Parse(time.RFC3339, *atFlag)
		if err != nil {
			return fmt.Errorf("%w: --time: %v", ErrUsage, err)
		}
		at = t
	}

	mesh, err := readMesh(*meshFile)
	if err != nil {
		return err
	}
	exps, err := readExperiments(*file)
	if err != nil {
		return err
	}
	if err := validateAll(*file, exps, mesh); err != nil {
		return err
	}
	cfg, err := translate.FilterConfig(exps, *service, at, mesh)
	if err != nil {
		return err
	}
	_, set, err := translate.Compile(cfg)
	if err != nil {
		return fmt.Errorf("%s: compile the filter configuration of %q:\n%w", *file, *service, err)
	}

	var sets []engine.Attributes
	if *attrsJSON != "" {
		a, err := decodeAttributes([]byte(*attrsJSON))
		if err != nil {
			return fmt.Errorf("--attributes: %w", err)
		}
		sets = append(sets, a)
	}
	if *attrsFile != "" {
		more, err := readAttributesFile(env.Stdin, *attrsFile)
		if err != nil {
			return err
		}
		sets = append(sets, more...)
	}

	if *summary {
		return writeSummary(env.Stdout, set, sets)
	}
	w := bufio.NewWriter(env.Stdout)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	var buf []engine.Assignment
	for _, attrs := range sets {
		if err := ctx.Err(); err != nil {
			return err
		}
		buf = set.Assign(buf[:0], attrs)
		line := evalLine{Attributes: attrs, Assignments: make([]evalAssignment, len(buf))}
		for i, a := range buf {
			line.Assignments[i] = evalAssignment{a.Key, a.VariationID, a.Value, a.InExperiment, a.HashUsed}
		}
		if err := enc.Encode(line); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// readMesh reads a mesh settings file as allotd's -mesh is read
// (translate.ParseMesh); no file is the filter's defaults.
func readMesh(path string) (translate.Mesh, error) {
	if path == "" {
		return translate.Mesh{}, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return translate.Mesh{}, fmt.Errorf("--mesh: %w", err)
	}
	f, err := translate.ParseMesh(b)
	if err != nil {
		return translate.Mesh{}, fmt.Errorf("--mesh %s: invalid mesh settings:\n%w", path, err)
	}
	return translate.Mesh{Filter: f}, nil
}

// validateAll checks each experiment as the admin API does on apply
// (translate.Validate), listing every problem as experiments[i].field.
func validateAll(path string, exps []*experimentv1.Experiment, mesh translate.Mesh) error {
	var lines []string
	for i, e := range exps {
		err := translate.Validate(e, mesh)
		if err == nil {
			continue
		}
		var ae *translate.ValidationError
		if !errors.As(err, &ae) {
			return err
		}
		for _, d := range ae.Details {
			lines = append(lines, "experiments["+strconv.Itoa(i)+"]."+d)
		}
	}
	if len(lines) > 0 {
		return fmt.Errorf("%s: invalid experiment definitions:\n%s", path, strings.Join(lines, "\n"))
	}
	return nil
}

// readDefinitions reads a definitions file as JSON: a .yaml/.yml file, or
// one that is not valid JSON and not named .json, is converted from YAML.
func readDefinitions(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read definitions: %w", err)
	}
	ext := strings.ToLower(filepath.Ext(path))
	if ext == ".yaml" || ext == ".yml" || !json.Valid(data) && ext != ".json" {
		if data, err = yaml.YAMLToJSONStrict(data); err != nil { // a key given twice is an error
			return nil, fmt.Errorf("%s: parse YAML: %w", path, err)
		}
	}
	return data, nil
}

func decodeAttributes(data []byte) (engine.Attributes, error) {
	var a engine.Attributes
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("want a JSON object: %w", err)
	}
	if a == nil {
		return nil, errors.New("want a JSON object, got null")
	}
	return a, nil
}

func readAttributesFile(stdin io.Reader, path string) ([]engine.Attributes, error) {
	var r io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("read attributes: %w", err)
		}
		defer f.Close()
		r = f
	}
	var out []engine.Attributes
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		a, err := decodeAttributes(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read attributes %s: %w", path, err)
	}
	return out, nil
}

// writeSummary prints, per experiment, how many attribute sets landed in
// each variation and how many were not in the experiment.
func writeSummary(w io.Writer, set *engine.Set, sets []engine.Attributes) error {
	counts := make([][]int, set.Len()) // per experiment: per variation, then "not in"
	for i := range counts {
		counts[i] = make([]int, len(set.Variations(i))+1)
	}
	var buf []engine.Assignment
	for _, attrs := range sets {
		buf = set.Assign(buf[:0], attrs)
		for i, a := range buf {
			if a.InExperiment {
				counts[i][a.VariationID]++
			} else {
				counts[i][len(counts[i])-1]++
			}
		}
	}
	total := len(sets)
	pct := func(n int) string {
		if total == 0 {
			return "-"
		}
		return strconv.FormatFloat(100*float64(n)/float64(total), 'f', 2, 64) + "%"
	}
	fmt.Fprintf(w, "%d attribute sets, %d experiments\n\n", total, set.Len())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "EXPERIMENT\tVARIATION\tVALUE\tUNITS\tSHARE")
	keys := set.Keys()
	for i, vals := range counts {
		values := set.Variations(i)
		for v, n := range vals {
			id, value := strconv.Itoa(v), ""
			if v == len(values) {
				id, value = "-", "(not in experiment)"
			} else {
				value = strconv.Quote(values[v])
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", keys[i], id, value, n, pct(n))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	return nil
}
