package cli

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	adminv1 "github.com/allotmesh/allot/proto/allot/admin/v1"
)

const outcomesUsage = `Usage: allotctl outcomes KEY [--minutes N] [--series]

Prints what became of the requests an observed experiment (observe: true)
assigned, per variation, summed over every proxy that reports to the server:
over the last N minutes (default 5, at most 60) the requests, their share
against the variation's weight, the error rate (5xx over the requests
answered: a request the client abandoned or reset before the response is
aborted, counted apart and never an error) and the latency p50/p95/p99 in
ms; and since the experiment's current assignment revision (figures start
over when its variations, weights, coverage, hashing, seed, condition,
namespace, bucket versions, schedule or status change) the requests, share,
error rate and aborted requests. --series prints the last N
minutes minute by minute instead: a row per minute and variation, oldest
first, from the revision's minute at the earliest (MINUTE is the minute's
start in UTC; the last row's minute is the current one, still counting),
with its requests, error rate and latency p50/p95 in ms ("-" when no
response was timed). -o json|yaml prints the server's document.
`

func runOutcomes(ctx context.Context, env *Env, args []string) error {
	fs, conn := newFlagSet(env, "outcomes", outcomesUsage, true)
	minutes := fs.Int("minutes", 5, "the window: the last `N` minutes (1 to 60)")
	series := fs.Bool("series", false, "print the window minute by minute")
	pos, ok, err := parseFlags(fs, args, 1, 1)
	if !ok {
		return err
	}
	b, err := conn.get(ctx, env, "outcomes", "/v1/experiments/"+url.PathEscape(pos[0])+"/outcomes?minutes="+strconv.Itoa(*minutes))
	if b == nil {
		return err
	}
	var r adminv1.Outcomes
	if err := protojson.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("decode response: %w", err)
	}
	fmt.Fprintf(env.Stdout, "experiment %s, assignment revision %s since %s\n", r.Experiment, r.Revision, r.Since.AsTime().UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	if *series {
		printSeries(tw, &r)
		return tw.Flush()
	}
	m := fmt.Sprintf("%dM", r.Minutes)
	fmt.Fprintf(tw, "VARIATION\tWEIGHT\tREQUESTS_%s\tSHARE_%s\tERRORS_%s\tP50_MS\tP95_MS\tP99_MS\tREQUESTS\tSHARE\tERRORS\tABORTED\n", m, m, m)
	for i, w := range r.Window {
		t := &adminv1.VariationOutcomes{}
		if i < len(r.Total) {
			t = r.Total[i]
		}
		p50, p95, p99 := quantiles(w.LatencyMs)
		fmt.Fprintf(tw, "%d\t%.2f\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%d\n", w.Variation, w.Weight, w.Requests, pct(w.Share), pct(w.ErrorRate),
			p50, p95, p99, t.Requests, pct(t.Share), pct(t.ErrorRate), t.Aborted)
	}
	return tw.Flush()
}

// printSeries prints r's series: a row per minute and variation.
func printSeries(tw *tabwriter.Writer, r *adminv1.Outcomes) {
	fmt.Fprintf(tw, "MINUTE\tVARIATION\tREQUESTS\tERRORS\tP50_MS\tP95_MS\n")
	for _, m := range r.Series {
		start := m.Start.AsTime().UTC().Format(time.RFC3339)
		for _, v := range m.Variations {
			p50, p95, _ := quantiles(v.LatencyMs)
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", start, v.Variation, v.Requests, pct(v.ErrorRate), p50, p95)
		}
	}
}

// quantiles are l's p50, p95 and p99 in ms; "-" when absent.
func quantiles(l *adminv1.LatencyQuantiles) (p50, p95, p99 string) {
	if l == nil {
		return "-", "-", "-"
	}
	return ms(l.P50), ms(l.P95), ms(l.P99)
}

func pct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }
func ms(f float64) string  { return strconv.FormatFloat(f, 'f', 1, 64) }
