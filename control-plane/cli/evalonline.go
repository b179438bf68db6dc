package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/allotmesh/allot/filter/engine"
	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

const evalOnlineUsage = `Usage: allotctl eval --server URL [--service CLUSTER] [--time RFC3339] --attributes JSON | --attributes-file JSONL

Online mode (with --server; without it eval evaluates a file offline, see
"allotctl help eval"): asks the admin API what the proxies of --service would
assign now (or at --time), using the stored experiments and the exact
configuration those proxies receive. The output has offline mode's JSON
lines plus the configuration version:
  {"attributes": {...}, "version": "...", "assignments": [{"experiment", "variationId", "value", "inExperiment", "hashUsed"}, ...]}
`

// runEvalDispatch runs eval online when --server is given (its -h then
// shows the online flags), offline otherwise.
func runEvalDispatch(ctx context.Context, env *Env, args []string) error {
	for _, a := range args {
		if a == "--server" || a == "-server" || strings.HasPrefix(a, "--server=") || strings.HasPrefix(a, "-server=") {
			return runEvalOnline(ctx, env, args)
		}
	}
	return runEval(ctx, env, args)
}

// evalOnlineOpts are online eval's own flags.
type evalOnlineOpts struct {
	conn      *connFlags
	service   *string
	at        *string
	attrsJSON *string
	attrsFile *string
}

func evalOnlineFlags(env *Env) (*flag.FlagSet, evalOnlineOpts) {
	fs, conn := newFlagSet(env, "eval", evalOnlineUsage, false)
	o := evalOnlineOpts{conn: conn}
	o.service = fs.String("service", "", "emulate the proxies of this `cluster` (empty: untargeted experiments only)")
	o.at = fs.String("time", "", "evaluate schedules at this `RFC3339` time instead of now")
	o.attrsJSON = fs.String("attributes", "", "one attribute set as a `JSON` object")
	o.attrsFile = fs.String("attributes-file", "", "attribute sets, one JSON object per line (`JSONL`; - for stdin)")
	return fs, o
}

func runEvalOnline(ctx context.Context, env *Env, args []string) error {
	fs, o := evalOnlineFlags(env)
	if _, ok, err := parseFlags(fs, args, 0, 0); !ok {
		return err
	}
	if *o.attrsJSON == "" && *o.attrsFile == "" {
		return fmt.Errorf("%w: eval needs --attributes or --attributes-file", ErrUsage)
	}
	var at string
	if *o.at != "" {
		t, err := time.Parse(time.RFC3339, *o.at)
		if err != nil {
			return fmt.Errorf("%w: --time: %v", ErrUsage, err)
		}
		at = t.UTC().Format(time.RFC3339Nano)
	}
	c, err := o.conn.client()
	if err != nil {
		return err
	}
	var sets []engine.Attributes
	if *o.attrsJSON != "" {
		a, err := decodeAttributes([]byte(*o.attrsJSON))
		if err != nil {
			return fmt.Errorf("--attributes: %w", err)
		}
		sets = append(sets, a)
	}
	if *o.attrsFile != "" {
		more, err := readAttributesFile(env.Stdin, *o.attrsFile)
		if err != nil {
			return err
		}
		sets = append(sets, more...)
	}
	w := bufio.NewWriter(env.Stdout)
	defer w.Flush()
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, attrs := range sets {
		req := map[string]any{"service": *o.service, "attributes": attrs}
		if at != "" {
			req["time"] = at
		}
		body, err := json.Marshal(req)
		if err != nil {
			return err
		}
		b, err := c.do(ctx, "POST", "/v1/evaluate", body)
		if err != nil {
			return fmt.Errorf("evaluate: %w", err)
		}
		resp := &adminv1.EvaluateExperimentsResponse{}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(b, resp); err != nil {
			return fmt.Errorf("decode evaluation: %w", err)
		}
		line := struct {
			Attributes  engine.Attributes `json:"attributes"`
			Version     string            `json:"version"`
			Assignments []evalAssignment  `json:"assignments"`
		}{Attributes: attrs, Version: resp.GetVersion(), Assignments: []evalAssignment{}}
		for _, a := range resp.GetAssignments() {
			line.Assignments = append(line.Assignments, evalAssignment{a.GetExperiment(), int(a.GetVariationId()), a.GetValue(), a.GetInExperiment(), a.GetHashUsed()})
		}
		if err := enc.Encode(line); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	return w.Flush()
}
